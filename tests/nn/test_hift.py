"""HiFT (mizuoto/nn/hift.py, hift_f0.py) against seed-vc 0.4.3's HiFTGenerator and ConvRNNF0Predictor.

Against tests/parity/data/nn/hift (scripts/parity/seedvc_hift_references.py; torch 2.13, one thread, avx2, oneDNN
off), compared bitwise in a pinned subprocess:
- the STFT window (scipy's periodic Hann) for ten sizes, rebuilt without scipy;
- three tiny configurations (Seed-VC's layout, CosyVoice 2's three-stage layout with 480 samples a frame, and one
  with every other setting changed, whose magnitudes reach upstream's clip at 100 and whose wave reaches the
  clamp), every parameter random, from the legacy `weight_g` / `weight_v` state dicts: per case (batch 1 and 2,
  1 to 9 frames, some with f0 given) the F0 predictor's output, the source signal (upstream seeded with
  torch.manual_seed, ours given torch.Generator().manual_seed: the same phases and noise), the waveform of
  `forward(mel)` as Seed-VC's `vocoder_fn(mel)`, and the generator's state after each (three more draws);
- the same weights in CosyVoice 2's `parametrizations.weight.original0/1` layout (upstream's module rebuilt with
  torch.nn.utils.parametrizations.weight_norm): the waveform;
- Seed-VC's real configs/hifigan.yml size (base 512, 80 mels, F0 predictor 512) with procedural weights rebuilt
  here (`procedural_state`, the writer's: scripts/parity/seedvc_weights.py), one 6-frame mel: F0, source, waveform.
In process: checkpoint key layouts in both flavours, folding, one-line errors for bad checkpoints, configs and
inputs, the draw contract, output lengths, and no host reads during a forward; on CUDA (where present) which
generator each draw takes.
"""

import functools
import json
import math
import sys
from pathlib import Path

import pytest
import torch

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn import hift
from mizuoto.nn.hift_f0 import F0Predictor, F0PredictorConfig

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import HostReads, parity_module, reference_dir, run_pinned  # noqa: E402

procedural_state = parity_module("seedvc_weights").hift_state  # the writer's seeded weights

REFERENCES = Path(__file__).resolve().parents[1] / "parity" / "data" / "nn" / "hift"


def diff(ours: torch.Tensor, theirs: torch.Tensor):
    """0.0 when bitwise equal; the max abs difference otherwise; None when shape or dtype differ."""
    ours = ours.detach().float()
    if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
        return None
    return 0.0 if torch.equal(ours, theirs) else (ours - theirs).abs().max().item()


def run_case(model, name: str, case: dict, refs: dict, out: dict) -> None:
    mel = refs[case["mel"]]
    given = refs[case["given_f0"]] if "given_f0" in case else None
    with torch.inference_mode():
        f0 = model.predict_f0(mel)
        out[f"{name}/f0"] = diff(f0, refs[case["f0"]])
        g = torch.Generator().manual_seed(case["seed"])
        out[f"{name}/source"] = diff(model.source(f0 if given is None else given, g), refs[case["source"]])
        out[f"{name}/after_source"] = diff(torch.rand(3, generator=g), refs[case["after_source"]])
        g = torch.Generator().manual_seed(case["seed"])
        out[f"{name}/wave"] = diff(model(mel, g, f0=given), refs[case["wave"]])
        out[f"{name}/after_wave"] = diff(torch.rand(3, generator=g), refs[case["after_wave"]])


