"""CosyVoice 2's and CosyVoice 3's speech-token LMs (engines/cosyvoice/llm.py, ras.py) on the shared Qwen decoder.

Against tests/parity/data/cosyvoice_llm (scripts/parity/cosyvoice_llm_references.py: upstream's Qwen2LM and
CosyVoice3LM.inference at FunAudioLLM/CosyVoice ace7c47 over transformers 4.51.3's Qwen2, under the parity pins, a
tiny Qwen2 at the released vocabulary filled by cosyvoice_weights.lm_state). In a pinned subprocess, per case
(zero-shot with two seeds, a longer text, no prompt speech, no prompt at all, a one-token text that reaches max_len):
the tokens drawn with a generator seeded as upstream seeds the global one (identical: the nucleus list's length, the
repetition redraws, min_len's forbidden end and the stop ids all decide them), and the LM head's logits along
upstream's tokens (bitwise; teacher-forced within TOLERANCE where the floats are not the writer's). In process:
the sampler against upstream's algorithm written out, CosyVoice 3's silent-token rule and <|endofprompt|> check,
the key names, one-line errors.
"""

import functools
import json
import sys
from pathlib import Path

import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cosyvoice_parts  # noqa: E402
from fallback import Comparison  # noqa: E402
from helpers import HostReads, reference_sets, run_pinned  # noqa: E402

from mizuoto.core.errors import InputError  # noqa: E402
from mizuoto.engines.cosyvoice import llm, ras  # noqa: E402

SET = "cosyvoice_llm"
TOLERANCE = 2e-4  # the logits reach +-50 (the scaled head): spread 2e-5
HEAD = "llm.model.lm_head.weight"  # the tied text head: never used, not loaded


def committed() -> Path:
    return reference_sets().SETS[SET].committed


@functools.cache
def info() -> dict:
    return json.loads((committed() / "references.json").read_text())


@functools.cache
def inputs() -> dict:
    from safetensors.torch import load_file

    return load_file(str(committed() / "references.safetensors"))


def build(recorded: dict, version: str) -> llm.CosyVoiceLM:
    return cosyvoice_parts.lm(recorded, version)


def case_inputs(refs: dict, key: str) -> tuple:
    return refs[f"{key}/text"], refs[f"{key}/prompt_text"], refs[f"{key}/prompt_speech"]


def ours(folder: Path, out: Path) -> dict:
    from safetensors.torch import load_file, save_file

    refs = load_file(str(folder / "references.safetensors"))
    recorded = json.loads((folder / "references.json").read_text())
    results = {}
    for version in recorded["seeds"]:
        model = build(recorded, version)
        for key, case in recorded["cases"].items():
            if not key.startswith(version):
                continue
            ids = case_inputs(refs, key)
            g = torch.Generator().manual_seed(case["seed"])
            results[f"{key}/tokens"] = torch.tensor(list(model.generate(*ids, generator=g)), dtype=torch.int64)
            forced = model.teacher_forced(model.prompt(*ids), refs[f"{key}/tokens"].tolist())
            results[f"{key}/logits"] = forced[: case["steps"]]
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"saved": str(out)}


def test_upstreams_tokens_and_logits(tmp_path, record_property):
    from safetensors.torch import load_file

    out = tmp_path / "ours.safetensors"
    run_pinned(__file__, committed(), out)
    comparison = Comparison.for_set(SET)
    theirs, mine = inputs(), load_file(str(out))
    for key in info()["cases"]:
        comparison.teacher_forced(f"{key} LM head", mine[f"{key}/logits"], theirs[f"{key}/logits"], TOLERANCE)
        comparison.free_running(f"{key} speech tokens", mine[f"{key}/tokens"], theirs[f"{key}/tokens"])
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")


