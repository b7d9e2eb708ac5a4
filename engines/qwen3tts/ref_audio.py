"""Bringing a voice-clone reference to the 24 kHz both encoders read.

Upstream (`Qwen3TTSModel.create_voice_clone_prompt`, `Qwen3TTSTokenizer._normalize_audio_inputs`)
resamples a reference that is not at 24 kHz with `librosa.resample` (soxr "HQ") in float32, whose output
has ceil(samples * 24000 / rate) samples; `mizuoto.audio.librosa_soxr` makes the same calls, so the
x-vector and the codes are upstream's at any rate. Audio already at 24 kHz passes through untouched.
"""

from __future__ import annotations

import torch

from mizuoto.audio.librosa_soxr import resample
from mizuoto.core.errors import InputError

SAMPLE_RATE = 24000


def at_rate(wave, rate: int, target: int = SAMPLE_RATE) -> torch.Tensor:
    """Mono float32 `wave` (samples,) at `rate` Hz -> (samples',) at `target` Hz (the input itself when
    the rates agree)."""
    wave = torch.as_tensor(wave)
    if wave.dim() != 1:
        raise InputError(f"a reference must be mono audio of shape (samples,), got shape {tuple(wave.shape)}")
    if not wave.is_floating_point():
        raise InputError(f"a reference must be float audio in [-1, 1], got {wave.dtype}")
    rate = int(rate)
    if rate <= 0:
        raise InputError(f"the reference's sample rate must be positive, got {rate}")
    wave = wave.to(torch.float32)
    if rate == target:
        return wave
    return resample(wave, rate, target)