def reference_diffs(folder: Path) -> dict:
    """Everything in the references, ours against upstream's: name -> diff()."""
    from safetensors.torch import load_file

    refs = load_file(str(folder / "references.safetensors"))
    cases = json.loads((folder / "references.json").read_text())["cases"]
    out = {}
    for n in cases["window"]["sizes"]:
        out[f"window/{n}"] = diff(hift.periodic_hann(n), refs[f"window/{n}"])
    models = {}
    for name, entry in cases.items():
        if name.startswith("config/"):
            config = hift.HiFTConfig.from_dict(entry["config"])
            models[name[len("config/"):]] = hift.load_hift({k: refs[v] for k, v in entry["state"].items()}, config)
    for name, case in cases.items():
        if name.startswith("case/"):
            run_case(models[name.split("/")[1]], name, case, refs, out)
    twin_entry = cases["parametrized/seedvc"]
    twin = hift.load_hift({k: refs[v] for k, v in twin_entry["state"].items()}, models["seedvc"].config)
    out["parametrized/folded_weights"] = 0.0 if all(
        torch.equal(a, b) for a, b in zip(twin.state_dict().values(), models["seedvc"].state_dict().values(),
                                          strict=True)) else None
    case = cases[twin_entry["case"]]
    with torch.inference_mode():
        g = torch.Generator().manual_seed(case["seed"])
        out["parametrized/wave"] = diff(twin(refs[case["mel"]], g), refs[twin_entry["wave"]])
        out["parametrized/after_wave"] = diff(torch.rand(3, generator=g), refs[twin_entry["after_wave"]])
    real = cases["real"]
    config = hift.HiFTConfig.from_dict(real["config"])
    layout = {k: tuple(v) for k, v in real["layout"].items()}
    out["real/layout"] = 0.0 if hift.checkpoint_layout(config) == layout else None
    model = hift.load_hift(procedural_state(layout, real["seed"]), config)
    run_case(model, "real/b1_t6", cases["real/b1_t6"], refs, out)
    return out


# ---------------------------------------------------------------------------------------------------------
# Against upstream's references (pinned subprocess)


@functools.cache
def pinned_diffs() -> dict:
    return run_pinned(__file__, reference_dir("nn/hift"), timeout=300)


@functools.cache
def stored_cases() -> dict:
    return json.loads((REFERENCES / "references.json").read_text())["cases"]


def test_references_are_reproduced_bit_for_bit():
    got = pinned_diffs()
    cases = stored_cases()
    runs = [n for n in cases if n.startswith("case/")] + ["real/b1_t6"]
    assert len(runs) == 13
    for run in runs:
        for part in ("f0", "source", "after_source", "wave", "after_wave"):
            assert f"{run}/{part}" in got, (run, part)
    assert {f"window/{n}" for n in cases["window"]["sizes"]} <= set(got)
    assert {"parametrized/wave", "parametrized/after_wave", "parametrized/folded_weights", "real/layout"} <= set(got)
    bad = {name: value for name, value in got.items() if value != 0.0}
    assert not bad, bad


# ---------------------------------------------------------------------------------------------------------
# In process

TINY = hift.HiFTConfig(in_channels=6, base_channels=16, nb_harmonics=3, upsample_rates=(4, 2),
                       upsample_kernel_sizes=(8, 4), f0_predictor=F0PredictorConfig(in_channels=6, cond_channels=8))


def tiny_model(config: hift.HiFTConfig = TINY, seed: int = 0) -> hift.HiFTGenerator:
    return hift.load_hift(procedural_state(hift.checkpoint_layout(config), seed), config)


def test_default_config_is_seed_vcs_hifigan_yml():
    assert hift.HiFTConfig.from_dict(stored_cases()["real"]["config"]) == hift.HiFTConfig()
    assert hift.HiFTConfig().samples_per_frame == 256


def test_checkpoint_layouts_are_upstreams_state_dict_keys():
    cases = stored_cases()
    for name in ("seedvc", "cosyvoice2", "odd"):
        entry = cases[f"config/{name}"]
        assert set(hift.checkpoint_layout(hift.HiFTConfig.from_dict(entry["config"]))) == set(entry["state"])
    twin = cases["parametrized/seedvc"]["state"]
    assert set(hift.checkpoint_layout(hift.HiFTConfig.from_dict(cases["config/seedvc"]["config"]),
                                      "parametrized")) == set(twin)
    assert "conv_pre.parametrizations.weight.original0" in twin and "source_downs.0.weight" in twin
    assert "m_source.l_linear.weight" in twin and "f0_predictor.condnet.8.parametrizations.weight.original1" in twin


def test_weight_norm_is_folded_once_as_the_hook_computes_it():
    layout = hift.checkpoint_layout(TINY)
    state = procedural_state(layout, 3)
    model = hift.load_hift(state, TINY)
    g, v = state["ups.1.weight_g"], state["ups.1.weight_v"]
    assert g.shape == (8, 1, 1)  # a transposed conv's g runs over its input channels (dim 0), as upstream's
    assert torch.equal(model.ups[1].weight, torch._weight_norm(v, g, 0))
    assert torch.equal(model.source_downs[0].weight, state["source_downs.0.weight"])
    assert not any(p.requires_grad for p in model.parameters()) and not model.training
    # either flavour, or weights already folded, load to the same model
    renamed = {k.replace("weight_g", "parametrizations.weight.original0")
               .replace("weight_v", "parametrizations.weight.original1"): t for k, t in state.items()}
    for other in (renamed, dict(model.state_dict())):
        again = hift.load_hift(other, TINY)
        assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), model.state_dict().values(),
                                                     strict=True))
    assert "stft_window" not in model.state_dict()
    assert torch.equal(model.stft_window, hift.periodic_hann(16))


