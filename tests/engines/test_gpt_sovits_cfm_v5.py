"""GPT-SoVITS v5's mel generator (engines/gpt_sovits/cfm_v5.py: CFMV5 and the rolling synthesize, over cfm.py's DiT
without a step embedding and its static condition).

Against tests/parity/data/gpt_sovits_v5 (scripts/parity/gpt_sovits_v5_references.py: upstream's own
module/v5_inference.py and f5_tts DiT of the cuda_graph_accel_v5 branch at ac846f5, over 48b1a01's f5_tts modules,
under the parity pins, a tiny DiT of 4 heads filled by gpt_sovits_cfm_weights.cfm_fill). In a pinned subprocess:
the DiT's forward through the static cache with the condition kept and dropped, and synthesize_v5_mel for v5turbo's
4 steps, v5dev's guidance, the version's defaults and two rolling cases (a reference cut to its last 500 frames over
three chunks; a short one whose mel outlasts its features, with the 32-frame rolling tail, over two), the noise drawn
from a generator seeded as upstream seeds the global one; and the prompt's resampling to 16 kHz (TTS.py's
resample(match_librosa=True) over resampy 0.4.3's kaiser_best: mizuoto/audio/resampy_kaiser.py) from six rates.
Bitwise where the set's fingerprint and census are this machine's; elsewhere (tests/fallback.py) within TOLERANCE
(measured spread: spread.json). In process: emulated graphs
give the eager bits, the solver is the DiT's step-by-step forward, the sampling checks and defaults are upstream's,
and a v3/v4 DiT is refused; with CUDA, real graphs give the eager bits (-m gpu).
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
from helpers import EmulatedGraphs, parity_module, reference_sets, run_pinned  # noqa: E402

from mizuoto.audio import resampy_kaiser  # noqa: E402
from mizuoto.core.errors import InputError  # noqa: E402
from mizuoto.engines.gpt_sovits import cfm, cfm_v5  # noqa: E402

SET = "gpt_sovits_v5"
TOLERANCE = 2e-5
RESAMPLE_TOLERANCE = 1e-6
weights = parity_module("gpt_sovits_cfm_weights")


def committed() -> Path:
    return reference_sets().SETS[SET].committed


@functools.cache
def info() -> dict:
    return json.loads((committed() / "references.json").read_text())


@functools.cache
def inputs() -> dict:
    from safetensors.torch import load_file

    return load_file(str(committed() / "references.safetensors"))


def build(recorded: dict, refs: dict, device="cpu") -> cfm_v5.CFMV5:
    """Ours with the set's parameters (and upstream's inv_freq buffer, as a checkpoint carries it)."""
    config = {k: v for k, v in recorded["config"].items() if k != "use_step_embedding"}
    model = cfm_v5.CFMV5(cfm.CFMConfig(**config, step_embedding=recorded["config"]["use_step_embedding"])).eval()
    state = weights.cfm_state(recorded["entries"], recorded["seed"])
    state["estimator.rotary_embed.inv_freq"] = refs["inv_freq"]
    model.load_state_dict(state)
    return model.to(device)


def synthesize(model, refs: dict, name: str, case: dict, generator, graphs=None, device="cpu") -> torch.Tensor:
    steps, cfg = cfm_v5.v5_sampling(case["version"], case["sample_steps"], case["cfg_rate"])
    return cfm_v5.synthesize(model, refs[f"{name}/reference_features"].to(device),
                             refs[f"{name}/target_features"].to(device), refs[f"{name}/reference_mel"].to(device),
                             steps, cfg, generator, graphs)


def static_forward(model, refs: dict, dropped: bool) -> torch.Tensor:
    """upstream's DiT.forward(static_cache=prepare_static_cache(cond, x_lens, text), drop_audio_cond=dropped)."""
    est = model.estimator
    x, cond, time = refs["forward/x"], refs["forward/cond"], refs["forward/time"]
    text = est.text_embed(refs["forward/text"].transpose(2, 1), x.shape[2])
    static = est.static_condition(torch.zeros_like(cond) if dropped else cond, text)
    pos, index = est.positions(torch.tensor([x.shape[2]] * 2), 2, x.shape[2], x.device)
    from mizuoto.runtime.graphs import LayerSteps

    return LayerSteps(est.segments(), est.embed_static, est.finish)((x, static, time), pos, index)


def ours(folder: Path, out: Path) -> dict:
    from safetensors.torch import load_file, save_file

    refs = load_file(str(folder / "references.safetensors"))
    recorded = json.loads((folder / "references.json").read_text())
    model = build(recorded, refs)
    results = {}
    with torch.inference_mode():
        for name, dropped in (("static", False), ("static_dropped", True)):
            results[f"forward/{name}"] = static_forward(model, refs, dropped)
        for name, case in recorded["cases"].items():
            results[f"{name}/mel"] = synthesize(model, refs, name, case, torch.Generator().manual_seed(case["seed"]))
        for name, case in recorded["resamples"].items():
            results[f"resample/{name}"] = resampy_kaiser.resample(refs[f"resample/{name}/input"], case["rate"], 16000)
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"saved": str(out)}


