"""Live parity of Mizuoto's Vocos and F5-TTS mel front end against vocos 0.1.0 / f5-tts 1.1.22 (dev only).

Run it with the Python of an environment that has upstream installed (vocos, f5-tts and torchaudio's
pure-Python parts); our modules are imported from the clone given by --ours (default: this clone):

    .venv-f5tts-upstream/bin/python scripts/parity/f5tts_vocos_live.py [--ours /path/to/clone] [--full]

It pins one intra-op thread and ATEN_CPU_CAPABILITY=avx2 for both sides (the variable must be set
before torch loads, so the script re-executes itself with it when missing; ENGINES.md section 1 says why).

Compared, each by the maximum absolute difference, which must be exactly 0.0:
- the mel filter bank and window against torchaudio's (htk and slaney scales, with and without norm);
- our log-mel against f5's `MelSpec` / `get_vocos_mel_spectrogram` and vocos's `MelSpectrogramFeatures`
  ("center" and "same" padding) on random waves of several lengths and batch sizes;
- our `load_vocos(folder).decode` against upstream `Vocos.decode`, for a tiny randomised Vocos saved
  in the published layout (config.yaml + pytorch_model.bin, and again as model.safetensors), and with
  --full for the vocos-mel-24khz architecture (512 x 8) with random weights.
Exit status 1 when anything differs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from pinned import add_ours_argument, pin_process  # beside this script


def _parse():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_ours_argument(parser)
    parser.add_argument("--full", action="store_true", help="also check the full-size vocos-mel-24khz architecture")
    parser.add_argument("--threads", type=int, default=1)
    return parser.parse_args()


pin_process()
ARGS = _parse()
sys.path.insert(0, str(ARGS.ours.resolve()))

import torch  # noqa: E402
import torchaudio  # noqa: E402
import yaml  # noqa: E402
from f5_tts.model.modules import MelSpec, get_vocos_mel_spectrogram  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from vocos import Vocos as UpstreamVocos  # noqa: E402
from vocos.feature_extractors import MelSpectrogramFeatures  # noqa: E402
from vocos.heads import ISTFTHead  # noqa: E402
from vocos.models import VocosBackbone  # noqa: E402

from mizuoto.engines.f5tts import mel as our_mel  # noqa: E402
from mizuoto.engines.f5tts.vocos import load_vocos  # noqa: E402

RESULTS: list[tuple[str, float, bool]] = []


def compare(name: str, ours: torch.Tensor, theirs: torch.Tensor):
    same_shape = ours.shape == theirs.shape and ours.dtype == theirs.dtype
    diff = (ours.double() - theirs.double()).abs().max().item() if same_shape and ours.numel() else float("nan")
    exact = same_shape and torch.equal(ours, theirs)
    RESULTS.append((name, diff, exact))
    shape = tuple(ours.shape) if same_shape else f"{tuple(ours.shape)} vs {tuple(theirs.shape)}"
    print(f"{'OK  ' if exact else 'DIFF'} {name:62s} max|diff| {diff:.3e}  {shape}", flush=True)


def random_waves(generator) -> list[torch.Tensor]:
    """Noise, a chirp and near-silence; odd lengths and batches, a few seconds at most."""
    waves = []
    for batch, samples in ((1, 24000), (2, 12345), (3, 777), (1, 513), (2, 24000 * 3 + 17)):
        waves.append(0.3 * torch.randn(batch, samples, generator=generator))
    t = torch.arange(48000, dtype=torch.float64) / 24000
    waves.append((0.5 * torch.sin(2 * torch.pi * (50 * t + 2500 * t * t))).float().unsqueeze(0))
    waves.append(1e-6 * torch.randn(1, 30000, generator=generator))
    return waves


def check_filter_banks():
    for mel_scale in ("htk", "slaney"):
        for norm in (None, "slaney"):
            for n_freqs, n_mels, sr, f_min, f_max in ((513, 100, 24000, 0.0, 12000.0), (201, 80, 16000, 20.0, 7600.0),
                                                      (1025, 128, 44100, 0.0, 22050.0)):
                theirs = torchaudio.functional.melscale_fbanks(n_freqs, f_min, f_max, n_mels, sr, norm, mel_scale)
                ours = our_mel.mel_filter_bank(n_freqs, f_min, f_max, n_mels, sr, norm, mel_scale)
                compare(f"filter bank {mel_scale}/{norm} {n_freqs}x{n_mels} @{sr}", ours, theirs)


def check_mels(generator):
    f5_module = MelSpec(mel_spec_type="vocos")
    vocos_center = MelSpectrogramFeatures(padding="center")
    vocos_same = MelSpectrogramFeatures(padding="same")
    compare("window vs torchaudio Spectrogram.window", our_mel._hann_window(1024, torch.device("cpu"), torch.float32),
            vocos_center.mel_spec.spectrogram.window)
    ours_bank = our_mel._filter_bank(our_mel.F5_MEL, torch.device("cpu"), torch.float32)
    compare("filter bank vs torchaudio MelScale.fb", ours_bank, vocos_center.mel_spec.mel_scale.fb)
    same_settings = our_mel.MelSettings(padding="same", log_floor=1e-7)
    for wave in random_waves(generator):
        label = f"{tuple(wave.shape)}"
        ours = our_mel.log_mel(wave)
        compare(f"log-mel F5 MelSpec {label}", ours, f5_module(wave))
        compare(f"log-mel F5 get_vocos_mel_spectrogram {label}", ours, get_vocos_mel_spectrogram(wave))
        compare(f"log-mel F5 (B,1,T) input {label}", our_mel.log_mel(wave.unsqueeze(1)), f5_module(wave))
        compare(f"log-mel vocos features center {label}", our_mel.log_mel(wave, our_mel.VOCOS_MEL), vocos_center(wave))
        compare(f"log-mel vocos features same {label}", our_mel.log_mel(wave, same_settings), vocos_same(wave))
        assert ours.shape[-1] == our_mel.F5_MEL.frames(wave.shape[-1])
    one = random_waves(generator)[0][0]
    compare("log-mel unbatched (samples,)", our_mel.log_mel(one), f5_module(one.unsqueeze(0))[0])


def _randomise(module: torch.nn.Module, generator):
    """Every parameter random, LayerNorm weights around 1, so nothing is zero or one by construction."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if name.endswith("norm.weight") or name.endswith("final_layer_norm.weight"):
                p.copy_(1.0 + 0.3 * noise)
            elif name.endswith("gamma"):
                p.copy_(0.5 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            else:
                fan_in = p[0].numel()
                p.copy_(noise / fan_in ** 0.5)


def build_upstream(dim: int, intermediate: int, layers: int, generator) -> tuple[UpstreamVocos, dict]:
    config = {
        "feature_extractor": {"class_path": "vocos.feature_extractors.MelSpectrogramFeatures",
                              "init_args": {"sample_rate": 24000, "n_fft": 1024, "hop_length": 256, "n_mels": 100,
                                            "padding": "center"}},
        "backbone": {"class_path": "vocos.models.VocosBackbone",
                     "init_args": {"input_channels": 100, "dim": dim, "intermediate_dim": intermediate,
                                   "num_layers": layers}},
        "head": {"class_path": "vocos.heads.ISTFTHead",
                 "init_args": {"dim": dim, "n_fft": 1024, "hop_length": 256, "padding": "center"}},
    }
    model = UpstreamVocos(MelSpectrogramFeatures(**config["feature_extractor"]["init_args"]),
                          VocosBackbone(**config["backbone"]["init_args"]),
                          ISTFTHead(**config["head"]["init_args"]))
    _randomise(model, generator)
    return model.eval(), config


def check_vocoder(name: str, dim: int, intermediate: int, layers: int, generator, mel_lengths):
    upstream, config = build_upstream(dim, intermediate, layers, generator)
    state = upstream.state_dict()
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        torch.save(state, folder / "pytorch_model.bin")
        ours = load_vocos(folder)
        (folder / "pytorch_model.bin").unlink()
        save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
        ours_st = load_vocos(folder)
    for key, tensor in ours.state_dict().items():
        compare(f"{name} loaded tensor {key}", tensor, state[key])
    inputs = [torch.randn(batch, 100, frames, generator=generator) * 2.0 - 4.0 for batch, frames in mel_lengths]
    # Realistic inputs too: mels of audio, as F5 produces them.
    inputs += [our_mel.log_mel(w) for w in random_waves(generator)[:3]]
    for mel in inputs:
        theirs = upstream.decode(mel)
        compare(f"{name} decode {tuple(mel.shape)}", ours.decode(mel), theirs)
        compare(f"{name} decode (safetensors) {tuple(mel.shape)}", ours_st.decode(mel), theirs)


def main() -> int:
    torch.set_num_threads(ARGS.threads)
    print(f"torch {torch.__version__}, torchaudio {torchaudio.__version__}, threads {torch.get_num_threads()}, "
          f"ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY')}, ours from {ARGS.ours}")
    generator = torch.Generator().manual_seed(20240611)
    check_filter_banks()
    check_mels(generator)
    check_vocoder("tiny", 64, 128, 2, generator, [(1, 2), (1, 3), (1, 50), (2, 173), (3, 401)])
    if ARGS.full:
        check_vocoder("full", 512, 1536, 8, generator, [(1, 94), (2, 311)])
    bad = [(n, d) for n, d, exact in RESULTS if not exact]
    worst = max((d for _, d, _ in RESULTS if d == d), default=0.0)
    print(f"\n{len(RESULTS)} comparisons, {len(bad)} not bit-identical, worst max|diff| {worst:.3e}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
