"""GPT-SoVITS v3/v4's flow-matching mel generator (engines/gpt_sovits/cfm.py) and the F5-TTS blocks it shares
(mizuoto/nn/f5_dit.py).

Against tests/parity/data/gpt_sovits_cfm (scripts/parity/gpt_sovits_cfm_references.py: upstream's own CFM and DiT at
RVC-Boss/GPT-SoVITS 48b1a01 under the parity pins, a tiny DiT of 4 heads filled by gpt_sovits_cfm_weights.cfm_fill).
In a pinned subprocess: the DiT's forward with full and padded lengths and with the condition and features
dropped, and CFM.inference for one row at 4 and 8 steps, three rows with one x_lens entry and a broadcast prompt,
classifier-free guidance and a temperature, the noise drawn from a generator seeded as upstream seeds the global one.
Bitwise where the set's fingerprint is this machine's; elsewhere (tests/fallback.py) within TOLERANCE (measured
spread: spread.json). In process: the solver loop through LayerSteps with emulated graphs is the eager loop bit for
bit (a failed capture too), every attention call goes through the gpt_sovits.cfm site with upstream's mask, the
sizes are read from a checkpoint's names, the noise is one draw, bad inputs are one-line errors; with CUDA, real
graphs give the eager bits (-m gpu).
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

from mizuoto.core.errors import CheckpointError, InputError  # noqa: E402
from mizuoto.engines.gpt_sovits import cfm  # noqa: E402

SET = "gpt_sovits_cfm"
TOLERANCE = 2e-5
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


def build(recorded: dict, refs: dict, device="cpu") -> cfm.CFM:
    """Ours with the set's parameters (and upstream's inv_freq buffer, as a checkpoint carries it)."""
    model = cfm.CFM(cfm.CFMConfig(**recorded["config"])).eval()
    state = weights.cfm_state(recorded["entries"], recorded["seed"])
    state["estimator.rotary_embed.inv_freq"] = refs["inv_freq"]
    model.load_state_dict(state)
    return model.to(device)


def ours(folder: Path, out: Path) -> dict:
    from safetensors.torch import load_file, save_file

    refs = load_file(str(folder / "references.safetensors"))
    recorded = json.loads((folder / "references.json").read_text())
    model = build(recorded, refs)
    results = {}
    with torch.inference_mode():
        for name, case in recorded["forwards"].items():
            results[f"forward/{name}"] = model.estimator(
                refs["forward/x"], refs["forward/cond"], torch.tensor(case["x_lens"]), refs["forward/time"],
                refs["forward/d"], refs["forward/text"], drop_audio_cond=case["drop_audio_cond"],
                drop_text=case["drop_text"])
        for name, case in recorded["cases"].items():
            results[f"{name}/mel"] = model.inference(
                refs[f"{name}/mu"], torch.tensor([case["frames"]]), refs[f"{name}/prompt"], case["steps"],
                temperature=case["temperature"], inference_cfg_rate=case["inference_cfg_rate"],
                generator=torch.Generator().manual_seed(case["seed"]))
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"saved": str(out)}


def test_upstreams_dit_and_cfm(tmp_path, record_property):
    from safetensors.torch import load_file

    out = tmp_path / "ours.safetensors"
    run_pinned(__file__, committed(), out)
    comparison = Comparison.for_set(SET)
    theirs, mine = inputs(), load_file(str(out))
    for name in info()["forwards"]:
        comparison.deterministic(f"DiT forward {name}", mine[f"forward/{name}"], theirs[f"forward/{name}"], TOLERANCE)
    for name in info()["cases"]:
        comparison.deterministic(f"CFM.inference {name}", mine[f"{name}/mel"], theirs[f"{name}/mel"], TOLERANCE)
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")


def test_the_set_covers_padding_batches_guidance_and_every_parameter():
    recorded = info()
    assert recorded["upstream"]["commit"].startswith("48b1a01") and not recorded["upstream"]["modified"]
    assert recorded["config"]["heads"] > 1  # head 0 alone is rotated: observable only with several heads
    cases = recorded["cases"].values()
    assert {c["steps"] for c in cases} >= {4, 8} and max(c["batch"] for c in cases) == 3
    assert any(c["inference_cfg_rate"] > 0 for c in cases) and any(c["temperature"] != 1 for c in cases)
    assert any(min(f["x_lens"]) < max(f["x_lens"]) for f in recorded["forwards"].values())
    # our module names are upstream's (a SynthesizerTrnV3 checkpoint keeps them under cfm.)
    model = build(recorded, inputs())
    assert list(model.state_dict()) == recorded["state_dict"]
    # nothing is left at upstream's zero init (AdaLN modulations, proj_out, GRN)
    for name, shape in recorded["entries"]:
        assert weights.cfm_fill(name, tuple(shape), 0).abs().max() > 0, name
    padded, full = inputs()["forward/padded"], inputs()["forward/full"]
    assert torch.equal(padded[0], full[0]) and not torch.equal(padded[1], full[1])  # the mask is seen
    assert max(recorded["spread"]["max"].values()) * 5 < TOLERANCE


# ---------------------------------------------------------------------------------------------------
# In process


@pytest.fixture(scope="module")
def model():
    return build(info(), inputs())


def generate(model, name="batch3", graphs=None, cfg=None, lengths=None, generator_seed=7, device="cpu"):
    refs, case = inputs(), info()["cases"][name]
    x_lens = torch.tensor([case["frames"]] if lengths is None else lengths)
    return model.inference(refs[f"{name}/mu"].to(device), x_lens, refs[f"{name}/prompt"].to(device), case["steps"],
                           inference_cfg_rate=case["inference_cfg_rate"] if cfg is None else cfg,
                           generator=torch.Generator(device).manual_seed(generator_seed), graphs=graphs)


@pytest.mark.parametrize("cfg", [0.0, 0.7], ids=["unguided", "guided"])
@pytest.mark.parametrize("lengths", [None, [44, 37, 30]], ids=["one length", "padded rows"])
def test_segments_with_emulated_graphs_are_the_eager_loop(model, cfg, lengths):
    """Each 'graph' re-runs its segment into its static outputs, as a replay does: captured at the first step
    (once per call, the guided forward reusing the same graphs), replayed after, bit for bit the eager loop."""
    want = generate(model, cfg=cfg, lengths=lengths)
    graphs = EmulatedGraphs()
    got = generate(model, graphs=graphs, cfg=cfg, lengths=lengths)
    assert torch.equal(got, want)
    assert graphs.captures == model.config.depth + 1


def test_a_failed_capture_finishes_eagerly_with_the_same_bits(model):
    want = generate(model, cfg=0.7)
    assert torch.equal(generate(model, graphs=EmulatedGraphs(fail={2}), cfg=0.7), want)


def test_the_eager_loop_is_the_dit_forward_step_by_step(model):
    """inference's cached embeddings and segments are the estimator's uncached forward, Euler step by step."""
    refs, case = inputs(), info()["cases"]["cfg"]
    mu, prompt, steps, rate = refs["cfg/mu"], refs["cfg/prompt"], case["steps"], case["inference_cfg_rate"]
    want = generate(model, "cfg", generator_seed=3)
    x = torch.randn(1, 100, mu.shape[1], generator=torch.Generator().manual_seed(3))
    cond = torch.zeros_like(x)
    cond[..., :prompt.shape[2]] = prompt
    x[..., :prompt.shape[2]] = 0
    lengths, d, t = torch.tensor([mu.shape[1]]), torch.ones(1) * (1 / steps), 0
    with torch.inference_mode():
        for _ in range(steps):
            time = torch.ones(1) * t
            v = model.estimator(x, cond, lengths, time, d, mu.transpose(2, 1)).transpose(2, 1)
            null = model.estimator(x, cond, lengths, time, d, mu.transpose(2, 1), drop_audio_cond=True,
                                   drop_text=True).transpose(2, 1)
            x = x + (1 / steps) * (v + (v - null) * rate)
            t = t + 1 / steps
            x[:, :, :prompt.shape[2]] = 0
    assert torch.equal(x, want)


def test_every_attention_call_is_the_sites_with_upstreams_mask(model, monkeypatch):
    from mizuoto.runtime import accel

    calls = []
    reference = cfm.ATTENTION.reference
    monkeypatch.setattr(cfm.ATTENTION, "reference", lambda q, k, v, mask, *rest: calls.append(mask)
                        or reference(q, k, v, mask, *rest))
    generate(model, lengths=[44, 37, 30], cfg=0.7)
    depth, steps, heads = model.config.depth, info()["cases"]["batch3"]["steps"], model.config.heads
    assert len(calls) == 2 * depth * steps  # guided: a second forward per step
    mask = calls[0]
    assert mask.dtype == torch.bool and mask.shape == (3, heads, 44, 44)
    assert mask[1, :, :, :37].all() and not mask[1, :, :, 37:].any() and mask[0].all()
    assert cfm.ATTENTION.name == "gpt_sovits.cfm" and cfm.ATTENTION.approx_ok and accel.REGISTRY["gpt_sovits.cfm"]


def test_a_bound_policy_runs_the_site(model):
    """Under the math policy every call of the site goes to the math backend (with upstream's mask), close to SDPA."""
    from mizuoto.runtime.accel import policy_for
    from mizuoto.runtime.context import RequestContext

    auto = generate(model, lengths=[44, 37, 30])
    run = policy_for("math").start()
    with RequestContext(0, accel=run).step():
        math = generate(model, lengths=[44, 37, 30])
    assert sum(run.used.values()) == model.config.depth * info()["cases"]["batch3"]["steps"]
    torch.testing.assert_close(math, auto, rtol=0, atol=1e-4)


def test_the_noise_is_one_draw_from_the_generator(model):
    refs, case = inputs(), info()["cases"]["one_4"]
    g = torch.Generator().manual_seed(9)
    with torch.inference_mode():
        a = model.inference(refs["one_4/mu"], torch.tensor([case["frames"]]), refs["one_4/prompt"], 4, generator=g)
    reference = torch.Generator().manual_seed(9)
    torch.randn(1, 100, case["frames"], generator=reference)
    assert torch.equal(torch.rand(3, generator=g), torch.rand(3, generator=reference))
    torch.manual_seed(9)  # without a generator: the global one, as upstream
    with torch.inference_mode():
        b = model.inference(refs["one_4/mu"], torch.tensor([case["frames"]]), refs["one_4/prompt"], 4)
    assert torch.equal(a, b) and not a[:, :, :refs["one_4/prompt"].shape[2]].any()


def test_sizes_are_read_from_a_checkpoints_names(model):
    state = {"cfm." + k: v for k, v in model.state_dict().items()}
    assert cfm.cfm_config_from_state(state, "x.pth") == model.config
    released = {"cfm." + k: v for k, v in cfm.CFM(cfm.CFMConfig()).to("meta").state_dict().items()}
    assert cfm.cfm_config_from_state(released, "s2Gv3.pth") == cfm.CFMConfig()  # DiT(1024, 22, 16, 2, 512, 4)
    with pytest.raises(CheckpointError, match="x.pth has no cfm.estimator.proj_out.weight: it is not a v3/v4"):
        cfm.cfm_from_state({k: v for k, v in state.items() if "proj_out" not in k}, "x.pth")
    with pytest.raises(CheckpointError, match="long skip connection"):
        cfm.cfm_from_state({**state, "cfm.estimator.long_skip_connection.weight": torch.zeros(1)}, "x.pth")


def test_bad_inputs_are_one_line_errors(model):
    refs = inputs()
    mu, prompt, lengths = refs["one_4/mu"], refs["one_4/prompt"], torch.tensor([50])
    for args, message in (((mu[..., :5], lengths, prompt, 4), r"features must be \(B, T, 32\)"),
                          ((mu[:, :10], torch.tensor([10]), prompt, 4), "prompt has 15 frames, more than the 10"),
                          ((mu, lengths, prompt, 0), "at least one step")):
        with pytest.raises(InputError, match=message):
            model.inference(*args)


def test_text_positions_repeat_the_last_beyond_the_table():
    embed = cfm.TextEmbedding(8, 1)
    text = torch.zeros(1, cfm.TEXT_POSITIONS + 3, 8)
    with torch.no_grad():
        embed.text_blocks[0].pwconv2.weight.zero_()  # the blocks add nothing: the positions show
        embed.text_blocks[0].pwconv2.bias.zero_()
        out = embed(text, text.shape[1])
    assert torch.equal(out[0, -4:], embed.freqs_cis[-1].expand(4, -1))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cfg", [0.0, 0.7], ids=["unguided", "guided"])
def test_real_cuda_graphs_give_the_eager_bits(cfg):
    from mizuoto.runtime.graphs import Graphs

    model = build(info(), inputs(), "cuda")
    want = generate(model, cfg=cfg, lengths=[44, 37, 30], device="cuda")
    graphs = Graphs("cuda")
    for _ in range(2):  # captured in the first call, captured again in the second (one LayerSteps per call)
        got = generate(model, graphs=graphs, cfg=cfg, lengths=[44, 37, 30], device="cuda")
        assert torch.equal(got, want)


if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))
