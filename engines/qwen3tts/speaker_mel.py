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

from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

from mizuoto.core.errors import InputError

SAMPLE_RATE = 24000
N_MELS = 128
N_FFT = 1024
WIN_LENGTH = 1024
HOP_LENGTH = 256
F_MIN = 0
F_MAX = 12000
LOG_FLOOR = 1e-5
MAGNITUDE_EPS = 1e-9
PADDING = (N_FFT - HOP_LENGTH) // 2  # 384 samples reflected onto each end
MIN_SAMPLES = PADDING + 1  # reflect padding needs more samples than it pads


# --------------------------------------------------------------------------------------------------
# librosa's Slaney mel filter bank, in numpy (float64 arithmetic, float32 result)

_F_SP = 200.0 / 3  # Hz per mel below 1 kHz
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = (_MIN_LOG_HZ - 0.0) / _F_SP
_LOG_STEP = np.log(6.4) / 27.0  # numpy's log, as librosa takes it


def _hz_to_mel(frequency) -> np.ndarray:
    # A 0-d array throughout, as librosa gets from np.asanyarray(scalar).
    frequency = np.asanyarray(frequency)
    mels = (frequency - 0.0) / _F_SP
    if frequency >= _MIN_LOG_HZ:
        mels = _MIN_LOG_MEL + np.log(frequency / _MIN_LOG_HZ) / _LOG_STEP
    return mels


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    freqs = 0.0 + _F_SP * mels
    log_t = mels >= _MIN_LOG_MEL
    freqs[log_t] = _MIN_LOG_HZ * np.exp(_LOG_STEP * (mels[log_t] - _MIN_LOG_MEL))
    return freqs


def slaney_mel_bank(sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS,
                    f_min: float = F_MIN, f_max: float = F_MAX) -> np.ndarray:
    """librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax) with its defaults (Slaney scale and norm,
    float32): a (n_mels, n_fft // 2 + 1) array."""
    weights = np.zeros((n_mels, 1 + n_fft // 2), dtype=np.float32)
    fft_freqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sample_rate)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(f_min), _hz_to_mel(f_max), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fft_freqs)
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))  # rounded to float32 here ...
    weights *= (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, np.newaxis]  # ... and again here
    return weights


@lru_cache(maxsize=1)
def _bank() -> torch.Tensor:
    return torch.from_numpy(slaney_mel_bank()).float()


@lru_cache(maxsize=1)
def _window() -> torch.Tensor:
    return torch.hann_window(WIN_LENGTH)


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
    y = F.pad(wave.unsqueeze(1), (PADDING, PADDING), mode="reflect").squeeze(1)
    spec = torch.stft(y, N_FFT, hop_length=HOP_LENGTH, win_length=WIN_LENGTH, window=_window(), center=False,
                      pad_mode="reflect", normalized=False, onesided=True, return_complex=True)
    spec = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + MAGNITUDE_EPS)
    mel = torch.matmul(_bank(), spec)
    return torch.log(torch.clamp(mel, min=LOG_FLOOR)).transpose(1, 2)
