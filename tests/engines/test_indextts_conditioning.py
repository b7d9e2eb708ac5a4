"""IndexTTS 2's GPT conditioning (engines/indextts/{conformer,perceiver,conditioning}.py).

Against tests/parity/data/indextts/conditioning (scripts/parity/indextts_conditioning_references.py: upstream's own
UnifiedVoice v2 modules at index-tts/index-tts ee40fa7 under the parity pins, a tiny model filled by
cosyvoice_weights.state). In a pinned subprocess: the speaker and emotion Conformers and a macaron one, on one row
with infer_v2's lengths (every frame valid) and on a padded batch; the speaker Perceiver with and without a key
mask; get_conditioning, get_emo_conditioning, get_emovec, merge_emovec at three alphas and inference_speech's
conds_latent with a given and a computed emotion vector. Bitwise where the set's fingerprint is this machine's;
elsewhere (tests/fallback.py) within TOLERANCE (measured spread: spread.json). In process: every Perceiver attention
call goes through its site with upstream's key mask, a bound policy runs it, the position table is upstream's,
infer_v2's lengths quirk, one-line errors.
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
from fallback import Comparison  # noqa: E402
from helpers import parity_module, reference_sets, run_pinned  # noqa: E402

from mizuoto.core.errors import InputError  # noqa: E402
from mizuoto.engines.indextts import conditioning, conformer, perceiver  # noqa: E402

SET = "indextts/conditioning"
TOLERANCE = 1e-4
weights = parity_module("cosyvoice_weights")
MASKS = ("conformer", "emo_conformer", "macaron")


def committed() -> Path:
    return reference_sets().SETS[SET].committed


@functools.cache
def info() -> dict:
    return json.loads((committed() / "references.json").read_text())


@functools.cache
def inputs() -> dict:
    from safetensors.torch import load_file

    return load_file(str(committed() / "references.safetensors"))


def module_config(c: dict) -> conditioning.ConditionModule:
    return conditioning.ConditionModule.from_dict(c)


def filled(model: torch.nn.Module, entries: list, seed: int) -> torch.nn.Module:
    values = weights.state(entries, seed)
    buffers = {k: v for k, v in model.state_dict().items() if k.endswith("pos_enc.pe")}  # built, not drawn
    model.load_state_dict({**values, **buffers}, strict=True)
    return model.eval()


def build(recorded: dict) -> dict:
    c = recorded["configs"]
    config = conditioning.ConditioningConfig(c["gpt"]["model_dim"], module_config(c["condition_module"]),
                                             module_config(c["emo_condition_module"]))
    m = c["macaron"]
    macaron = conformer.ConformerEncoder(conformer.ConformerConfig(
        m["input_size"], m["output_size"], m["attention_heads"], m["linear_units"], m["num_blocks"], m["input_layer"],
        macaron=m["macaron_style"]))
    return {"gpt": filled(conditioning.Conditioning(config), recorded["entries"]["gpt"], recorded["seeds"]["gpt"]),
            "macaron": filled(macaron, recorded["entries"]["macaron"], recorded["seeds"]["macaron"])}


def compute(models: dict, refs: dict, recorded: dict) -> dict:
    gpt = models["gpt"]
    spk, emo, batch, lengths = refs["in/speaker"], refs["in/emotion"], refs["in/batch"], refs["in/batch_lengths"]
    full = conformer.infer_v2_lengths(spk)
    results = {}
    encoders = {"conformer": gpt.conditioning_encoder, "emo_conformer": gpt.emo_conditioning_encoder,
                "macaron": models["macaron"]}
    for name, encoder in encoders.items():
        results[f"{name}/all"], mask = encoder(spk, full)
        results[f"{name}/all_mask"] = mask.to(torch.uint8)
        results[f"{name}/padded"], mask = encoder(batch, lengths)
        results[f"{name}/padded_mask"] = mask.to(torch.uint8)
    context, keys = refs["in/perceiver_context"], refs["in/perceiver_keys"].bool()
    results["perceiver/masked"] = gpt.perceiver_encoder(context, keys)
    results["perceiver/unmasked"] = gpt.perceiver_encoder(context)
    results["speaker/all"] = gpt.speaker(spk)
    results["speaker/padded"] = gpt.speaker(batch, lengths)
    results["emotion/all"] = gpt.emotion(emo)
    results["emotion/padded"] = gpt.emotion(batch, lengths)
    results["emovec/all"] = gpt.emovec(emo)
    for alpha in recorded["alphas"]:
        results[f"merge/{alpha}"] = gpt.merge_emovec(spk, emo, alpha=alpha)
    latents = gpt.speaker(spk)
    results["prefix/given"] = gpt.prefix(latents, results["merge/0.6"])
    # infer_v2's positional call puts the emotion features in `langs`: inference_speech's own emotion vector is then
    # the speaker's (emo_speech_condition defaults to speech_condition)
    results["prefix/computed"] = gpt.prefix(latents, gpt.emovec(spk))
    return results


def ours(folder: Path, out: Path) -> dict:
    from safetensors.torch import load_file, save_file

    refs = load_file(str(folder / "references.safetensors"))
    recorded = json.loads((folder / "references.json").read_text())
    with torch.inference_mode():
        results = compute(build(recorded), refs, recorded)
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"saved": str(out)}


def test_upstreams_conditioning(tmp_path, record_property):
    from safetensors.torch import load_file

    out = tmp_path / "ours.safetensors"
    run_pinned(__file__, committed(), out)
    comparison = Comparison.for_set(SET)
    theirs, mine = inputs(), load_file(str(out))
    masks = {f"{n}/{c}_mask" for n in MASKS for c in ("all", "padded")}
    assert set(mine) - masks == set(info()["spread"]["max"])  # every output the writer measured is compared
    for name in sorted(masks):  # integers: the same on every machine
        assert torch.equal(mine[name], theirs[name]), name
    for name in sorted(set(mine) - masks):
        comparison.deterministic(name, mine[name], theirs[name], TOLERANCE)
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")


def test_the_set_covers_padding_alphas_macaron_and_every_parameter():
    recorded, refs = info(), inputs()
    upstream = recorded["upstream"]
    assert upstream["commit"].startswith("ee40fa7")
    # the snapshot lacks two large binaries (nothing here reads them): its only local changes
    assert sorted(line.split()[-1] for line in recorded["checkout_changes"]) == sorted(recorded["absent_from_checkout"])
    assert all(line.startswith("D ") for line in recorded["checkout_changes"])
    assert refs["conformer/all_mask"].all() and not refs["conformer/padded_mask"].all()  # both cases are seen
    assert not torch.equal(refs["perceiver/masked"], refs["perceiver/unmasked"])
    merges = [refs[f"merge/{a}"] for a in recorded["alphas"]]
    assert all(not torch.equal(a, b) for i, a in enumerate(merges) for b in merges[i + 1:])
    assert recorded["configs"]["condition_module"] != recorded["configs"]["emo_condition_module"]
    assert recorded["configs"]["emo_condition_module"]["num_blocks"] > 1
    assert recorded["configs"]["macaron"]["macaron_style"]
    models = build(recorded)
    # our names are upstream's: gpt.pth's subset under conditioning.PREFIXES loads strictly
    assert sorted(models["gpt"].state_dict()) == sorted(recorded["state_dict"]["gpt"])
    assert {k.split(".")[0] for k in recorded["state_dict"]["gpt"]} == set(conditioning.PREFIXES)
    assert list(models["macaron"].state_dict()) == recorded["state_dict"]["macaron"]
    for entries in recorded["entries"].values():  # nothing is left at upstream's zero or one init
        for name, shape in entries:
            assert weights.fill(name, tuple(shape), 0).abs().max() > 0, name
    assert any(name == "speed_emb.weight" for name, _ in recorded["entries"]["gpt"])
    assert max(recorded["spread"]["max"].values()) * 5 < TOLERANCE


def test_the_position_tables_are_upstreams():
    for name, model in (("conformer", build(info())["gpt"].conditioning_encoder),
                        ("macaron", build(info())["macaron"])):
        pe = model.embed.pos_enc.pe
        table = info()["position_tables"][name]
        assert list(pe.shape) == table["shape"]
        assert hashlib.sha256(pe.contiguous().numpy().tobytes()).hexdigest() == table["sha256"]


# ---------------------------------------------------------------------------------------------------
# In process


@pytest.fixture(scope="module")
def models():
    return build(info())


def test_every_perceiver_attention_call_is_the_sites_with_upstreams_key_mask(models, monkeypatch):
    from mizuoto.runtime.accel import dispatch

    calls = []
    reference = perceiver.ATTENTION.reference
    monkeypatch.setattr(perceiver.ATTENTION, "reference", lambda q, k, v, mask, *rest: calls.append(
        (q.shape, k.shape, mask)) or reference(q, k, v, mask, *rest))
    gpt, refs = models["gpt"], inputs()
    with torch.inference_mode():
        got = gpt.speaker(refs["in/batch"], refs["in/batch_lengths"])
    torch.testing.assert_close(got, refs["speaker/padded"], rtol=0, atol=TOLERANCE)  # unpinned here: not bitwise
    depth = gpt.perceiver_encoder.config.depth
    assert len(calls) == depth
    frames = (refs["in/batch"].shape[1] - 1) // 2
    for q_shape, k_shape, mask in calls:
        assert q_shape == (2, 2, 32, 64) and k_shape == (2, 2, 32 + frames, 64)
        # 32 latents, then the Conformer's frame mask: row 1 keeps (15 - 1) // 2 frames
        want = torch.tensor([[True] * (32 + frames), [True] * (32 + 7) + [False] * (frames - 7)])
        assert mask.dtype == torch.bool and torch.equal(mask, want[:, None, None, :])
    with torch.inference_mode():
        gpt.emotion(refs["in/emotion"])
    assert len(calls) == 2 * depth and calls[-1][0][2] == 1  # the emotion perceiver's single latent
    assert perceiver.ATTENTION.name == "indextts.perceiver" and perceiver.ATTENTION.approx_ok
    if dispatch.COUNT:
        assert perceiver.ATTENTION.name in dispatch.SEEN


def test_a_bound_policy_runs_the_perceiver_site(models):
    from mizuoto.runtime.accel import policy_for
    from mizuoto.runtime.context import RequestContext

    gpt, refs = models["gpt"], inputs()
    with torch.inference_mode():
        auto = gpt.speaker(refs["in/batch"], refs["in/batch_lengths"])
        run = policy_for("math").start()
        with RequestContext(0, accel=run).step():
            math = gpt.speaker(refs["in/batch"], refs["in/batch_lengths"])
    assert sum(run.used.values()) == gpt.perceiver_encoder.config.depth
    torch.testing.assert_close(math, auto, rtol=0, atol=1e-4)


def test_frozen_weights_give_the_same_floats(models):
    """Upstream's weights require grad, which steers torch's matmul for the expanded latents; a loader that freezes
    them (or builds under inference_mode) must not change a bit."""
    refs = inputs()
    frozen = build(info())
    frozen["gpt"].requires_grad_(False)
    with torch.inference_mode():
        inside = build(info())
        for name in ("speaker", "emotion"):
            want = getattr(models["gpt"], name)(refs["in/batch"], refs["in/batch_lengths"])
            for other in (frozen, inside):
                assert torch.equal(getattr(other["gpt"], name)(refs["in/batch"], refs["in/batch_lengths"]), want)


def test_infer_v2_lengths_leave_every_frame_valid_up_to_1024():
    features = torch.zeros(1, 9, 1024)
    assert torch.equal(conformer.infer_v2_lengths(features), torch.tensor([1024]))
    assert conformer.valid_frames(torch.tensor([1024]), 9).all()
    # upstream's make_pad_mask with lengths 1024: frames past 1024 count as padding
    mask = conformer.valid_frames(torch.tensor([1024]), 1030)
    assert mask[0, :1024].all() and not mask[0, 1024:].any()


def test_bad_shapes_are_one_line_errors(models):
    gpt = models["gpt"]
    cases = [
        (lambda: gpt.speaker(torch.zeros(1, 9, 512)), "features \\(batch, frames, 1024\\)"),
        (lambda: gpt.speaker(torch.zeros(9, 1024)), "features \\(batch, frames, 1024\\)"),
        (lambda: gpt.emotion(torch.zeros(1, 2, 1024)), "at least 3 frames"),
        (lambda: gpt.speaker(torch.zeros(2, 9, 1024), torch.tensor([9])), "one per row"),
        (lambda: gpt.perceiver_encoder(torch.zeros(1, 4, 64), torch.ones(1, 4, dtype=torch.bool)), "key mask"),
        (lambda: gpt.perceiver_encoder(torch.zeros(1, 4, 63)), "frames \\(batch, frames, 64\\)"),
        (lambda: gpt.prefix(torch.zeros(1, 32, 64), torch.zeros(2, 64)), "emotion vector"),
    ]
    for call, match in cases:
        with torch.inference_mode(), pytest.raises(InputError, match=match) as raised:
            call()
        assert "\n" not in str(raised.value)
    with pytest.raises(ValueError, match="conv2d2"):
        conformer.ConformerConfig(input_layer="conv2d")
    with pytest.raises(ValueError, match="unknown condition_module keys: extra"):
        conditioning.ConditionModule.from_dict({"output_size": 64, "extra": 1})


if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))
