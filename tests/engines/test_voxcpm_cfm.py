"""VoxCPM's flow-matching sampler and small heads, without upstream installed.

Against tests/parity/data/voxcpm/cfm (scripts/parity/voxcpm_cfm_references.py: voxcpm 2.0.3's
`UnifiedCFM`, `ScalarQuantizationLayer` and stop predictor, torch 2.13, one thread, avx2), compared
bitwise in a subprocess at one thread and ATEN_CPU_CAPABILITY=avx2:
- the sampler with a closed-form estimator (`toy_velocity`, a copy of the script's) in 15 settings, and
  every estimator call's inputs where recorded: noise draw, grid, sway, Euler steps, the guidance batch,
  CFG-Zero*, mean mode, bfloat16;
- the sampler with upstream's own DiTs (v1 and v2), once engines/voxcpm/local.py exists;
- the FSQ layer (float32, bfloat16) and the stop predictor.
In process: the draw contract (torch.manual_seed equivalence, generator state after), the call layout,
no host syncs, option errors, and the CUDA-graph wrapper (emulated on the CPU, real where CUDA is).
"""

import functools
import json
import sys
from pathlib import Path

import pytest
import torch

from mizuoto.core.errors import InputError
from mizuoto.engines.voxcpm import cfm, heads

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import EmulatedGraphs, HostReads, bit_diff, reference_dir, run_pinned  # noqa: E402

REFERENCES = Path(__file__).resolve().parents[1] / "parity" / "data" / "voxcpm" / "cfm"
LOCAL_DIT = Path(__file__).resolve().parents[2] / "engines" / "voxcpm" / "local.py"
ARGS = ("x", "mu", "t", "cond", "dt")


def toy_velocity(weights, x, mu, t, cond, dt):
    """A copy of scripts/parity/voxcpm_cfm_references.py's estimator (pinned by toy/probe)."""
    h = torch.matmul(weights["x"], x)
    h = h + torch.matmul(mu, weights["mu"].transpose(0, 1))[:, :, None]
    h = h + torch.matmul(weights["cond"], cond).mean(dim=2, keepdim=True)
    h = h + weights["t"][None, :, None] * t[:, None, None] + weights["dt"][None, :, None] * dt[:, None, None]
    return (torch.tanh(h) * 1.5 - 0.5 * x) * weights["gain"]


def options_of(case: dict) -> cfm.FlowOptions:
    o = case["options"]
    return cfm.FlowOptions(n_timesteps=o["n_timesteps"], cfg_value=o["cfg_value"],
                           sway_sampling_coef=o["sway_sampling_coef"], use_cfg_zero_star=o["use_cfg_zero_star"],
                           temperature=o["temperature"], mean_mode=case["mean_mode"])


def our_dit(entry: dict, refs: dict) -> torch.nn.Module:
    """Our port of upstream's DiT for a recorded one (`entry`: version, in_channels, config = upstream's
    MiniCPM4Config fields as the DiT sees them, state = key -> tensor name)."""
    from mizuoto.engines.voxcpm import local, minicpm

    config = minicpm.MiniCPMConfig.from_dict(entry["config"])
    model = local.LocalDiT(config, in_channels=entry["in_channels"], version=entry["version"])
    model.load_state_dict({k: refs[v] for k, v in entry["state"].items()}, strict=True)
    return model.eval()


