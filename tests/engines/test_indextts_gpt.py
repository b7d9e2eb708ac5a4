"""IndexTTS 2's GPT (engines/indextts/gpt.py on mizuoto/nn/gpt2.py).

Against tests/parity/data/indextts/gpt (scripts/parity/indextts_gpt_references.py: upstream's own UnifiedVoice v2
at index-tts/index-tts ee40fa7 over transformers 4.52.1's GPT2Model, under the parity pins, a tiny model filled by
cosyvoice_weights.state and loaded here through load_gpt from upstream's names and Conv1D shapes). In a pinned
subprocess: UnifiedVoice.forward's latents as infer_v2 calls it (one row; a batch of two with a shorter row),
prepare_gpt_inputs (one text; a left-padded batch with one and with two conditionings), and GPT2InferenceModel's
KV-cache decode teacher-forced through MelDecode: prefill and steps on 3 identical beams with reorders [2, 0, 0],
[1, 2, 0], [0, 0, 1], and on a left-padded batch of two x 2 beams. Bitwise where the set's fingerprint is this
machine's; elsewhere (tests/fallback.py) within TOLERANCE (measured spread: spread.json). In process: every attention
call goes through the site `indextts.gpt` (approx_ok=False) with transformers' mask, the in-place reorder keeps the
cache storage, CUDA-graph-style stepping (LayerSteps) equals the eager forward, the loader's drops and errors.
"""

import functools
import json
import sys
from pathlib import Path

import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fallback import Comparison  # noqa: E402
from helpers import parity_module, reference_sets, run_pinned  # noqa: E402

from mizuoto.core.errors import InputError  # noqa: E402
from mizuoto.engines.indextts import gpt as gpt_module  # noqa: E402
from mizuoto.nn import gpt2  # noqa: E402

SET = "indextts/gpt"
TOLERANCE = 1e-4
weights = parity_module("cosyvoice_weights")


def committed() -> Path:
    return reference_sets().SETS[SET].committed


@functools.cache
def info() -> dict:
    return json.loads((committed() / "references.json").read_text())


@functools.cache
def inputs() -> dict:
    from safetensors.torch import load_file

    return load_file(str(committed() / "references.safetensors"))


def config(recorded: dict) -> gpt_module.GptConfig:
    c = recorded["configs"]
    return gpt_module.GptConfig.from_dict({**c["gpt"], "condition_module": c["condition_module"],
                                           "emo_condition_module": c["emo_condition_module"]})


def upstream_state(recorded: dict) -> dict:
    """The writer's parameters under upstream's names and shapes (Conv1D weights (in, out)), as a gpt.pth holds,
    with the Conformers' persistent position tables (built, not drawn: the conditioning set checks them)."""
    tables = {k: v for k, v in gpt_module.UnifiedVoice(config(recorded)).state_dict().items()
              if k.endswith("pos_enc.pe")}
    return {**weights.state(recorded["entries"], recorded["seed"]), **tables}


def build(recorded: dict) -> gpt_module.UnifiedVoice:
    return gpt_module.load_gpt({"model": upstream_state(recorded)}, config(recorded))


def run_decode(model, embeds, mask, recipe: dict, steps=None, graphs=None) -> dict:
    decode = model.decode(embeds, mask, recipe["beams"], max_new_tokens=len(recipe["steps"]) + 1, graphs=graphs)
    if steps is not None:
        decode.steps = steps(decode)
    out = {"step0": decode.prefill().clone()}
    for i, step in enumerate(recipe["steps"], 1):
        beam_idx = None if step["beam_idx"] is None else torch.tensor(step["beam_idx"])
        out[f"step{i}"] = decode.step(torch.tensor(step["tokens"]), beam_idx).clone()
    return out


def compute(model, refs: dict, recorded: dict) -> dict:
    results = {}
    speaker, emovec, text, codes = refs["in/speaker"], refs["in/emovec"], refs["in/text"], refs["in/codes"]
    results["latents/one"] = model.latents(speaker[:1], emovec[:1], text[:1], codes[:1])
    lengths = recorded["lengths"]
    results["latents/padded"] = model.latents(speaker, emovec, text, codes, torch.tensor(lengths["text"]),
                                              torch.tensor(lengths["codes"]))
    for name, recipe in recorded["decodes"].items():
        embeds, mask = model.prompt(refs["in/conds"], torch.tensor(recipe["text"], dtype=torch.int32))
        results[f"prompt/{name}/embeds"], results[f"prompt/{name}/mask"] = embeds, mask
        for k, v in run_decode(model, embeds, mask, recipe).items():
            results[f"decode/{name}/{k}"] = v
    padded = recorded["decodes"]["padded"]["text"]
    results["prompt/pair/embeds"], results["prompt/pair/mask"] = model.prompt(
        refs["in/conds_pair"], torch.tensor(padded, dtype=torch.int32))
    return results


