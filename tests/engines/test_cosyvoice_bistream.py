"""CosyVoice's text bi-streaming LM decode (engines/cosyvoice/bistream.py) on the LMs of engines/cosyvoice/llm.py.

Against tests/parity/data/cosyvoice_bistream (scripts/parity/cosyvoice_bistream_references.py: upstream's
Qwen2LM.inference_bistream, CosyVoice 2 and 3, at FunAudioLLM/CosyVoice ace7c47 over transformers 4.51.3's Qwen2,
under the parity pins, cosyvoice_llm's tiny LMs with CosyVoice 3's special rows set as the writer says). In a pinned
subprocess per version, per case (with and without prompt speech or prompt text, text in pieces of 1, 3 or 7 tokens
or in one, a drawn fill, the text ending before the prompt speech is mixed in, upstream's ValueError while text
arrives and after it): the speech tokens drawn with a generator seeded as upstream seeds the global one, every
step's token (forced and drawn fills, the stopping or refused id), where and on which id it raised, and the LM
head's logits along upstream's steps (all of them bitwise by their sha256; their 32 largest within TOLERANCE,
teacher-forced, where the floats are not the writer's). In process: several positions fed onto the cache attend
exactly as transformers 4.51's 4-D mask makes them (bottom-right), the DecoderSteps path is the eager one, one-line
errors.
"""

import functools
import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import cosyvoice_parts  # noqa: E402
from fallback import Comparison  # noqa: E402
from helpers import reference_sets, run_pinned  # noqa: E402

from mizuoto.core.errors import InputError  # noqa: E402
from mizuoto.engines.cosyvoice import bistream, llm  # noqa: E402
from mizuoto.nn.qwen import Masked  # noqa: E402

SET = "cosyvoice_bistream"
TOLERANCE = 2e-4  # the logits reach +-50 (cosyvoice_llm's scaled head); the set's spread is at most 1/5 of it
HEAD = "llm.model.lm_head.weight"  # the tied text head: never used, not loaded
SHORT = {"cv2": "prompted_3", "cv3": "whole_chunks_1"}  # the in-process tests' cases: a few rounds, 60 to 100 steps


def committed() -> Path:
    return reference_sets().SETS[SET].committed


@functools.cache
def info() -> dict:
    return json.loads((committed() / "references.json").read_text())


@functools.cache
def inputs() -> dict:
    from safetensors.torch import load_file

    return load_file(str(committed() / "references.safetensors"))


def build(recorded: dict, refs: dict, version: str) -> llm.CosyVoiceLM:
    """cosyvoice_llm's LM of `version`; CosyVoice 3's special rows of llm_decoder zeroed but the fill's, the end row
    the writer's (recorded)."""
    model = cosyvoice_parts.lm(recorded, version)
    if version == "cv3":
        rows = recorded["cv3_rows"]
        weight = model.llm_decoder.weight
        with torch.no_grad():
            kept = weight[rows["kept"]].clone()
            weight[slice(*rows["zeroed"])] = 0
            weight[rows["end"]] = refs[rows["end_row"]]
            weight[rows["kept"]] = kept
    return model


def case_inputs(refs: dict, recorded: dict, key: str) -> tuple:
    """(the text as its pieces, prompt text, prompt speech tokens) of a case."""
    text, size = refs[f"{key}/text"][0].tolist(), recorded["cases"][key]["piece"] or refs[f"{key}/text"].shape[1]
    pieces = [text[i:i + size] for i in range(0, len(text), size)]
    return pieces, refs[f"{key}/prompt_text"], refs[f"{key}/prompt_speech"]


def speak(model, pieces, prompt_text, prompt_speech, seed: int, steps=None) -> tuple[list[int], str | None]:
    tokens, error = [], None
    try:
        for token in bistream.generate_bistream(model, pieces, prompt_text, prompt_speech,
                                                generator=torch.Generator().manual_seed(seed), steps=steps):
            tokens.append(token)
    except InputError as e:
        error = str(e)
    return tokens, error


