#!/usr/bin/env python
"""Reference outputs of upstream's HiFT vocoder (seed-vc 0.4.3 `modules/hifigan/generator.py` HiFTGenerator with
`modules/hifigan/f0_predictor.py` ConvRNNF0Predictor), for tests/nn/test_hift.py.

Usage, in upstream's venv (scripts/parity/seedvc_upstream_env.sh):
    python scripts/parity/seedvc_hift_references.py [OUTDIR]    # default tests/parity/data/nn/hift
(restarts itself under the parity pins; one thread, oneDNN off)

Writes OUTDIR/references.safetensors (C-contiguous arrays) and OUTDIR/references.json (cases, configs, seeds,
tensor names, environment):

- window/<n>: scipy's `get_window("hann", n, fftbins=True)` as float32 (upstream's STFT window), several n.
- config/<name>: three tiny configurations, every parameter drawn by `procedural_state` (weight norm's g and v,
  Snake alphas, biases, the F0 predictor; upstream inits some to constants): Seed-VC's layout (upsampling
  [8, 8], n_fft 16 hop 4) at 16 channels, CosyVoice 2's layout ([8, 5, 3], 480 samples a frame), and one with
  every other setting changed (harmonics, slopes, limits, thresholds, n_fft 8 hop 2, uneven dilations;
  a larger conv_post gain drives some magnitudes into upstream's clip at 100, asserted through a forward hook,
  and part of the wave into the clamp).
  Their legacy weight-norm state dicts (`weight_g` / `weight_v`) are stored.
- case/<config>/<name>: a seeded mel (batch 1 or 2, 1 to 9 frames) and what upstream computes from it: the F0
  predictor's output, the source signal (`_f02source`, global RNG seeded right before), the waveform
  (`forward(mel)`, as Seed-VC's `vocoder_fn(mel)`, seeded again right before), and three `torch.rand` draws
  after each seeded call (the generator's state after upstream's draws). Some cases pass `f0` to forward.
- parametrized/*: the first configuration with its weight norm re-registered as
  `torch.nn.utils.parametrizations.weight_norm` (CosyVoice 2's hift.pt layout: `parametrizations.weight.
  original0` / `original1`) holding the same g and v: its state dict and the waveform of one case, asserted
  here equal to the legacy module's.
- real/*: Seed-VC's configs/hifigan.yml (base 512, 80 mels, cond 512) with weights from `procedural_state`
  (seedvc_weights.py: the test rebuilds them; only the key list and shapes are stored), one short mel.

Every upstream call runs under torch.no_grad(), as Seed-VC's inference does.
"""

import json
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import environment, pin_process, write_references  # noqa: E402  (beside this script)
from seedvc_weights import hift_state as procedural_state  # noqa: E402  (the test's too)

pin_process()

import numpy as np  # noqa: E402
import seed_vc  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402
from scipy.signal import get_window  # noqa: E402

SEED_VC = Path(seed_vc.__file__).resolve().parent
sys.path.insert(0, os.path.dirname(seed_vc.__file__))  # upstream's modules import each other as `modules.*`
from modules.hifigan.f0_predictor import ConvRNNF0Predictor  # noqa: E402
from modules.hifigan.generator import HiFTGenerator  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/parity/data/nn/hift"
REFS, CASES = {}, {}


def put(name, tensor):
    assert name not in REFS, name
    t = tensor.detach()
    REFS[name] = (t.float() if t.is_floating_point() else t.long()).contiguous().numpy()
    return name


# ---------------------------------------------------------------------------------------------------------

