"""Live parity of Mizuoto's VoxCPM AudioVAE against voxcpm 2.0.3, at the released sizes (dev only).

Run it with the Python of an environment that has upstream installed (scripts/parity/voxcpm_upstream_env.sh);
our modules are imported from the clone given by --ours (default: this clone):

    .venv-voxcpm-upstream/bin/python scripts/parity/voxcpm_vae_live.py [--ours /path/to/clone] [--seconds 2]

It pins one intra-op thread (--threads) and ATEN_CPU_CAPABILITY=avx2 for both sides (the variable must be
set before torch loads, so the script re-executes itself with it when missing; ENGINES.md section 1).

Models, built with upstream's classes at full size, every parameter re-randomised (weight_g, Snake alphas
and the sample-rate embeddings start constant upstream), saved as upstream saves them (audiovae.pth with
"state_dict") and loaded by ours through read_audio_vae_weights / load_audio_vae:
- v1: the class defaults (VoxCPM-0.5B's VAE, 16 kHz);
- v1_44k: a 44.1 kHz v1 with odd strides (1764 samples per frame; VoxCPM 1.5's kind, its exact config
  is not checked here);
- v2: the class defaults (the released VoxCPM2's VAE: 16 kHz in, 48 kHz out, conditioned on the rate).
Compared, each by the maximum absolute difference, which must be 0.0: encode of odd-length noisy tones,
decode of random latents (batch 2), v2 decode at another rate, and v2 streaming in 4-frame patches.
Exit status 1 when anything differs.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
import warnings
from pathlib import Path

from pinned import add_ours_argument, pin_process  # beside this script


def _parse():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_ours_argument(parser)
    parser.add_argument("--seconds", type=float, default=1.0, help="length of the encoded audio")
    parser.add_argument("--frames", type=int, default=25, help="latent frames decoded")
    parser.add_argument("--threads", type=int, default=1)
    return parser.parse_args()


pin_process()
ARGS = _parse()
sys.path.insert(0, str(ARGS.ours.resolve()))

import torch  # noqa: E402
from voxcpm.modules.audiovae import AudioVAE, AudioVAEConfig, AudioVAEConfigV2, AudioVAEV2  # noqa: E402

from mizuoto.engines.voxcpm.audio_vae import load_audio_vae, read_audio_vae_weights  # noqa: E402
from mizuoto.engines.voxcpm.audio_vae_config import audio_vae_config  # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning)
torch.set_num_threads(ARGS.threads)
RESULTS: list[tuple[str, float, bool]] = []

MODELS = {
    "v1": ("voxcpm", {}),
    "v1_44k": ("voxcpm", dict(encoder_rates=[2, 3, 6, 7, 7], decoder_rates=[7, 7, 6, 3, 2], sample_rate=44100)),
    "v2": ("voxcpm2", {}),
}


def compare(name: str, ours: torch.Tensor, theirs: torch.Tensor):
    same = ours.shape == theirs.shape and ours.dtype == theirs.dtype
    diff = (ours.double() - theirs.double()).abs().max().item() if same else float("nan")
    exact = same and torch.equal(ours, theirs)
    RESULTS.append((name, diff, exact))
    shape = tuple(ours.shape) if same else f"{tuple(ours.shape)} vs {tuple(theirs.shape)}"
    print(f"{'OK  ' if exact else 'DIFF'} {name:34s} max|diff| {diff:.3e}  {shape}  "
          f"rms {theirs.double().pow(2).mean().sqrt().item():.3f}", flush=True)


def randomise(model, seed):
    with torch.no_grad():
        for index, (name, p) in enumerate(sorted(model.named_parameters())):
            u = torch.rand(p.shape, generator=torch.Generator().manual_seed(seed * 1000 + index)) * 2 - 1
            if name.endswith("alpha"):
                p.copy_(1 + 0.8 * u)
            elif name.endswith("weight_g"):
                p.copy_((1 + 0.5 * u) * (0.2 if name.endswith("block.3.weight_g") else 1.0))
            elif name.endswith("scale_embed.weight"):
                p.copy_(1 + 0.3 * u)
            elif name.endswith(("bias_embed.weight", "bias")):
                p.copy_(0.1 * u)
            else:
                p.copy_(u)
        model.decoder.model[-2].weight_g.mul_(0.3)


def main():
    generator = torch.Generator().manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        for seed, (name, (arch, values)) in enumerate(MODELS.items(), start=1):
            t0 = time.time()
            upstream = (AudioVAE(AudioVAEConfig(**values)) if arch == "voxcpm"
                        else AudioVAEV2(AudioVAEConfigV2(**values))).eval()
            randomise(upstream, seed)
            folder = Path(tmp) / name
            folder.mkdir()
            torch.save({"state_dict": upstream.state_dict()}, folder / "audiovae.pth")
            state, path = read_audio_vae_weights(folder)
            ours = load_audio_vae(state, audio_vae_config(arch, values), source=str(path))
            sr = ours.sample_rate

            length = int(ARGS.seconds * sr) + 7  # not a whole number of frames
            t = torch.arange(length) / sr
            audio = (0.3 * torch.sin(2 * math.pi * 220 * t) + 0.05 * torch.randn(length, generator=generator))[None]
            with torch.inference_mode():
                compare(f"{name} encode", ours.encode(audio, sr), upstream.encode(audio, sr))
                z = torch.randn(2, ours.latent_dim, ARGS.frames, generator=generator)
                compare(f"{name} decode", ours.decode(z), upstream.decode(z))
                if arch == "voxcpm2":
                    compare(f"{name} decode at 24 kHz", ours.decode(z, 24000),
                            upstream.decode(z, torch.tensor([24000], dtype=torch.int32)))
                    chunks = [z[:1, :, i:i + 4] for i in range(0, ARGS.frames, 4)]
                    with upstream.streaming_decode() as dec, ours.stream() as stream:
                        for k, chunk in enumerate(chunks):
                            compare(f"{name} stream chunk {k}", stream.decode_chunk(chunk), dec.decode_chunk(chunk))
            print(f"-- {name}: {sum(p.numel() for p in upstream.parameters()):,} parameters, "
                  f"{time.time() - t0:.1f} s", flush=True)
    differing = [name for name, _, exact in RESULTS if not exact]
    print(f"{len(RESULTS) - len(differing)}/{len(RESULTS)} identical" + (f"; differ: {differing}" if differing else ""))
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