def ours(folder: Path, out: Path) -> dict:
    from safetensors.torch import load_file, save_file

    refs = load_file(str(folder / "references.safetensors"))
    recorded = json.loads((folder / "references.json").read_text())
    with torch.inference_mode():
        results = compute(build(recorded), refs, recorded)
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"saved": str(out)}


def test_upstreams_gpt(tmp_path, record_property):
    from safetensors.torch import load_file

    out = tmp_path / "ours.safetensors"
    run_pinned(__file__, committed(), out)
    comparison = Comparison.for_set(SET)
    theirs, mine = inputs(), load_file(str(out))
    masks = {k for k in mine if k.endswith("/mask")}
    assert set(mine) - masks == set(info()["spread"]["max"])  # every output the writer measured is compared
    for name in sorted(masks):  # integers: the same on every machine
        assert torch.equal(mine[name], theirs[name]), name
    for name in sorted(set(mine) - masks):
        comparison.deterministic(name, mine[name], theirs[name], TOLERANCE)
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")


def test_the_set_covers_padding_reorders_and_every_parameter():
    recorded, refs = info(), inputs()
    assert recorded["upstream"]["commit"].startswith("ee40fa7")
    assert sorted(line.split()[-1] for line in recorded["checkout_changes"]) == sorted(recorded["absent_from_checkout"])
    assert recorded["attn_implementation"] == "sdpa" and recorded["activation_function"] == "gelu_new"
    assert not refs["prompt/padded/mask"].all() and refs["prompt/beams/mask"].all()  # both mask paths are seen
    beams = recorded["decodes"]["beams"]
    assert beams["beams"] == 3 and [2, 0, 0] in [s["beam_idx"] for s in beams["steps"]]
    # the beams start identical and diverge: a reorder after that changes what a row continues
    assert torch.equal(refs["decode/beams/step0"][0], refs["decode/beams/step0"][2])
    assert not torch.equal(refs["decode/beams/step2"][0], refs["decode/beams/step2"][1])
    model = build(recorded)
    # our names are upstream's (UnifiedVoice's state dict before post_init_gpt2_config)
    assert sorted(model.state_dict()) == sorted(recorded["state_dict"]["unified_voice"])
    for name, shape in recorded["entries"]:  # nothing is left at upstream's zero or one init
        assert weights.fill(name, tuple(shape), 0).abs().max() > 0, name
    assert max(recorded["spread"]["max"].values()) * 5 < TOLERANCE


# ---------------------------------------------------------------------------------------------------
# In process


@pytest.fixture(scope="module")
def model():
    return build(info())


def test_every_gpt_attention_call_is_the_sites_with_transformers_mask(model, monkeypatch):
    from mizuoto.runtime.accel import dispatch

    site = gpt_module.ATTENTION
    assert site.name == "indextts.gpt" and not site.approx_ok and site.reference is gpt2.transformers_sdpa
    calls = []
    reference = site.reference
    monkeypatch.setattr(site, "reference", lambda q, k, v, mask, causal, *rest: calls.append(
        (q.shape, k.shape, mask, causal)) or reference(q, k, v, mask, causal, *rest))
    refs, recipe = inputs(), info()["decodes"]["padded"]
    layers = model.gpt_config.layers
    with torch.inference_mode():
        embeds, mask = model.prompt(refs["in/conds"], torch.tensor(recipe["text"], dtype=torch.int32))
        got = run_decode(model, embeds, mask, recipe)
    torch.testing.assert_close(got["step3"], refs["decode/padded/step3"], rtol=0, atol=TOLERANCE)
    assert len(calls) == layers * (1 + len(recipe["steps"]))
    s = embeds.shape[1]
    keys = mask.repeat_interleave(2, 0).bool()
    for i, (q_shape, k_shape, dense, causal) in enumerate(calls):
        step = i // layers
        n_q, n_k = (s + 1, s + 1) if step == 0 else (1, s + 1 + step)
        assert q_shape == (4, 2, n_q, 32) and k_shape == (4, 2, n_k, 32) and not causal
        # transformers' additive mask: finfo.min on the left padding and above the diagonal, 0 elsewhere
        allowed = torch.ones(4, n_k, dtype=torch.bool)
        allowed[:, : s + 1] = keys
        want = allowed[:, None, None, :] & torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q)
        assert dense.dtype == torch.float32 and torch.equal(dense == 0, want)
        assert torch.equal(dense[~want], torch.full_like(dense[~want], torch.finfo(torch.float32).min))
    calls.clear()
    with torch.inference_mode():
        run_decode(model, *model.prompt(refs["in/conds"], torch.tensor([info()["decodes"]["beams"]["text"][0]])),
                   {"beams": 3, "steps": [{"tokens": [1, 2, 3], "beam_idx": None}]})
    # no padding: transformers passes no mask (is_causal for the prefill, nothing for one query)
    assert [(mask, causal) for _, _, mask, causal in calls] == [(None, True)] * layers + [(None, False)] * layers
    if dispatch.COUNT:
        assert site.name in dispatch.SEEN