def test_the_set_covers_stops_max_len_both_versions_and_every_parameter():
    recorded = info()
    assert recorded["upstream"]["commit"].startswith("ace7c47") and not recorded["upstream"]["modified"]
    assert recorded["environment"]["versions"]["transformers"] == "4.51.3"
    cases = recorded["cases"]
    for version in ("cv2", "cv3"):  # both stop on their own stop ids, after min_len (2 x text) at the earliest
        mine = [c for k, c in cases.items() if k.startswith(version)]
        assert any(c["stopped"] for c in mine)
        assert all(c["tokens"] >= 2 * c["max_len"] // 20 for c in mine if version == "cv2")
    assert any(not c["stopped"] and c["tokens"] == c["max_len"] for c in cases.values())  # the same loop's max_len
    assert recorded["qwen"]["vocab_size"] > llm.END_OF_PROMPT and recorded["qwen"]["num_key_value_heads"] > 1
    for version in ("cv2", "cv3"):  # our keys are llm.pt's (in the shared decoder's order), less the tied text head
        assert sorted(build(recorded, version).state_dict()) == sorted(set(recorded["state_dict"][version]) - {HEAD})
    assert max(recorded["spread"]["max"].values()) * 5 < TOLERANCE


# ---------------------------------------------------------------------------------------------------
# In process


def upstream_ras(scores, decoded, generator, top_p=0.8, top_k=25, win_size=10, tau_r=0.1):
    """cosyvoice/utils/common.py's ras_sampling as upstream writes it, on a given generator."""
    prob, indices, cum = [], [], 0.0
    values, order = scores.softmax(dim=0).sort(descending=True, stable=True)
    for i in range(len(order)):
        if cum < top_p and len(prob) < top_k:
            cum += values[i]
            prob.append(values[i])
            indices.append(order[i])
        else:
            break
    top = torch.tensor(indices)[torch.tensor(prob).multinomial(1, replacement=True, generator=generator)].item()
    if (torch.tensor(decoded[-win_size:]) == top).sum().item() >= win_size * tau_r:
        scores[top] = -float("inf")
        top = scores.softmax(dim=0).multinomial(1, replacement=True, generator=generator).item()
    return top


@pytest.mark.parametrize("scale", [0.5, 3.0, 12.0], ids=["flat", "peaked", "one-hot"])
def test_ras_is_upstreams_algorithm_draw_for_draw(scale):
    g = torch.Generator().manual_seed(3)
    theirs_g, ours_g = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    decoded_theirs, decoded_ours = [], []
    for _ in range(60):
        scores = (torch.randn(300, generator=g) * scale).log_softmax(0)
        a = upstream_ras(scores.clone(), decoded_theirs, theirs_g)
        b = ras.ras(scores.clone(), decoded_ours, ras.RELEASED, ours_g)
        assert a == b
        decoded_theirs.append(a)
        decoded_ours.append(b)
    assert torch.equal(theirs_g.get_state(), ours_g.get_state())


def test_top_p_is_compared_in_float32():
    """torch compares a float32 sum with a Python float in float32: a sum equal to float32(0.7) is not below 0.7."""
    p = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float32)
    params = ras.RasParams(top_p=0.7)
    assert not bool(torch.tensor(0.0) + p[0] < 0.7)  # upstream's first running sum
    picks = {ras.nucleus(p.log(), params, torch.Generator().manual_seed(s)) for s in range(20)}
    assert picks == {0}  # the list stopped after the first entry


def upstream_kept(scores, top_p, top_k=25) -> int:
    """How many entries upstream's nucleus_sampling loop keeps."""
    values, cum, n = scores.softmax(dim=0).sort(descending=True, stable=True)[0], 0.0, 0
    for value in values:
        if not (cum < top_p and n < top_k):
            break
        cum, n = cum + value, n + 1
    return n