def reference_diffs(folder: Path, with_dit: bool) -> dict:
    """Everything in the references, ours against upstream's: name -> bit_diff()."""
    from safetensors.torch import load_file

    refs = load_file(str(folder / "references.safetensors"))
    cases = json.loads((folder / "references.json").read_text())["cases"]
    out = {}
    probe = {k[len("toy/probe/w_"):]: v for k, v in refs.items() if k.startswith("toy/probe/w_")}
    out["toy/probe"] = bit_diff(toy_velocity(probe, *(refs[f"toy/probe/{a}"] for a in ARGS)), refs["toy/probe/out"])
    dits = {}
    for name, case in cases.items():
        kind = name.split("/")[0]
        if kind == "toy" and name != "toy/probe":
            dtype = getattr(torch, case["dtype"])
            weights = {k: refs[v].to(dtype) for k, v in case["weights"].items()}
            calls = []

            def estimator(*args, weights=weights, calls=calls):
                calls.append([a.clone() for a in args])
                return toy_velocity(weights, *args)

            got = cfm.sample(estimator, refs[case["mu"]].to(dtype), refs[case["cond"]].to(dtype),
                             torch.Generator().manual_seed(case["seed"]), case["options"]["patch_size"],
                             options_of(case))
            out[name] = bit_diff(got, refs[case["out"]])
            out[f"{name}/calls"] = 0.0 if len(calls) == case["calls"] else None
            for i, recorded in enumerate(case.get("recorded", [])):
                for arg, ours, theirs in zip(ARGS, calls[i] if i < len(calls) else [None] * 5, recorded, strict=True):
                    out[f"{name}/call{i}/{arg}"] = None if ours is None else bit_diff(ours, refs[theirs])
        elif kind.startswith("dit_") and with_dit and name.count("/") == 1:
            if kind not in dits:
                dits[kind] = our_dit(cases[kind], refs)
            dit = dits[kind]
            with torch.inference_mode():
                if name.endswith("/direct"):
                    got = dit(*(refs[a] for a in case["args"]))
                else:
                    got = cfm.sample(dit, refs[case["mu"]], refs[case["cond"]],
                                     torch.Generator().manual_seed(case["seed"]), case["options"]["patch_size"],
                                     options_of(case))
            out[name] = bit_diff(got, refs[case["out"]])
        elif name.startswith("heads/fsq"):
            dtype = getattr(torch, case["dtype"])
            layer = heads.ScalarQuantizer(case["in_dim"], case["out_dim"], case["latent_dim"], case["scale"])
            layer.load_state_dict({k: refs[v] for k, v in case["state"].items()}, strict=True)
            with torch.inference_mode():
                out[name] = bit_diff(layer.to(dtype)(refs[case["hidden"]].to(dtype)), refs[case["out"]])
        elif name == "heads/stop":
            stop_proj, stop_head = heads.stop_layers(refs[case["hidden"]].shape[-1])
            holder = torch.nn.Module()
            holder.stop_proj, holder.stop_head = stop_proj, stop_head
            holder.load_state_dict({k: refs[v] for k, v in case["state"].items()}, strict=True)
            with torch.inference_mode():
                logits = heads.stop_logits(stop_proj, stop_head, refs[case["hidden"]])
                out[name] = bit_diff(logits, refs[case["logits"]])
                flags = heads.stop_flags(stop_proj, stop_head, refs[case["hidden"]])
            out[f"{name}/flags"] = 0.0 if torch.equal(flags, refs[case["argmax"]] == 1) else None
    return out


# ---------------------------------------------------------------------------------------------------
# Against upstream's references (pinned subprocess)


@functools.cache
def pinned_diffs() -> dict:
    """One pinned subprocess for both reference tests (with the DiT cases once local.py exists)."""
    return run_pinned(__file__, reference_dir("voxcpm/cfm"), "dit" if LOCAL_DIT.exists() else "toy", timeout=300)


def test_references_are_reproduced_bit_for_bit():
    got = pinned_diffs()
    cases = json.loads((REFERENCES / "references.json").read_text())["cases"]
    toy = [n for n in cases if n.startswith("toy/") and n != "toy/probe"]
    assert len(toy) == 15 and all(n in got for n in toy)
    assert sum(1 for n in got if "/call" in n and n.count("/") == 3) == 5 * sum(
        len(cases[n].get("recorded", [])) for n in toy)
    assert {"heads/fsq_float32", "heads/fsq_bfloat16", "heads/stop", "heads/stop/flags"} <= set(got)
    bad = {name: value for name, value in got.items() if value != 0.0}
    assert not bad, bad


@pytest.mark.skipif(not LOCAL_DIT.exists(), reason="engines/voxcpm/local.py (the DiT port) is not written yet; "
                                                     "the DiT references are in tests/parity/data/voxcpm/cfm")
def test_sampler_with_our_dit_reproduces_upstreams_dits():
    got = pinned_diffs()
    dit = {n: v for n, v in got.items() if n.startswith("dit_")}
    assert len(dit) == 8, sorted(dit)  # per version: one direct call, three sampler cases
    bad = {name: value for name, value in got.items() if value != 0.0}
    assert not bad, bad


# ---------------------------------------------------------------------------------------------------
# In process