def speak_observed(model, pieces, prompt_text, prompt_speech, seed: int) -> tuple[list[int], str | None, list, list]:
    """generate_bistream's run (its sampler) with every step's logits and token kept: (tokens, error, steps'
    tokens, logits)."""
    choose, logits, taken = bistream.sampler(model, bistream.RELEASED, torch.Generator().manual_seed(seed)), [], []

    def observed(step_logits, kind, out):
        logits.append(step_logits.clone())
        taken.append(choose(step_logits, kind, out))
        return taken[-1]

    tokens, error = [], None
    with torch.inference_mode():
        try:
            for token in bistream.run_bistream(model, pieces, prompt_text, prompt_speech, observed):
                tokens.append(token)
        except InputError as e:
            error = str(e)
    return tokens, error, taken, logits


def sha256(logits: torch.Tensor) -> str:
    return hashlib.sha256(logits.contiguous().numpy().tobytes()).hexdigest()


def ours(folder: Path, out: Path, version: str) -> dict:
    """One version's cases (a process each: census recording keeps every call of the process in memory)."""
    from safetensors.torch import load_file, save_file

    refs = load_file(str(folder / "references.safetensors"))
    recorded = json.loads((folder / "references.json").read_text())
    results, report = {}, {}
    model = build(recorded, refs, version)
    for key, case in recorded["cases"].items():
        if not key.startswith(version):
            continue
        ids = case_inputs(refs, recorded, key)
        tokens, error, taken, logits = speak_observed(model, *ids, case["seed"])
        along = refs[f"{key}/steps"].tolist()
        # the logits along upstream's steps: the free run's where it took them (the same feeds), else teacher-forced
        forced = torch.stack(logits) if taken == along else bistream.teacher_forced_bistream(model, *ids, along)
        results[f"{key}/tokens"] = torch.tensor(tokens, dtype=torch.int64)
        results[f"{key}/top_logits"] = forced.gather(1, refs[f"{key}/top_ids"])
        report[key] = {"error": error, "logits_sha256": sha256(forced), "logits_rows": forced.shape[0]}
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return report


def test_upstreams_tokens_errors_and_logits(tmp_path, record_property):
    from safetensors.torch import load_file

    report, mine = {}, {}
    for version in info()["seeds"]:
        out = tmp_path / f"{version}.safetensors"
        report.update(run_pinned(__file__, committed(), out, version))
        mine.update(load_file(str(out)))
    comparison = Comparison.for_set(SET)
    theirs, cases = inputs(), info()["cases"]
    for key, case in cases.items():
        got = report[key]
        assert got["logits_rows"] == case["steps"], f"{key}: {got['logits_rows']} steps, upstream {case['steps']}"
        comparison.teacher_forced(f"{key} LM head (32 largest)", mine[f"{key}/top_logits"],
                                  theirs[f"{key}/top_logits"], TOLERANCE)
        if comparison.exact:
            assert got["logits_sha256"] == case["logits_sha256"], f"{key}: the full logits differ from upstream's"
        comparison.free_running(f"{key} speech tokens", mine[f"{key}/tokens"], theirs[f"{key}/tokens"])
        if comparison.exact:  # where and how it raised: upstream's ValueError names the token it drew
            if case["error"] is None:
                assert got["error"] is None, f"{key}: {got['error']}"
            else:
                token = case["error"].rsplit(" ", 1)[-1]
                assert got["error"] is not None and f"special token {token} " in got["error"], (key, got["error"])
                assert ("still arriving" in got["error"]) == (case["ended"] == "text error")
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")