@pytest.mark.parametrize("change", ["missing", "unexpected", "shape", "half_pair", "not_tensor"])
def test_bad_checkpoints_are_one_line_errors(change):
    state = procedural_state(hift.checkpoint_layout(TINY), 1)
    if change == "missing":
        del state["f0_predictor.classifier.bias"]
    elif change == "unexpected":
        state["generator.extra"] = torch.zeros(1)
    elif change == "shape":
        state["conv_post.bias"] = torch.zeros(3)
    elif change == "half_pair":
        del state["resblocks.2.convs1.0.weight_v"]
    else:
        state["m_source.l_linear.weight"] = [1.0]
    with pytest.raises(CheckpointError) as error:
        hift.load_hift(state, TINY, source="hift.pt")
    assert "\n" not in str(error.value) and "hift.pt" in str(error.value)


@pytest.mark.parametrize(("data", "words"), [
    ({"hift": {"n_fft": 16}}, "unknown field"),
    ({"hift": {"istft_params": {"n_fft": 15, "hop_len": 4}}}, "even"),
    ({"hift": {"upsample_rates": [8, 8, 2]}}, "upsample_kernel_sizes"),
    ({"hift": {"resblock_dilation_sizes": [[1, 3, 5]]}}, "resblock_dilation_sizes"),
    ({"hift": {"source_resblock_kernel_sizes": [7]}}, "source_resblock"),
    ({"hift": {"in_channels": 100}}, "f0_predictor.in_channels"),
    ({"hift": {"base_channels": 0}}, "base_channels"),
    ({"hift": {"audio_limit": float("nan")}}, "audio_limit"),
    ({"hift": {}, "f0_predictor": {"hidden": 3}}, "unknown field"),
    ({"f0_predictor": {}}, "'hift'"),
])
def test_bad_configs_are_one_line_errors(data, words):
    with pytest.raises(CheckpointError) as error:
        hift.HiFTConfig.from_dict(data)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_extra_source_resblock_entries_are_ignored_as_upstreams_zip_does():
    config = hift.HiFTConfig.from_dict({"hift": {"source_resblock_kernel_sizes": [7, 11, 3],
                                                 "source_resblock_dilation_sizes": [[1, 3, 5]] * 3}})
    assert config.source_resblock_kernel_sizes == (7, 11, 3)
    with torch.device("meta"):
        assert len(hift.HiFTGenerator(config).source_resblocks) == 2


@pytest.mark.parametrize("frames", [1, 2, 7])
@pytest.mark.parametrize("batch", [1, 2])
def test_output_lengths(frames, batch):
    model = tiny_model()
    with torch.inference_mode():
        wave = model(torch.randn(batch, 6, frames), torch.Generator().manual_seed(0))
    assert wave.shape == (batch, frames * TINY.samples_per_frame) and TINY.samples_per_frame == 32
    assert wave.abs().max() <= TINY.audio_limit


def test_draws_are_phases_then_sine_noise_then_the_unused_noise_branch():
    model = tiny_model()
    f0 = torch.tensor([[0.0, 120.0, 240.0], [300.0, 5.0, 60.0]])
    g = torch.Generator().manual_seed(11)
    with torch.inference_mode():
        model.source(f0, g)
    want = torch.Generator().manual_seed(11)
    samples = 3 * TINY.samples_per_frame
    torch.rand((2, 4, 1), generator=want)
    torch.randn((2, 4, samples), generator=want)
    torch.randn((2, samples, 1), generator=want)
    assert torch.equal(g.get_state(), want.get_state())


