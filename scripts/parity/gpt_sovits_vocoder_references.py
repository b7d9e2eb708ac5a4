#!/usr/bin/env python
"""Reference outputs of GPT-SoVITS v3 and v4's vocoders, written by upstream's own classes from an
RVC-Boss/GPT-SoVITS checkout (GitHub only: tests/fallback.py compares on a machine whose floats differ), loaded as
TTS_infer_pack/TTS.py's init_vocoder loads them.

    python scripts/parity/gpt_sovits_vocoder_references.py OUTDIR --checkout PATH            # the set
    python scripts/parity/gpt_sovits_vocoder_references.py OUTDIR --checkout PATH --spread   # how far it moves

The interpreter: scripts/parity/gpt_sovits_upstream_env.sh (module/models.py imports einops and x-transformers;
GPT_SoVITS/BigVGAN/bigvgan.py imports huggingface_hub, which that venv pins, for PyTorchModelHubMixin). Nothing is
stood in: neither module imports torchaudio.

- v3: upstream's vendored GPT_SoVITS/BigVGAN (torch path; that copy has no CUDA kernel option) with the released
  bigvgan_v2_24khz_100band_256x config.json (RELEASED_V3: NVIDIA's published file, which lj1995/GPT-SoVITS
  redistributes in pretrained_models/models--nvidia--bigvgan_v2_24khz_100band_256x/) at upsample_initial_channel
  128 instead of 1536 (the rates, kernels, 100 bands, SnakeBeta with log-scale parameters, resblock "1", clamp
  rather than tanh and conv_post without bias are the release's). Every parameter of the weight-normed generator
  (weight_g, weight_v, biases, the activations' log alpha and log beta) is drawn by gpt_sovits_weights.sovits_fill
  (conv_post's magnitude then scaled, V3["scale"]);
  the anti-alias filter buffers stay the ones upstream computes (stored: they are two 12-tap filters). The state
  is written as bigvgan_generator.pt ({"generator": state}) beside the config.json in a temporary folder, read with
  BigVGAN.from_pretrained(folder) and then remove_weight_norm(), as TTS.init_vocoder does.
- v4: module/models.py Generator with init_vocoder's arguments (resblock "1", kernels 3 7 11, dilations 1 3 5,
  rates 10 6 2 2 2, kernels 20 12 4 4 4, gin_channels 0, is_bias True) at upsample_initial_channel 32 instead of
  512, remove_weight_norm(), the plain state filled by sovits_fill (conv_post scaled, V4["scale"]), saved as
  vocoder.pth and loaded back with load_state_dict(torch.load(...)), as init_vocoder loads
  gsv-v4-pretrained/vocoder.pth.

Each vocoder runs on one mel (1, 100, 40) and a batch (2, 100, 27), drawn around the CFM's log-mel range.
OUTDIR/references.safetensors holds the mels, the two filters (the same 12 taps: both are 2x resampling's
low-pass) and upstream's waveforms; OUTDIR/references.json the configs, the state dicts' names and shapes (the test
rebuilds the files from them, the seeds and the scales) and the mels' sizes.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt_sovits_weights import sovits_fill  # noqa: E402
from pinned import (  # noqa: E402
    checkout_writer_main,
    is_spread_child,
    lifted_runs,
    pin_process,
    save_spread,
    write_checkout_tensors,
)

if "--spread" not in sys.argv and not is_spread_child():
    pin_process()

import torch  # noqa: E402

# bigvgan_v2_24khz_100band_256x/config.json as NVIDIA publishes it (generator and training fields alike)
RELEASED_V3 = {
    "resblock": "1", "num_gpus": 0, "batch_size": 32, "learning_rate": 0.0001, "adam_b1": 0.8, "adam_b2": 0.99,
    "lr_decay": 0.9999996, "seed": 1234,
    "upsample_rates": [4, 4, 2, 2, 2, 2], "upsample_kernel_sizes": [8, 8, 4, 4, 4, 4],
    "upsample_initial_channel": 1536, "resblock_kernel_sizes": [3, 7, 11],
    "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    "use_tanh_at_final": False, "use_bias_at_final": False, "activation": "snakebeta", "snake_logscale": True,
    "use_cqtd_instead_of_mrd": True, "cqtd_filters": 128, "cqtd_max_filters": 1024, "cqtd_filters_scale": 1,
    "cqtd_dilations": [1, 2, 4], "cqtd_hop_lengths": [512, 256, 256], "cqtd_n_octaves": [9, 9, 9],
    "cqtd_bins_per_octaves": [24, 36, 48], "mpd_reshapes": [2, 3, 5, 7, 11], "use_spectral_norm": False,
    "discriminator_channel_mult": 1, "use_multiscale_melloss": True, "lambda_melloss": 15, "clip_grad_norm": 500,
    "segment_size": 65536, "num_mels": 100, "num_freq": 1025, "n_fft": 1024, "hop_size": 256, "win_size": 1024,
    "sampling_rate": 24000, "fmin": 0, "fmax": None, "fmax_for_loss": None, "normalize_volume": True,
    "num_workers": 4, "dist_config": {"dist_backend": "nccl", "dist_url": "tcp://localhost:54321", "world_size": 1},
}
# the random generator's activations grow to ~50 through its six stages: conv_post's magnitude is scaled down
# so that the clamp to [-1, 1] cuts only the peaks (about 1% of the samples; unscaled, 99% would sit at +-1)
V3 = {"config": {**RELEASED_V3, "upsample_initial_channel": 128}, "seed": 500, "scale": {"conv_post.weight_g": 0.006}}
# TTS.init_vocoder's Generator(...) for v4, narrower
V4 = {"args": {"initial_channel": 100, "resblock": "1", "resblock_kernel_sizes": [3, 7, 11],
               "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "upsample_rates": [10, 6, 2, 2, 2],
               "upsample_initial_channel": 32, "upsample_kernel_sizes": [20, 12, 4, 4, 4], "gin_channels": 0,
               "is_bias": True},
      "seed": 600, "scale": {"conv_post.weight": 10.0}}  # scaled up so that tanh bends (unscaled: std 0.01)
MELS = {"one": (1, 40), "batch": (2, 27)}  # (batch, frames)
FILTERS = {"upsample": "upsample.filter", "lowpass": "downsample.lowpass.filter"}


def upstream(checkout: Path):
    sys.path.insert(0, str(checkout / "GPT_SoVITS"))
    sys.path.insert(0, str(checkout))  # f5_tts (imported by module/models.py) imports itself as GPT_SoVITS.f5_tts
    from BigVGAN.bigvgan import BigVGAN
    from module.models import Generator

    return BigVGAN, Generator


def is_filter(name: str) -> bool:
    return name.endswith(".filter")


def fill(entries: list, seed: int, scale: dict, kept: dict) -> dict:
    """[(name, shape)] -> the state: entry i from sovits_fill(seed + i) times scale.get(name, 1), the filter
    buffers from `kept` (the test builds the same state)."""
    return {name: kept[name] if is_filter(name) else sovits_fill(name, tuple(shape), seed + i) * scale.get(name, 1.0)
            for i, (name, shape) in enumerate(entries)}


def build_v3(checkout: Path, folder: Path):
    """Upstream's BigVGAN from a from_pretrained folder holding the seeded weight-normed state."""
    bigvgan, _ = upstream(checkout)
    from BigVGAN.env import AttrDict

    shell = bigvgan(AttrDict(V3["config"]))
    state = shell.state_dict()
    entries = [(k, list(v.shape)) for k, v in state.items()]
    filters = {kind: state[f"activation_post.{suffix}"].clone() for kind, suffix in FILTERS.items()}
    for name in filter(is_filter, state):  # every activation has the same two filters
        assert any(torch.equal(state[name], f) and name.endswith(FILTERS[k]) for k, f in filters.items()), name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(V3["config"], indent=2) + "\n")
    torch.save({"generator": fill(entries, V3["seed"], V3["scale"], state)}, folder / "bigvgan_generator.pt")
    model = bigvgan.from_pretrained(str(folder))  # a local folder: no download
    model.remove_weight_norm()
    return model.eval(), entries, filters