def test_the_set_covers_the_schedule_both_versions_and_every_parameter():
    recorded = info()
    assert recorded["upstream"]["commit"].startswith("ace7c47") and not recorded["upstream"]["modified"]
    assert recorded["environment"]["versions"]["transformers"] == "4.51.3"
    cases = recorded["cases"]
    for version in ("cv2", "cv3"):
        mine = {k.split("/", 1)[1]: c for k, c in cases.items() if k.startswith(version)}
        assert {c["piece"] for c in mine.values()} == {0, 1, 3, 7}
        assert sum(c["ended"].startswith("stop") for c in mine.values()) >= 10
        assert all(c["forced_fills"] >= 1 for n, c in mine.items() if n != "text_ends_mixing_1")
        assert mine["text_ends_mixing_1"]["final_from"] == 0  # nothing drawn before the text ended
        assert any(c["final_from"] and c["final_from"] > 30 for c in mine.values())  # several rounds, then the rest
    assert any(c["steps"] > bistream.FIRST_CAPACITY for c in cases.values())  # the KV cache grows
    ended = {c["ended"] for c in cases.values()}
    assert {"stop", "stop after a drawn fill", "text error", "final error"} <= ended
    assert any(c["drawn_fills"] for c in cases.values() if c["ended"].startswith("stop"))
    assert recorded["qwen"]["vocab_size"] > llm.END_OF_PROMPT and recorded["qwen"]["num_key_value_heads"] > 1
    for version in ("cv2", "cv3"):
        model = build(recorded, inputs(), version)
        assert sorted(model.state_dict()) == sorted(set(recorded["state_dict"][version]) - {HEAD})
        assert (bistream.end_id(model), bistream.fill_id(model)) == ((6561, 6563) if version == "cv2" else (6562, 6564))
    assert recorded["mix_ratio"] == list(bistream.MIX_RATIO)
    assert max(recorded["spread"]["max"].values()) * 5 < TOLERANCE


# ---------------------------------------------------------------------------------------------------
# In process


def transformers_4_51_chunk_mask(past: int, n: int) -> torch.Tensor:
    """The 4-D mask Qwen2Model._update_causal_mask (transformers 4.51.3, sdpa) builds for n new positions after
    `past` cached ones from inference_bistream's all-ones 2-D mask (masks[:, -1, :] of its tril): 0 where a query
    attends, finfo.min elsewhere, written out as upstream computes it."""
    dtype, total = torch.float32, past + n
    minimum = torch.finfo(dtype).min
    cache_position = torch.arange(past, total)
    mask = torch.full((n, total), fill_value=minimum, dtype=dtype)
    mask *= torch.arange(total) > cache_position.reshape(-1, 1)
    mask = mask[None, None, :, :].expand(1, 1, -1, -1).clone()
    padding = (mask + torch.ones(1, total, dtype=torch.bool)[:, None, None, :]) == 0
    return mask.masked_fill(padding, minimum)


def _chunk(model, x: torch.Tensor, past: int, mask: Masked | None = None) -> torch.Tensor:
    """x[:, :past] prefilled, then x[:, past:] fed at once onto the cache (with `mask`, else mask_for's)."""
    decoder = model.decoder
    cache = decoder.new_cache(1, x.shape[1])
    positions = torch.arange(x.shape[1])[None]
    decoder(x[:, :past], positions[:, :past], cache, decoder.mask_for(None, past, past))
    n = x.shape[1] - past
    return decoder(x[:, past:], positions[:, past:], cache, mask or decoder.mask_for(None, n, x.shape[1]))


@torch.inference_mode()
@pytest.mark.parametrize("version", ["cv2", "cv3"])
def test_a_chunk_on_the_cache_attends_as_transformers_4_51_mask_bottom_right(version):
    recorded, refs = info(), inputs()
    model = build(recorded, refs, version)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(1, 27, recorded["qwen"]["hidden_size"], generator=g)
    past, n = 7, 20  # e.g. sos + prompt, then 5 text + 15 prompt speech tokens
    ours = _chunk(model, x, past)
    kv = past + n
    theirs = _chunk(model, x, past, Masked(transformers_4_51_chunk_mask(past, n), False,
                                           model.decoder.mask_for(None, n, kv).info))
    assert torch.equal(ours, theirs)  # the same bits as upstream's float mask
    assert torch.equal(model.decoder.mask_for(None, n, kv).dense[0, 0],
                       transformers_4_51_chunk_mask(past, n)[0, 0] == 0)  # the same pattern
    decoder = model.decoder
    fresh = decoder(x, torch.arange(kv)[None], decoder.new_cache(1, kv), decoder.mask_for(None, kv, kv))[:, past:]
    torch.testing.assert_close(ours, fresh, rtol=0, atol=1e-5)  # as if the positions had come in one prefill
    top_left = _chunk(model, x, past, Masked(None, True, None))  # SDPA's is_causal (no MaskInfo can say it)
    assert (top_left - fresh).abs().max() > 1e-2  # which a chunk on a cache must not use