@pytest.mark.parametrize("scale", [0.5, 3.0, 12.0], ids=["flat", "peaked", "one-hot"])
def test_the_device_nucleus_keeps_upstreams_list_without_a_host_read(scale):
    g = torch.Generator().manual_seed(4)
    for top_p in (0.8, 0.3, 0.95):
        for _ in range(40):
            scores = (torch.randn(300, generator=g) * scale).log_softmax(0)
            head = scores.softmax(0).sort(descending=True, stable=True)[0][:25]
            with HostReads() as mode:
                mask = ras.kept(head, top_p)
            assert mode.reads == [] and int(mask.sum()) == upstream_kept(scores, top_p)
            assert bool(mask[: int(mask.sum())].all())  # a prefix
    boundary = torch.tensor([0.7, 0.2, 0.1]).log()  # the float32 comparison: a sum equal to float32(0.7) stops
    assert int(ras.kept(boundary.softmax(0), 0.7).sum()) == upstream_kept(boundary, 0.7) == 1


@pytest.mark.parametrize("scale", [0.5, 3.0, 12.0], ids=["flat", "peaked", "one-hot"])
def test_device_ras_draws_upstreams_ids_and_state_with_one_read_a_step_where_the_list_is_top_k(scale):
    """On the CPU a kept list shorter than top_k consumes fewer numbers than DeviceRas's top_k (CUDA's Philox
    does not: the -m gpu test below): with top_p above 1 every list is top_k long and the draws must agree."""
    params = ras.RasParams(top_p=2.0)
    g = torch.Generator().manual_seed(3)
    theirs_g, ours_g = torch.Generator().manual_seed(9), torch.Generator().manual_seed(9)
    decoded, sampler, reads = [], ras.DeviceRas(params, "cpu"), 0
    for _ in range(60):
        scores = (torch.randn(300, generator=g) * scale).log_softmax(0)
        want = upstream_ras(scores.clone(), decoded, theirs_g, top_p=2.0)
        with HostReads() as mode:
            got = sampler(scores.clone(), ours_g)
        reads += len(mode.reads)
        assert got == want
        decoded.append(want)
    assert torch.equal(theirs_g.get_state(), ours_g.get_state()) and reads == 60
    assert len(set(decoded)) < len(decoded)  # the repetition redraw ran


@pytest.mark.gpu
@pytest.mark.parametrize("scale", [0.5, 3.0, 12.0], ids=["flat", "peaked", "one-hot"])
def test_on_cuda_device_ras_is_upstreams_draw_for_draw_at_the_released_settings(scale):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    g = torch.Generator().manual_seed(3)
    theirs_g, ours_g = torch.Generator("cuda").manual_seed(9), torch.Generator("cuda").manual_seed(9)
    decoded, sampler = [], ras.DeviceRas(ras.RELEASED, "cuda")
    for _ in range(60):
        scores = (torch.randn(300, generator=g) * scale).log_softmax(0).cuda()
        want = upstream_ras(scores.clone(), decoded, theirs_g)
        assert sampler(scores.clone(), ours_g) == want
        decoded.append(want)
    assert torch.equal(theirs_g.get_state(), ours_g.get_state())


def test_silent_tokens_after_five_in_a_row_are_dropped_for_cosyvoice_3_only():
    stream = [1, 2, 28, 29, 55, 248, 494, 7, 2241, 2241]
    assert list(llm.keep_silences(iter(stream), 3)) == [1, 2, 28, 29, 55, 7, 2241, 2241]
    assert list(llm.keep_silences(iter(stream), 2)) == stream


def test_bad_requests_are_one_line_errors():
    recorded, refs = info(), inputs()
    model = build(recorded, "cv3")
    text, prompt_text, speech = case_inputs(refs, "cv3/zero_shot")
    with pytest.raises(InputError, match="endofprompt"):
        list(model.generate(text, prompt_text[:, :-1], speech))
    with pytest.raises(InputError, match="one request at a time"):
        list(model.generate(text.expand(2, -1), prompt_text, speech))
    with pytest.raises(ValueError, match="version must be 2 or 3"):
        llm.CosyVoiceLM(llm.LMConfig(1, cosyvoice_parts.qwen_config(recorded["qwen"])))