def build_v4(checkout: Path, folder: Path):
    """Upstream's v4 Generator, weight norm removed, loaded from a vocoder.pth holding the seeded state."""
    _, generator = upstream(checkout)
    model = generator(**V4["args"])
    model.remove_weight_norm()
    entries = [(k, list(v.shape)) for k, v in model.state_dict().items()]
    torch.save(fill(entries, V4["seed"], V4["scale"], {}), folder / "vocoder.pth")
    model.load_state_dict(torch.load(folder / "vocoder.pth", map_location="cpu", weights_only=False))
    return model.eval(), entries


def outputs(checkout: Path) -> tuple[dict, dict]:
    g = torch.Generator().manual_seed(13)
    refs = {}
    for name, (batch, frames) in MELS.items():
        # around the CFM's denormalised log-mel range [-12, 2]: louder low bands, quieter high ones
        tilt = torch.linspace(0.0, -4.0, 100)[None, :, None]
        refs[f"mel/{name}"] = torch.randn(batch, 100, frames, generator=g) * 1.5 - 4.0 + tilt
    with tempfile.TemporaryDirectory() as tmp:
        v3, v3_entries, filters = build_v3(checkout, Path(tmp) / "bigvgan")
        v4, v4_entries = build_v4(checkout, Path(tmp))
    refs |= {f"filter/{kind}": f for kind, f in filters.items()}
    info = {"v3": {**V3, "entries": v3_entries, "filters": FILTERS},
            "v4": {**V4, "entries": v4_entries}, "mels": {k: list(v) for k, v in MELS.items()}}
    with torch.no_grad():
        for name in MELS:
            refs[f"v3/{name}"] = v3(refs[f"mel/{name}"])
            refs[f"v4/{name}"] = v4(refs[f"mel/{name}"])
    return {k: v.contiguous().clone() for k, v in refs.items()}, info


FLOATS = tuple(f"{v}/{m}" for v in ("v3", "v4") for m in MELS)


def write(out: Path, checkout: Path) -> None:
    refs, info = outputs(checkout)
    write_checkout_tensors(out, refs, info, checkout,
                           "BigVGAN/bigvgan.py BigVGAN.from_pretrained + remove_weight_norm (v3) and module/models.py "
                           "Generator + remove_weight_norm + load_state_dict (v4), as TTS.init_vocoder builds them",
                           ["torch", "huggingface_hub", "einops", "x-transformers"])


def spread(out: Path, checkout: Path) -> None:
    """Max |difference| of each waveform between the pinned run and runs with a pin lifted: OUTDIR/spread.json."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = lifted_runs(__file__, ["--checkout", checkout], tmp)
    pinned = runs.pop("pinned")
    report = {label: {k: float((r[k] - pinned[k]).abs().max()) for k in FLOATS} for label, r in runs.items()}
    save_spread(out, report, FLOATS)


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