def spy(velocity=None):
    calls = []

    def estimator(x, mu, t, cond, dt):
        calls.append((x.clone(), mu.clone(), t.clone(), cond.clone(), dt.clone()))
        return velocity(x, mu, t, cond, dt) if velocity else torch.sin(x * 3 + t[:, None, None]) - 0.2 * x

    return estimator, calls


def test_noise_is_upstreams_global_draw_and_the_generator_advances_as_one_randn():
    torch.manual_seed(123)
    want = torch.randn(2, 5, 3)
    after = torch.random.get_rng_state()
    generator = torch.Generator().manual_seed(123)
    estimator, calls = spy()
    got = cfm.sample(estimator, torch.randn(2, 7), torch.randn(2, 5, 3), generator, 3, cfm.FlowOptions(n_timesteps=1))
    assert not calls and torch.equal(got, want)  # one step, and it has zero velocity: x is the noise
    assert torch.equal(generator.get_state(), after)


@pytest.mark.parametrize("mean_mode", [False, True])
def test_the_guidance_batch_layout(mean_mode):
    options = cfm.FlowOptions(n_timesteps=10, mean_mode=mean_mode)
    estimator, calls = spy()
    mu, cond = torch.randn(2, 6), torch.randn(2, 4, 3)
    cfm.sample(estimator, mu, cond, torch.Generator().manual_seed(0), 3, options)
    schedule = cfm.make_schedule(options, "cpu", torch.float32)
    assert len(calls) == 9 and options.zero_steps == 1
    for k, (x, mu_in, t, cond_in, dt) in enumerate(calls, start=1):
        assert x.shape == (4, 4, 3) and torch.equal(x[:2], x[2:])
        assert torch.equal(mu_in[:2], mu) and not mu_in[2:].any()  # the unconditional half: mu zeroed
        assert torch.equal(cond_in, torch.cat((cond, cond)))  # the prefix patch stays in both halves
        assert torch.equal(t, schedule.times[k].expand(4))
        assert torch.equal(dt, schedule.deltas[k].expand(4) if mean_mode else torch.zeros(4))
        assert t.is_contiguous() and dt.is_contiguous()


@pytest.mark.parametrize(("steps", "zero"), [(1, 1), (10, 1), (24, 1), (25, 1), (49, 2), (50, 2), (74, 3), (100, 4)])
def test_zero_velocity_steps(steps, zero):
    assert cfm.FlowOptions(n_timesteps=steps).zero_steps == zero
    assert cfm.FlowOptions(n_timesteps=steps, use_cfg_zero_star=False).zero_steps == 0


def test_the_grid_runs_from_one_to_zero():
    grid = cfm.time_grid(10, 1.0, "cpu", torch.float32)
    assert grid[0] == 1 and grid[-1] == 0 and (grid[:-1] > grid[1:]).all()
    schedule = cfm.make_schedule(cfm.FlowOptions(), "cpu", torch.float32)
    assert schedule.times.shape == schedule.deltas.shape == (10,)


@pytest.mark.parametrize("bad", [dict(n_timesteps=0), dict(n_timesteps=2.5), dict(n_timesteps=True),
                                 dict(cfg_value=float("nan")), dict(cfg_value="2"), dict(temperature=float("inf")),
                                 dict(sway_sampling_coef=None)])
def test_bad_options_are_refused(bad):
    with pytest.raises(InputError):
        cfm.FlowOptions(**bad)


def test_no_host_syncs_in_a_patch():
    estimator, _ = spy()
    schedule = cfm.make_schedule(cfm.FlowOptions(), "cpu", torch.float32)
    with HostReads() as mode:
        cfm.sample(estimator, torch.randn(1, 6), torch.randn(1, 4, 2), torch.Generator().manual_seed(0), 2,
                   schedule=schedule)
    assert mode.reads == []


def run_patches(sampler, generator, shapes=((1, 6, 4, 3), (1, 6, 4, 3), (2, 6, 4, 3), (1, 6, 4, 3))):
    g = torch.Generator().manual_seed(9)
    out = []
    for batch, mu_dim, feat, prefix in shapes:
        mu, cond = torch.randn(batch, mu_dim, generator=g), torch.randn(batch, feat, prefix, generator=g)
        out.append(sampler(mu, cond, generator))
    return out