def test_the_reorder_is_in_place_and_gathers_rows(model):
    refs = inputs()
    with torch.inference_mode():
        embeds, mask = model.prompt(refs["in/conds"], torch.tensor(info()["decodes"]["beams"]["text"]))
        decode = model.decode(embeds, mask, beams=3, max_new_tokens=4)
        decode.prefill()
        decode.step(torch.tensor([5, 17, 30]))
        k_ptr, v_ptr = decode.cache.k.data_ptr(), decode.cache.v.data_ptr()
        length = decode.cache.length
        before_k = decode.cache.k[:, :, :, :length].clone()
        rest = decode.cache.k[:, :, :, length:].clone()
        decode.cache.reorder(torch.tensor([2, 0, 0]))
        assert decode.cache.k.data_ptr() == k_ptr and decode.cache.v.data_ptr() == v_ptr
        assert torch.equal(decode.cache.k[:, :, :, :length], before_k[:, [2, 0, 0]])
        assert torch.equal(decode.cache.k[:, :, :, length:], rest)  # unwritten positions are left alone
        with pytest.raises(ValueError, match="one source row per cache row"):
            decode.cache.reorder(torch.tensor([0, 1]))


def test_layer_steps_equal_the_eager_forward(model):
    """The step through runtime.graphs.LayerSteps (what CUDA graphs capture) gives the bits of the whole-stack
    forward over the same cache."""
    refs, recipe = inputs(), info()["decodes"]["beams"]
    with torch.inference_mode():
        embeds, mask = model.prompt(refs["in/conds"], torch.tensor(recipe["text"], dtype=torch.int32))
        stepped = run_decode(model, embeds, mask, recipe)
        decode = model.decode(embeds, mask, 3, len(recipe["steps"]) + 1)
        eager = {"step0": decode.prefill()}
        for i, step in enumerate(recipe["steps"], 1):
            if step["beam_idx"] is not None:
                decode.cache.reorder(torch.tensor(step["beam_idx"]))
            x = model.token_embedding(torch.tensor(step["tokens"]), decode.position)
            hidden = model.gpt(x, decode.cache, decode._mask(1))
            decode.position.add_(1)
            eager[f"step{i}"] = model.logits(hidden)[:, -1]
    for name in eager:
        assert torch.equal(stepped[name], eager[name]), name


def test_graphed_decodes_replay_the_eager_logits_and_keep_their_graphs(model):
    """Under (emulated) CUDA graphs the step's segments replay: the eager logits at every step; the LayerSteps stay
    with the model, so a second decode of the same beam count captures nothing."""
    from helpers import EmulatedGraphs

    refs, recipe = inputs(), info()["decodes"]["beams"]
    with torch.inference_mode():
        embeds, mask = model.prompt(refs["in/conds"], torch.tensor(recipe["text"], dtype=torch.int32))
        eager = run_decode(model, embeds, mask, recipe)
        graphs = EmulatedGraphs()
        first = run_decode(model, embeds, mask, recipe, graphs=graphs)
        captured = graphs.captures
        second = run_decode(model, embeds, mask, recipe, graphs=graphs)
    assert captured == model.gpt_config.layers + 1 and graphs.captures == captured
    assert model.decode_steps(graphs) is model.decode_steps(graphs) is not model.decode_steps(None)
    for name in eager:
        assert torch.equal(first[name], eager[name]) and torch.equal(second[name], eager[name]), name


def test_the_mel_positions_follow_upstreams_quirk(model):
    """The k-th generated token is embedded at mel position k + 1 (upstream: attention_mask.shape[1] - S)."""
    refs = inputs()
    with torch.inference_mode():
        embeds, mask = model.prompt(refs["in/conds"], torch.tensor(info()["decodes"]["beams"]["text"]))
        decode = model.decode(embeds, mask, beams=1, max_new_tokens=3)
        decode.prefill()
        assert decode.position.tolist() == [2]
        decode.step(torch.tensor([4]))
        assert decode.position.tolist() == [3]


