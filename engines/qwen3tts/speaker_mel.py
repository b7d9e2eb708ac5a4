"""The log-mel spectrogram Qwen3-TTS's speaker encoder reads, computed as qwen-tts 0.1.1 computes it.

Upstream (`Qwen3TTSForConditionalGeneration.extract_speaker_embedding` -> `mel_spectrogram`) fixes
every setting in code, whatever the checkpoint says: 24 kHz audio, 128 mel bands, n_fft = window =
1024, hop 256, 0-12 kHz. The steps, each reproduced here with the same operation on the same operands:

- the filter bank is librosa 0.11's `filters.mel(sr=24000, n_fft=1024, n_mels=128, fmin=0,
  fmax=12000)` (Slaney scale, Slaney area normalisation), evaluated in float64 by numpy and stored in
  float32 exactly as librosa does: each triangle row is rounded to float32 first, then multiplied by
  its float64 normalisation and rounded again (an in-place multiply on a float32 array). The same
  numpy calls run here, so on a given machine the matrix is librosa's bit for bit;
- the waveform is reflect-padded by (n_fft - hop) / 2 = 384 samples on each side, then a non-centred
  STFT with a periodic Hann window (built on the CPU) runs over it;
- the magnitude is sqrt(re^2 + im^2 + 1e-9), summed from `view_as_real` as upstream does (not `abs`);
- the projection is `matmul(bank (128, 513), spec (B, 513, frames))` and the result is
  `log(clamp(x, min=1e-5))` (upstream also multiplies by C = 1, which changes nothing).

Upstream builds its input with `torch.from_numpy` and computes the spectrogram on the CPU, moving only
the result to the model's device; `speaker_mel` does the same, so a GPU model sees the CPU's mels.
Frames: 1 + (samples - 256) // 256 (the padding adds 768, the window takes 1024); reflect padding
needs more than 384 samples.
"""

from __future__ import annotations

import numpy as np
import torch

from mizuoto.audio import mel
from mizuoto.core.errors import InputError

SAMPLE_RATE = 24000
N_MELS = 128
N_FFT = 1024
WIN_LENGTH = 1024
HOP_LENGTH = 256
F_MIN = 0
F_MAX = 12000
PADDING = (N_FFT - HOP_LENGTH) // 2  # 384 samples reflected onto each end
MIN_SAMPLES = PADDING + 1  # reflect padding needs more samples than it pads


def slaney_mel_bank() -> np.ndarray:
    """The speaker encoder's filter bank: librosa's for upstream's fixed settings (mizuoto/audio/mel.py)."""
    return mel.librosa_slaney_bank(SAMPLE_RATE, N_FFT, N_MELS, F_MIN, F_MAX)


# --------------------------------------------------------------------------------------------------
# The spectrogram


def frames(samples: int) -> int:
    """How many mel frames a waveform of `samples` samples gives."""
    return 1 + (samples + 2 * PADDING - N_FFT) // HOP_LENGTH


def speaker_mel(wave) -> torch.Tensor:
    """24 kHz mono audio (samples,) or (batch, samples) -> log-mels (batch, frames, 128), float32 on the
    CPU, the layout the speaker encoder takes (upstream's `mel_spectrogram(...).transpose(1, 2)`)."""
    wave = torch.as_tensor(wave)
    if wave.dim() == 1:
        wave = wave[None]
    if wave.dim() != 2:
        raise InputError(f"the speaker encoder takes mono audio (samples,) or (batch, samples), "
                         f"got shape {tuple(wave.shape)}")
    if wave.shape[-1] < MIN_SAMPLES:
        raise InputError(f"the reference audio is too short for the speaker encoder: {wave.shape[-1]} samples, "
                         f"it needs at least {MIN_SAMPLES} at {SAMPLE_RATE} Hz")
    wave = wave.detach().to("cpu", torch.float32)
    return mel.hifigan_log_mel(wave, sample_rate=SAMPLE_RATE, n_fft=N_FFT, n_mels=N_MELS, hop_length=HOP_LENGTH,
                               win_length=WIN_LENGTH, f_min=F_MIN, f_max=F_MAX).transpose(1, 2)