def test_the_fundamental_starts_at_phase_zero_and_unvoiced_samples_are_noise_only():
    model = tiny_model()
    source_module = model.m_source
    f0 = torch.cat([torch.zeros(1, 1, 16), torch.full((1, 1, 16), 200.0)], dim=2)
    sines, voiced = source_module.sines(f0, torch.Generator().manual_seed(2))
    assert torch.equal(voiced[0, 0], (torch.arange(32) >= 16).float())
    assert sines[0, :, :16].abs().max() < 0.2  # sine amplitude / 3 noise std, no sines
    quiet = hift.SourceModule(hift.HiFTConfig(nsf_sigma=0.0, nsf_alpha=0.1))
    sines, _ = quiet.sines(torch.full((1, 1, 4), 100.0), torch.Generator().manual_seed(0))
    cycles = torch.cumsum(torch.full((4,), 100.0 / 22050), 0) % 1
    assert torch.allclose(sines[0, 0], 0.1 * torch.sin(2 * math.pi * cycles))


def test_the_window_is_periodic_hann():
    window = hift.periodic_hann(16)
    want = 0.5 - 0.5 * torch.cos(2 * math.pi * torch.arange(16, dtype=torch.float64) / 16)
    assert torch.allclose(window.double(), want, atol=1e-7) and window.dtype == torch.float32


@pytest.mark.parametrize("bad", ["mel_2d", "mel_channels", "no_generator", "f0_shape", "cpu_generator",
                                 "source_shape"])
def test_bad_inputs_are_one_line_errors(bad):
    model = tiny_model()
    mel, g = torch.randn(1, 6, 3), torch.Generator().manual_seed(0)
    with pytest.raises(InputError) as error, torch.inference_mode():
        if bad == "mel_2d":
            model(mel[0], g)
        elif bad == "mel_channels":
            model(torch.randn(1, 5, 3), g)
        elif bad == "no_generator":
            model(mel, None)
        elif bad == "f0_shape":
            model(mel, g, f0=torch.rand(1, 4))
        elif bad == "cpu_generator":
            model(mel, g, cpu_generator=torch.Generator())
        else:
            model.decode(mel, torch.zeros(1, 2, 96))
    assert "\n" not in str(error.value)


def test_the_f0_predictor_alone():
    predictor = F0Predictor(F0PredictorConfig(in_channels=4, cond_channels=6))
    assert sorted(predictor.state_dict()) == sorted(
        [f"condnet.{i}.{p}" for i in (0, 2, 4, 6, 8) for p in ("weight", "bias")] +
        ["classifier.weight", "classifier.bias"])
    with torch.no_grad():
        f0 = predictor(torch.randn(2, 4, 5))
    assert f0.shape == (2, 5) and (f0 >= 0).all()
    with pytest.raises(InputError):
        predictor(torch.randn(2, 3, 5))
    with pytest.raises(CheckpointError):
        F0PredictorConfig(cond_channels=0)


def test_no_host_reads_in_a_forward():
    model = tiny_model()
    mel, g = torch.randn(1, 6, 4), torch.Generator().manual_seed(0)
    with torch.inference_mode(), HostReads() as mode:
        model(mel, g)
    assert mode.reads == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_the_phases_come_from_the_cpu_generator_and_the_noise_from_the_device_one():
    """Upstream's Uniform draws its start phases on the CPU whatever the device; its noise on the device."""
    model = tiny_model().cuda()
    mel = torch.randn(1, 6, 3, device="cuda")
    with pytest.raises(InputError):
        model(mel, torch.Generator("cuda").manual_seed(0))
    device_gen, cpu_gen = torch.Generator("cuda").manual_seed(5), torch.Generator().manual_seed(5)
    with torch.inference_mode():
        first = model(mel, device_gen, cpu_generator=cpu_gen)
        again = model(mel, torch.Generator("cuda").manual_seed(5), cpu_generator=torch.Generator().manual_seed(5))
    assert torch.equal(first, again) and first.shape == (1, 3 * TINY.samples_per_frame)
    want_cpu = torch.Generator().manual_seed(5)
    torch.rand((1, 4, 1), generator=want_cpu)
    assert torch.equal(cpu_gen.get_state(), want_cpu.get_state())
    want_device = torch.Generator("cuda").manual_seed(5)
    torch.randn((1, 4, 96), generator=want_device, device="cuda")
    torch.randn((1, 96, 1), generator=want_device, device="cuda")
    assert device_gen.get_offset() == want_device.get_offset()


if __name__ == "__main__":  # the pinned subprocess of the reference test
    torch.set_num_threads(1)
    print(json.dumps(reference_diffs(Path(sys.argv[1]))))