def test_conv1d_linear_is_transformers_addmm():
    layer = gpt2.Conv1DLinear(8, 24)
    assert layer.weight.shape == (24, 8) and layer.weight.t().is_contiguous()
    with torch.no_grad():
        layer.weight.copy_(torch.randn(24, 8))
        layer.bias.copy_(torch.randn(24))
    x = torch.randn(2, 3, 8)
    want = torch.addmm(layer.bias, x.view(-1, 8), layer.weight.t().contiguous()).view(2, 3, 24)
    assert torch.equal(layer(x), want)
    state = {"weight": torch.randn(24, 8), "bias": torch.randn(24)}
    layer.load_state_dict(state)
    assert layer.weight.t().is_contiguous() and torch.equal(layer.weight, state["weight"])


def test_the_loader_drops_upstreams_duplicates_and_names_what_is_wrong():
    recorded = info()
    cfg = config(recorded)
    values = upstream_state(recorded)
    # a state dict saved after post_init_gpt2_config: inference_model.* and gpt.wte duplicate kept parameters
    duplicates = {k: torch.zeros(1) for k in recorded["state_dict"]["after_post_init"] if k not in values}
    assert any(k.startswith("inference_model.") for k in duplicates) and "gpt.wte.weight" in duplicates
    old = {"gpt.h.0.attn.bias": torch.ones(1, 1, 4, 4), "gpt.h.0.attn.masked_bias": torch.tensor(-1e4)}
    model = gpt_module.load_gpt({**values, **duplicates, **old}, cfg)
    c_attn = values["gpt.h.0.attn.c_attn.weight"]
    assert torch.equal(model.gpt.h[0].attn.c_attn.weight, c_attn.t())  # Conv1D (in, out) -> Linear (out, in)
    assert torch.equal(model.gpt.h[0].attn.c_attn.weight.t(), c_attn)  # and the storage is Conv1D's layout
    missing = {k: v for k, v in values.items() if k != "mel_head.weight"}
    cases = [
        (lambda: gpt_module.load_gpt(missing, cfg), "1 missing \\(mel_head.weight\\)"),
        (lambda: gpt_module.load_gpt({**values, "spk_emb_proj.weight": torch.zeros(1)}, cfg),
         "1 unexpected \\(spk_emb_proj.weight\\)"),
        (lambda: gpt_module.load_gpt(values, gpt_module.GptConfig.from_dict({
            **recorded["configs"]["gpt"], "layers": 3, "condition_module": recorded["configs"]["condition_module"],
            "emo_condition_module": recorded["configs"]["emo_condition_module"]})), "missing \\(gpt.h.2"),
        (lambda: gpt_module.load_gpt({**values, "mel_head.bias": torch.zeros(5)}, cfg), "mel_head.bias is \\(5,\\)"),
        (lambda: gpt_module.load_gpt("/nonexistent/gpt.pth", cfg), "not found"),
        (lambda: gpt_module.load_gpt([1, 2], cfg), "must hold a state dict"),
        (lambda: gpt_module.GptConfig.from_dict({"layers": 2, "bogus": 1}), "unknown config.yaml gpt keys: bogus"),
        (lambda: gpt_module.GptConfig.from_dict({"condition_type": "perceiver"}), "condition_type"),
        (lambda: gpt_module.GptConfig.from_dict({"condition_module": {"extra": 1}}), "condition_module"),
    ]
    for call, match in cases:
        with pytest.raises(InputError, match=match) as raised:
            call()
        assert "\n" not in str(raised.value)


def test_bad_decode_inputs_are_one_line_errors(model):
    refs = inputs()
    with torch.inference_mode():
        embeds, mask = model.prompt(refs["in/conds"], torch.tensor([[5, 9, 13]]))
        decode = model.decode(embeds, mask, beams=2, max_new_tokens=1)
        decode.prefill()
        cases = [
            (lambda: model.prompt(refs["in/conds"], torch.tensor([5, 9])), "text tokens \\(batch, length\\)"),
            (lambda: model.prompt(torch.zeros(1, 34, 63), torch.tensor([[5]])), "conditioning"),
            (lambda: model.decode(embeds, mask[:, :-1], 1, 4), "mask \\(B, S \\+ 1\\)"),
            (lambda: decode.step(torch.tensor([1])), "one token per row \\(2\\)"),
            (lambda: model.latents(refs["in/speaker"][:1], refs["in/emovec"][:1], refs["in/text"][:1],
                                   refs["in/codes"][:1], torch.tensor([3, 4])), "one length per row"),
        ]
        for call, match in cases:
            with pytest.raises(InputError, match=match) as raised:
                call()
            assert "\n" not in str(raised.value)
        decode.step(torch.tensor([1, 2]))
        with pytest.raises(InputError, match="raise max_new_tokens"):
            decode.step(torch.tensor([1, 2]))


if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))