REAL = yaml.safe_load((SEED_VC / "configs/hifigan.yml").read_text())
TINY = {
    "seedvc": {"hift": dict(REAL["hift"], in_channels=8, base_channels=16),
               "f0_predictor": {"num_class": 1, "in_channels": 8, "cond_channels": 12}},
    "cosyvoice2": {"hift": dict(REAL["hift"], in_channels=8, base_channels=16, sampling_rate=24000,
                                upsample_rates=[8, 5, 3], upsample_kernel_sizes=[16, 11, 7],
                                source_resblock_kernel_sizes=[7, 7, 11],
                                source_resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5], [1, 3, 5]]),
                   "f0_predictor": {"num_class": 1, "in_channels": 8, "cond_channels": 12}},
    "odd": {"hift": dict(in_channels=5, base_channels=12, nb_harmonics=2, sampling_rate=16000, nsf_alpha=0.3,
                         nsf_sigma=0.01, nsf_voiced_threshold=50, upsample_rates=[4, 2], upsample_kernel_sizes=[8, 4],
                         istft_params={"n_fft": 8, "hop_len": 2}, resblock_kernel_sizes=[3, 5],
                         resblock_dilation_sizes=[[1, 2], [3]], source_resblock_kernel_sizes=[3, 5],
                         source_resblock_dilation_sizes=[[1, 3], [2]], lrelu_slope=0.2, audio_limit=0.9),
            "f0_predictor": {"num_class": 1, "in_channels": 5, "cond_channels": 7}},
}
POST_GAIN = {"seedvc": 1.0, "cosyvoice2": 1.0, "odd": 7.0}  # "odd" reaches the magnitude clip and the clamp
CASE_SHAPES = {  # config: {case: (batch, frames, pass f0 to forward)}
    "seedvc": {"b1_t1": (1, 1, False), "b1_t3": (1, 3, False), "b1_t8": (1, 8, False), "b2_t5": (2, 5, False),
               "b1_t4_given_f0": (1, 4, True), "b2_t3_given_f0": (2, 3, True)},
    "cosyvoice2": {"b1_t2": (1, 2, False), "b1_t7": (1, 7, False), "b2_t4": (2, 4, False)},
    "odd": {"b1_t9": (1, 9, False), "b2_t6": (2, 6, False), "b1_t5_given_f0": (1, 5, True)},
}
WINDOWS = (2, 8, 16, 20, 64, 400, 480, 512, 1024, 1920)


def build(config: dict) -> HiFTGenerator:
    return HiFTGenerator(**config["hift"], f0_predictor=ConvRNNF0Predictor(**config["f0_predictor"])).eval()


def load_procedural(model, seed: int, post_gain: float = 1.0) -> dict:
    layout = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    state = procedural_state(layout, seed, post_gain)
    model.load_state_dict(state, strict=True)
    return state


def seeded(seed: int, fn):
    """fn() right after torch.manual_seed(seed), and three draws after it (the generator's state then)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        out = fn()
    return out, torch.rand(3)


def run_case(model, config_name: str, name: str, batch: int, frames: int, given_f0: bool, seed: int,
             in_channels: int) -> dict:
    g = torch.Generator().manual_seed(seed + 7)
    mel = torch.randn(batch, in_channels, frames, generator=g) * 1.5 - 2
    prefix = f"case/{config_name}/{name}"
    with torch.no_grad():
        f0 = model.f0_predictor(mel)
    entry = {"seed": seed, "batch": batch, "frames": frames, "mel": put(f"{prefix}/mel", mel),
             "f0": put(f"{prefix}/f0", f0)}
    forward_f0 = None
    if given_f0:  # a pitch track with unvoiced gaps, values around the threshold and high harmonics
        forward_f0 = torch.rand(batch, frames, generator=g) * 600
        forward_f0[:, ::3] = 0
        entry["given_f0"] = put(f"{prefix}/given_f0", forward_f0)
    source_f0 = f0 if forward_f0 is None else forward_f0
    source, after_source = seeded(seed, lambda: model._f02source(source_f0))
    wave, after_wave = seeded(seed, lambda: model(mel, f0=forward_f0))
    entry.update(source=put(f"{prefix}/source", source), after_source=put(f"{prefix}/after_source", after_source),
                 wave=put(f"{prefix}/wave", wave), after_wave=put(f"{prefix}/after_wave", after_wave))
    return entry, wave, mel, forward_f0


def parametrized_copy(model, config: dict):
    """`model` rebuilt with torch.nn.utils.parametrizations.weight_norm where it has the legacy hook, holding the
    same g and v (so the same weights): CosyVoice 2's hift.pt layout."""
    from torch.nn.utils import parametrizations, remove_weight_norm

    twin = build(config)
    for module in twin.modules():
        if hasattr(module, "weight_g"):
            remove_weight_norm(module)
            parametrizations.weight_norm(module)
    renamed = {k.replace("weight_g", "parametrizations.weight.original0")
               .replace("weight_v", "parametrizations.weight.original1"): v for k, v in model.state_dict().items()}
    twin.load_state_dict(renamed, strict=True)
    return twin.eval()


