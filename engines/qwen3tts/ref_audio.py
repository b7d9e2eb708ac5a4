"""Bringing a voice-clone reference to the 24 kHz both encoders read.

Upstream (`Qwen3TTSModel.create_voice_clone_prompt`, `Qwen3TTSTokenizer._normalize_audio_inputs`)
resamples a reference that is not at 24 kHz with `librosa.resample` (soxr "HQ"), whose output has
ceil(samples * 24000 / rate) samples. Mizuoto resamples with its own windowed-sinc resampler and then
pads or cuts to that same length, so the number of codec frames matches upstream's; the samples
themselves differ from soxr's in the last bits (two good resamplers never agree exactly). Audio that is
already at 24 kHz passes through untouched and is what makes the x-vector and the codes exact.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from mizuoto.audio.resample import resample
from mizuoto.core.errors import InputError

SAMPLE_RATE = 24000


def librosa_length(samples: int, rate: int, target: int) -> int:
    """librosa.resample's output length: ceil(samples * (target / rate)), the ratio in float64."""
    return int(math.ceil(samples * (float(target) / rate)))


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
    length = librosa_length(wave.shape[0], rate, target)
    out = resample(wave, rate, target)
    if out.shape[0] < length:
        out = F.pad(out, (0, length - out.shape[0]))
    return out[:length]
