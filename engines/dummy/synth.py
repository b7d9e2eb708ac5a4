"""A deterministic harmonic synthesiser: frame parameters to a waveform.

Given the same parameters and the same generator state it produces the same samples bit for bit;
the generator supplies the harmonics' starting phases and the breath noise.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .config import DummyConfig

FADE_MS = 5


def frame_values(raw: torch.Tensor, config: DummyConfig, speed: float) -> dict[str, torch.Tensor]:
    """Raw head outputs (n, P) of one text -> per-token controls in physical units (float32)."""
    raw = raw.float()
    f0 = config.f0_low + (config.f0_high - config.f0_low) * torch.sigmoid(raw[:, 0])
    energy = torch.sigmoid(raw[:, 1])
    energy[0] = energy[-1] = 0.0  # BOS and EOS are lead-in and lead-out silence
    noise = 0.3 * torch.sigmoid(raw[:, 2])
    span = config.max_frames - config.min_frames
    frames = torch.round((config.min_frames + span * torch.sigmoid(raw[:, 3])) / speed).clamp(min=1)
    harmonics = torch.softmax(raw[:, 4:], dim=-1)
    return {"f0": f0, "energy": energy, "noise": noise, "frames": frames.long(), "harmonics": harmonics}


def synthesise(raw: torch.Tensor, config: DummyConfig, speed: float,
               generator: torch.Generator) -> torch.Tensor:
    """Frame parameters (n, P) of one text -> waveform (1, T) float32 in [-1, 1]."""
    v = frame_values(raw, config, speed)
    frames = v["frames"]
    # Per-frame controls, then per-sample by linear interpolation between frame centres.
    controls = torch.cat([v["f0"][:, None], v["energy"][:, None], v["noise"][:, None],
                          v["harmonics"]], dim=1)
    per_frame = controls.repeat_interleave(frames, dim=0)  # (F, C)
    samples = per_frame.shape[0] * config.hop
    per_sample = F.interpolate(per_frame.T[None], size=samples, mode="linear", align_corners=False)[0]
    f0, energy, noise, weights = per_sample[0], per_sample[1], per_sample[2], per_sample[3:]

    # Phase in float64: a float32 running sum drifts audibly over a few seconds.
    phase = torch.cumsum(f0.double() * (2 * math.pi / config.sample_rate), dim=0)
    k = torch.arange(1, config.harmonics + 1, device=raw.device, dtype=torch.float64)
    start = torch.rand(config.harmonics, generator=generator, device=raw.device, dtype=torch.float64)
    waves = torch.sin(k[:, None] * phase[None] + 2 * math.pi * start[:, None]).float()
    # Harmonics at or above Nyquist would alias; they are silenced sample by sample.
    audible = (k[:, None].float() * f0[None]) < (config.sample_rate / 2)
    voiced = (weights * waves * audible).sum(dim=0)

    breath = torch.randn(samples, generator=generator, device=raw.device) * noise
    wave = energy * (voiced + breath)
    fade = min(samples // 2, config.sample_rate * FADE_MS // 1000)
    if fade > 0:
        ramp = torch.linspace(0.0, 1.0, fade, device=raw.device)
        wave[:fade] *= ramp
        wave[-fade:] *= ramp.flip(0)
    return (0.9 * torch.tanh(wave))[None]