def tiny_cases():
    for index, (config_name, config) in enumerate(TINY.items()):
        model = build(config)
        state = load_procedural(model, 100 * (index + 1), POST_GAIN[config_name])
        clipped = []  # the share of magnitudes upstream clips at 100, per case
        half = config["hift"].get("istft_params", {"n_fft": 16})["n_fft"] // 2 + 1
        model.conv_post.register_forward_hook(
            lambda module, args, out, half=half, clipped=clipped:
            clipped.append(float((out[:, :half] > math.log(100)).float().mean())))
        CASES[f"config/{config_name}"] = {
            "config": config, "seed": 100 * (index + 1), "post_gain": POST_GAIN[config_name],
            "state": {k: put(f"config/{config_name}/state/{k}", v) for k, v in state.items()}}
        voiced = []
        for case_index, (name, (batch, frames, given_f0)) in enumerate(CASE_SHAPES[config_name].items()):
            seed = 1000 * (index + 1) + case_index
            entry, wave, mel, forward_f0 = run_case(model, config_name, name, batch, frames, given_f0, seed,
                                                    config["hift"]["in_channels"])
            CASES[f"case/{config_name}/{name}"] = entry
            f0 = REFS[entry.get("given_f0", entry["f0"])]
            voiced.append(float((f0 > config["hift"].get("nsf_voiced_threshold", 10)).mean()))
            clamped = float((np.abs(REFS[entry["wave"]]) >= config["hift"].get("audio_limit", 0.99)).mean())
            assert clamped < 0.5, (config_name, name, clamped)  # the clamp must not hide the waveform
            if config_name == "seedvc" and name == "b2_t5":
                twin = parametrized_copy(model, config)
                twin_wave, after = seeded(entry["seed"], lambda twin=twin, mel=mel: twin(mel))
                assert torch.equal(twin_wave, wave), "the parametrized copy should give the legacy module's wave"
                CASES["parametrized/seedvc"] = {
                    "state": {k: put(f"parametrized/seedvc/state/{k}", v) for k, v in twin.state_dict().items()},
                    "case": f"case/{config_name}/{name}", "wave": put("parametrized/seedvc/wave", twin_wave),
                    "after_wave": put("parametrized/seedvc/after_wave", after)}
        assert any(0 < v < 1 for v in voiced), (config_name, voiced)  # voiced and unvoiced samples in a case
        if POST_GAIN[config_name] > 1:
            assert 0 < max(clipped) < 0.5, clipped


def real_case():
    model = build(REAL)
    state = load_procedural(model, 9000)
    entry, _, _, _ = run_case(model, "real", "b1_t6", 1, 6, False, 9100, REAL["hift"]["in_channels"])
    CASES["real/b1_t6"] = entry
    CASES["real"] = {"config": {"hift": REAL["hift"], "f0_predictor": REAL["f0_predictor"]}, "seed": 9000,
                     "layout": {k: list(v.shape) for k, v in state.items()}}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for n in WINDOWS:
        put(f"window/{n}", torch.from_numpy(get_window("hann", n, fftbins=True).astype(np.float32)))
    CASES["window"] = {"sizes": list(WINDOWS)}
    tiny_cases()
    real_case()
    write_references(REFS, OUT / "references.safetensors")
    info = {"cases": CASES, "environment": environment(["seed-vc", "torch", "scipy", "numpy", "safetensors"]),
            "note": "HiFT references (seed-vc 0.4.3); float tensors stored as float32; compare bitwise"}
    (OUT / "references.json").write_text(json.dumps(info, indent=1) + "\n")
    size = (OUT / "references.safetensors").stat().st_size
    print(f"wrote {len(REFS)} tensors ({size} bytes), {len(CASES)} cases to {OUT}")


if __name__ == "__main__":
    main()