@pytest.mark.parametrize("inside_drawing", [False, True])
def test_emulated_graphs_give_the_eager_bits_and_draws(inside_drawing):
    estimator, _ = spy()
    options = cfm.FlowOptions(n_timesteps=6, cfg_value=1.5)
    eager_gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        want = run_patches(cfm.GraphedSampler(estimator, None, 3, options), eager_gen)
        graphs = EmulatedGraphs()
        sampler = cfm.GraphedSampler(estimator, graphs, 3, options)
        request = torch.Generator().manual_seed(4)
        if inside_drawing:
            with graphs.drawing(request):
                got = run_patches(sampler, graphs.generator)
        else:
            got = run_patches(sampler, request)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert graphs.captures == 2  # one per shape; the other patches replay
    assert torch.equal(request.get_state(), eager_gen.get_state())
    assert got[0].data_ptr() != got[1].data_ptr()  # each call's patch is its own tensor


def test_a_failed_capture_runs_that_shape_eagerly_with_the_same_bits():
    estimator, _ = spy()
    with torch.no_grad():
        want = run_patches(cfm.GraphedSampler(estimator, None, 3), torch.Generator().manual_seed(4))
        graphs = EmulatedGraphs(fail={1})
        sampler = cfm.GraphedSampler(estimator, graphs, 3)
        got = run_patches(sampler, torch.Generator().manual_seed(4))
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert graphs.captures == 2 and graphs.epoch == 1


def test_heads_names_and_shapes():
    fsq = heads.ScalarQuantizer(8, 6, latent_dim=4, scale=9)
    assert sorted(fsq.state_dict()) == ["in_proj.bias", "in_proj.weight", "out_proj.bias", "out_proj.weight"]
    assert fsq(torch.randn(2, 3, 8)).shape == (2, 3, 6)
    stop_proj, stop_head = heads.stop_layers(8)
    assert stop_head.bias is None and stop_head.weight.shape == (2, 8) and stop_proj.weight.shape == (8, 8)
    with torch.no_grad():
        stop_head.weight.zero_()  # tied logits: argmax picks 0, "continue"
    assert not heads.stop_flags(stop_proj, stop_head, torch.randn(3, 8)).any()


def test_fsq_snaps_to_ninths():
    fsq = heads.ScalarQuantizer(4, 4, latent_dim=4, scale=9)
    with torch.no_grad():
        fsq.in_proj.weight.copy_(torch.eye(4) * 10)
        fsq.in_proj.bias.zero_()
        fsq.out_proj.weight.copy_(torch.eye(4))
        fsq.out_proj.bias.zero_()
        got = fsq(torch.tensor([[0.0, 0.01, -0.2, 5.0]]))
    levels = torch.round(torch.tanh(torch.tensor([0.0, 0.1, -2.0, 50.0])) * 9) / 9
    assert torch.equal(got[0], levels) and got[0, -1] == 1.0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_real_cuda_graphs_give_the_eager_bits_and_upstreams_draws():
    from mizuoto.runtime.graphs import Graphs

    estimator, _ = spy()
    with torch.no_grad():
        torch.manual_seed(5)  # upstream: the global CUDA generator
        want_noise = torch.randn(1, 4, 3, device="cuda")
        noise = cfm.sample(estimator, torch.randn(1, 6, device="cuda"), torch.randn(1, 4, 3, device="cuda"),
                           torch.Generator("cuda").manual_seed(5), 3, cfm.FlowOptions(n_timesteps=1))
        assert torch.equal(noise, want_noise)
        inputs = [(torch.randn(b, 6, device="cuda"), torch.randn(b, 4, 3, device="cuda")) for b in (1, 1, 2, 1)]
        eager_gen = torch.Generator("cuda").manual_seed(4)
        want = [cfm.sample(estimator, mu, cond, eager_gen, 3) for mu, cond in inputs]
        sampler = cfm.GraphedSampler(estimator, Graphs("cuda"), 3)
        request = torch.Generator("cuda").manual_seed(4)
        got = [sampler(mu, cond, request) for mu, cond in inputs]
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert torch.equal(request.get_state(), eager_gen.get_state())


if __name__ == "__main__":  # the pinned subprocess of the reference tests
    torch.set_num_threads(1)
    print(json.dumps(reference_diffs(Path(sys.argv[1]), with_dit=sys.argv[2] == "dit")))