@pytest.mark.parametrize("version", ["cv2", "cv3"])
def test_the_decode_step_as_decoder_steps_is_the_eager_forward(version):
    recorded, refs = info(), inputs()
    model = build(recorded, refs, version)
    key = f"{version}/{SHORT[version]}"
    ids, seed = case_inputs(refs, recorded, key), recorded["cases"][key]["seed"]
    eager = speak(model, *ids, seed)
    stepped = speak(model, *ids, seed, steps=model.steps(None))
    assert stepped == eager and len(eager[0]) > 30
    along = refs[f"{key}/steps"].tolist()
    assert torch.equal(bistream.teacher_forced_bistream(model, *ids, along),
                       bistream.teacher_forced_bistream(model, *ids, along, steps=model.steps(None)))


def test_in_process_close_to_upstreams_logits():
    """Unpinned, in this process: the logits along upstream's steps are near upstream's (the pinned comparison is
    the exact one)."""
    recorded, refs = info(), inputs()
    key = f"cv3/{SHORT['cv3']}"
    model = build(recorded, refs, "cv3")
    forced = bistream.teacher_forced_bistream(model, *case_inputs(refs, recorded, key), refs[f"{key}/steps"].tolist())
    torch.testing.assert_close(forced.gather(1, refs[f"{key}/top_ids"]), refs[f"{key}/top_logits"], rtol=0, atol=1e-3)


def test_bad_requests_and_refused_tokens_are_one_line_errors():
    recorded, refs = info(), inputs()
    model = build(recorded, refs, "cv3")
    pieces, prompt_text, speech = case_inputs(refs, recorded, "cv3/prompted_1")
    keep = prompt_text != llm.END_OF_PROMPT
    with pytest.raises(InputError, match="endofprompt"):
        next(bistream.generate_bistream(model, pieces, prompt_text[keep][None], speech, generator=None))
    with pytest.raises(InputError, match="one request at a time"):
        next(bistream.generate_bistream(model, pieces, prompt_text.expand(2, -1), speech, generator=None))
    for key in ("cv3/error_while_text_arrives", "cv3/error_after_text"):
        tokens, error = speak(model, *case_inputs(refs, recorded, key), recorded["cases"][key]["seed"])
        assert error is not None and "\n" not in error and "ValueError" in error, error
        assert len(tokens) == recorded["cases"][key]["tokens"]
    with pytest.raises(ValueError):  # an InputError is a ValueError, as upstream's was
        list(bistream.generate_bistream(model, *case_inputs(refs, recorded, "cv3/error_after_text"),
                                        generator=torch.Generator().manual_seed(
                                            recorded["cases"]["cv3/error_after_text"]["seed"])))


if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])))


@pytest.mark.gpu
@pytest.mark.parametrize("version", ["cv2", "cv3"])
def test_the_decode_step_replayed_as_cuda_graphs_draws_the_eager_tokens(version):
    from mizuoto.runtime.graphs import Graphs

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    recorded, refs = info(), inputs()
    device = torch.device("cuda")
    model = build(recorded, refs, version).to(device)
    key = f"{version}/unprompted_1"
    pieces, prompt_text, speech = case_inputs(refs, recorded, key)
    seed = recorded["cases"][key]["seed"]

    def run(steps):
        g = torch.Generator(device).manual_seed(seed)
        return list(bistream.generate_bistream(model, pieces, prompt_text.to(device), speech.to(device), generator=g,
                                               steps=steps))

    with torch.cuda.device(device):
        eager = run(None)
        graphed = run(model.steps(Graphs(device)))
    assert graphed == eager and len(eager) > 30