def test_upstreams_v5_dit_and_rolling_synthesis(tmp_path, record_property):
    from safetensors.torch import load_file

    out = tmp_path / "ours.safetensors"
    run_pinned(__file__, committed(), out)
    comparison = Comparison.for_set(SET)
    theirs, mine = inputs(), load_file(str(out))
    for name in ("static", "static_dropped"):
        comparison.deterministic(f"DiT forward {name}", mine[f"forward/{name}"], theirs[f"forward/{name}"], TOLERANCE)
    for name in info()["cases"]:
        comparison.deterministic(f"synthesize_v5_mel {name}", mine[f"{name}/mel"], theirs[f"{name}/mel"], TOLERANCE)
    for name in info()["resamples"]:  # elementwise products and per-sample sums: no library code to move them
        comparison.deterministic(f"resample(match_librosa=True) {name}", mine[f"resample/{name}"],
                                 theirs[f"resample/{name}/output"], RESAMPLE_TOLERANCE)
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")


def test_the_set_covers_both_versions_guidance_rolling_and_every_parameter():
    recorded = info()
    assert recorded["upstream"]["commit"].startswith("48b1a01") and not recorded["upstream"]["modified"]
    branch = recorded["v5_files"]
    assert branch["commit"].startswith("ac846f5") and set(branch["files"]) == {
        "GPT_SoVITS/module/v5_inference.py", "GPT_SoVITS/f5_tts/model/backbones/dit.py"}
    assert recorded["config"]["heads"] > 1 and recorded["config"]["use_step_embedding"] is False
    cases = recorded["cases"]
    assert {c["version"] for c in cases.values()} == {"v5dev", "v5turbo"}
    assert any(c["sample_steps"] is None for c in cases.values())  # the version's defaults, resolved upstream
    assert any((c["cfg_rate"] or 0) > 0 for c in cases.values()) and any(c["cfg_rate"] == 0 for c in cases.values())
    long, short = cases["rolling_long_reference"], cases["rolling_short_reference"]
    assert min(long["reference_mel"], long["reference_features"]) > cfm_v5.REFERENCE_FRAMES  # cut to the last 500
    assert long["target"] > 2 * (cfm_v5.TOTAL_CHUNK_FRAMES - cfm_v5.REFERENCE_FRAMES)  # three chunks
    assert short["reference_mel"] != short["reference_features"]  # cut to the shorter
    assert cfm_v5.MAX_TARGET_CHUNK_FRAMES < short["target"] and short["reference_features"] > cfm_v5.ROLLING_TAIL_FRAMES
    model = build(recorded, inputs())
    assert list(model.state_dict()) == recorded["state_dict"]  # upstream's names, no d_embed
    for name, shape in recorded["entries"]:
        assert weights.cfm_fill(name, tuple(shape), 0).abs().max() > 0, name
    refs = inputs()
    assert not torch.equal(refs["forward/static"], refs["forward/static_dropped"])
    rates = {c["rate"] for c in recorded["resamples"].values()}
    assert {32000, 44100, 48000, 8000} <= rates and max(c["channels"] for c in recorded["resamples"].values()) == 2
    assert branch["excerpt"]["of"].endswith("TTS.py") and recorded["resampy"] == "0.4.3"
    assert max(recorded["spread"]["max"].values()) * 5 < TOLERANCE


# ---------------------------------------------------------------------------------------------------
# In process


@pytest.fixture(scope="module")
def model():
    return build(info(), inputs())


def run_case(model, name="dev_cfg_8", graphs=None, seed=7, device="cpu"):
    with torch.inference_mode():
        return synthesize(model, inputs(), name, info()["cases"][name], torch.Generator(device).manual_seed(seed),
                          graphs, device)


@pytest.mark.parametrize("name", ["dev_cfg_8", "turbo_4", "rolling_short_reference"])
def test_segments_with_emulated_graphs_are_the_eager_loop(model, name):
    want = run_case(model, name)
    graphs = EmulatedGraphs()
    assert torch.equal(run_case(model, name, graphs), want)
    chunks = 2 if name.startswith("rolling") else 1  # one LayerSteps per chunk, captured at its first step
    assert graphs.captures == chunks * (model.config.depth + 1)


def test_a_failed_capture_finishes_eagerly_with_the_same_bits(model):
    assert torch.equal(run_case(model, graphs=EmulatedGraphs(fail={1})), run_case(model))