def test_the_decoder_attends_at_the_cosyvoice_site_as_transformers_4_51():
    assert llm.ATTENTION.name == "cosyvoice.llm" and not llm.ATTENTION.approx_ok
    q, k = torch.randn(1, 4, 3, 16), torch.randn(1, 2, 3, 16)
    got = llm.transformers_4_51_sdpa(q, k, k, None, True, None, True, 0.0)
    want = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), k.repeat_interleave(2, 1),
                                                            is_causal=True)
    assert torch.equal(got, want)



def test_in_process_the_lm_decodes_at_its_site_close_to_upstreams_logits():
    """Unpinned, in this process: the decoder runs at the cosyvoice.llm site and its logits along upstream's tokens
    are near upstream's (the pinned comparison above is the exact one)."""
    recorded, refs = info(), inputs()
    key = "cv2/short_text"
    model = build(recorded, "cv2")
    lm_input = model.prompt(*case_inputs(refs, key))
    forced = model.teacher_forced(lm_input, refs[f"{key}/tokens"].tolist())[: recorded["cases"][key]["steps"]]
    torch.testing.assert_close(forced, refs[f"{key}/logits"], rtol=0, atol=1e-3)
    assert len(list(model.generate(*case_inputs(refs, key), generator=torch.Generator().manual_seed(0)))) >= 1

if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))


def _decode_both_ways(version: str, device: str, graphs) -> tuple[list[int], list[int]]:
    """One recorded case's tokens decoded by the eager forward and through the LM's DecoderSteps."""
    recorded, refs = info(), inputs()
    model = build(recorded, version).to(device)
    key = next(k for k in recorded["cases"] if k.startswith(version))
    ids = tuple(t.to(device) for t in case_inputs(refs, key))
    seed = recorded["cases"][key]["seed"]
    eager = list(model.generate(*ids, generator=torch.Generator(device).manual_seed(seed)))
    # the graphs draw nothing (RAS samples eagerly with the request's generator), so no Graphs.drawing
    stepped = list(model.generate(*ids, generator=torch.Generator(device).manual_seed(seed), steps=model.steps(graphs)))
    return eager, stepped


@pytest.mark.parametrize("version", ["cv2", "cv3"])
def test_generate_on_device_waits_once_a_step(version, monkeypatch):
    from mizuoto.runtime.accel import dispatch

    monkeypatch.setattr(dispatch, "DEBUG", False)  # DEBUG's mask check reads tensors on purpose
    recorded, refs = info(), inputs()
    model = build(recorded, version)
    key = next(k for k in recorded["cases"] if k.startswith(version))
    ids, seed, params = case_inputs(refs, key), recorded["cases"][key]["seed"], ras.RasParams(top_p=2.0)
    steps = model.steps(None)
    host = list(model.generate(*ids, generator=torch.Generator().manual_seed(seed), params=params, steps=steps))
    with HostReads() as mode:
        device = list(model.generate(*ids, generator=torch.Generator().manual_seed(seed), params=params, steps=steps,
                                     on_device=True))
    assert device == host and len(host) > 1
    stopped = len(host) < int(ids[0].shape[1] * llm.MAX_TOKEN_TEXT_RATIO)  # then the stop's step read too
    checked = version == "cv3"  # CosyVoice 3's check that the text holds <|endofprompt|>, once before the prefill
    assert len(mode.reads) == len(host) + stopped + checked


@pytest.mark.parametrize("version", ["cv2", "cv3"])
def test_the_decode_step_as_decoder_steps_is_the_eager_forward(version):
    eager, stepped = _decode_both_ways(version, "cpu", None)
    assert stepped == eager and len(eager) > 1


@pytest.mark.gpu
@pytest.mark.parametrize("version", ["cv2", "cv3"])
def test_the_decode_step_replayed_as_cuda_graphs_draws_the_eager_tokens(version):
    from mizuoto.runtime.graphs import Graphs

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    device = torch.device("cuda")
    with torch.cuda.device(device):
        eager, graphed = _decode_both_ways(version, "cuda", Graphs(device))
    assert graphed == eager