def test_the_solver_is_the_static_forward_step_by_step(model):
    """v5: randn * 0.875, t = i / steps, no step embedding, guidance that drops the prompt's mel only."""
    refs, case = inputs(), info()["cases"]["dev_cfg_8"]
    features = torch.cat((refs["dev_cfg_8/reference_features"][..., :case["reference_features"]],
                          refs["dev_cfg_8/target_features"]), -1)
    mel = refs["dev_cfg_8/reference_mel"][..., :case["reference_features"]]
    prompt, frames, steps, rate = mel.shape[-1], features.shape[-1], case["sample_steps"], case["cfg_rate"]
    x = torch.randn(1, 100, frames, generator=torch.Generator().manual_seed(3)) * 0.875
    x[..., :prompt] = 0
    cond = torch.zeros_like(x)
    cond[..., :prompt] = mel
    est = model.estimator
    with torch.inference_mode():
        text = est.text_embed(features.transpose(2, 1), frames)
        keep, drop = est.static_condition(cond, text), est.static_condition(torch.zeros_like(cond), text)
        pos, index = est.positions(torch.tensor([frames]), 1, frames, x.device)

        def velocity(static, time):
            from mizuoto.runtime.graphs import LayerSteps

            return LayerSteps(est.segments(), est.embed_static, est.finish)((x, static, time), pos, index)

        for i in range(steps):
            time = torch.full((1,), i * (1.0 / steps))
            v = velocity(keep, time).clone()
            v = v + rate * (v - velocity(drop, time))
            x = x + (1.0 / steps) * v.transpose(2, 1)
            x[..., :prompt] = 0
        want = model.inference(features.transpose(2, 1), torch.tensor([frames]), mel, steps, inference_cfg_rate=rate,
                               generator=torch.Generator().manual_seed(3))
    assert torch.equal(x, want)


def test_sampling_defaults_and_checks_are_upstreams():
    assert cfm_v5.v5_sampling("v5dev", None, None) == (32, 1.3)
    assert cfm_v5.v5_sampling("v5turbo", None, None) == (4, 0.0)
    assert cfm_v5.v5_sampling("v5turbo", 16, 0.5) == (16, 0.5)
    with pytest.raises(InputError, match="v5turbo takes sample_steps of 4, 8, 16, 32 .* got 5"):
        cfm_v5.v5_sampling("v5turbo", 5, None)
    for cfg in (2.5, -0.1, float("nan")):
        with pytest.raises(InputError, match="cfg_rate must be between 0 and 2 for v5dev"):
            cfm_v5.v5_sampling("v5dev", None, cfg)


def test_bad_inputs_are_one_line_errors(model):
    refs = inputs()
    features, mel = refs["turbo_4/reference_features"], refs["turbo_4/reference_mel"]
    with pytest.raises(InputError, match="at least one target frame"):
        cfm_v5.synthesize(model, features, features[..., :0], mel, 4, 0.0)
    with pytest.raises(InputError, match="at least one mel frame and one feature frame"):
        cfm_v5.synthesize(model, features[..., :0], features, mel, 4, 0.0)
    mu = torch.cat((features, features), -1).transpose(2, 1)
    with pytest.raises(InputError, match="v5's CFM takes sample_steps of 4, 8, 16, 32 .* got 3"):
        model.inference(mu, torch.tensor([mu.shape[1]]), mel, 3)
    with pytest.raises(InputError, match="features must be"):
        model.inference(mu[..., :5], torch.tensor([mu.shape[1]]), mel, 4)
    v4 = cfm_v5.CFMV5(cfm.CFMConfig(**{**model.config.to_dict(), "step_embedding": True}))
    with pytest.raises(InputError, match="has a step embedding: it is a v3/v4 model"):
        v4.inference(mu, torch.tensor([mu.shape[1]]), mel, 4)


def test_the_noise_is_the_generators(model):
    """Each chunk draws once from the request's generator; without one, the global generator, as upstream."""
    want = run_case(model, "rolling_short_reference", seed=11)
    torch.manual_seed(11)
    refs, case = inputs(), info()["cases"]["rolling_short_reference"]
    with torch.inference_mode():
        got = cfm_v5.synthesize(model, refs["rolling_short_reference/reference_features"],
                                refs["rolling_short_reference/target_features"],
                                refs["rolling_short_reference/reference_mel"], case["sample_steps"], case["cfg_rate"])
    assert torch.equal(got, want) and got.shape[-1] == case["target"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", ["dev_cfg_8", "rolling_short_reference"])
def test_real_cuda_graphs_give_the_eager_bits(name):
    from mizuoto.runtime.graphs import Graphs

    model = build(info(), inputs(), "cuda")
    want = run_case(model, name, device="cuda")
    graphs = Graphs("cuda")
    for _ in range(2):
        assert torch.equal(run_case(model, name, graphs, device="cuda"), want)


if __name__ == "__main__":
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))
