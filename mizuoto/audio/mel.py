"""Mel spectrograms that several engines' upstreams compute the same way, each reproduced operation for operation.

- `librosa_slaney_bank`: librosa 0.11's `filters.mel(sr, n_fft, n_mels, fmin, fmax)` with its defaults (Slaney
  scale and area normalisation), evaluated in float64 by numpy and stored in float32 exactly as librosa does:
  each triangle row is rounded to float32 first, then multiplied by its float64 normalisation and rounded again
  (an in-place multiply on a float32 array). The same numpy calls run here, so on a given machine the matrix
  is librosa's bit for bit.
- `transformers_slaney_bank`: transformers 4.57's `audio_utils.mel_filter_bank(..., norm="slaney",
  mel_scale="slaney")`, kept in float64 as transformers keeps it (its Whisper feature extractor rounds it to
  float32 when it multiplies).
- `hifigan_log_mel`: the HiFi-GAN / BigVGAN `meldataset.mel_spectrogram` that Qwen3-TTS's speaker encoder and
  Seed-VC read: reflect padding by (n_fft - hop) / 2 on each side, a non-centred STFT with a periodic Hann
  window, the magnitude sqrt(re^2 + im^2 + 1e-9) summed from `view_as_real` (not `abs`), the projection
  `matmul(bank, spec)` and `log(clamp(x, min=1e-5))`.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

from mizuoto.core.errors import InputError

MAGNITUDE_EPS = 1e-9
LOG_FLOOR = 1e-5


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


def _hz_to_htk_mel(frequency) -> np.ndarray:
    # librosa keeps a 0-d array here (np.asanyarray of the scalar) and takes numpy's log10.
    return 2595.0 * np.log10(1.0 + np.asanyarray(frequency) / 700.0)


def _htk_mel_to_hz(mels: np.ndarray) -> np.ndarray:
    return 700.0 * (10.0 ** (mels / 2595.0) - 1.0)


def librosa_bank(sample_rate: int, n_fft: int, n_mels: int, f_min: float = 0.0, f_max: float | None = None,
                 htk: bool = False) -> np.ndarray:
    """librosa.filters.mel(sr, n_fft, n_mels, fmin, fmax, htk) with its Slaney area normalisation, float32:
    a (n_mels, n_fft // 2 + 1) array. The band edges are evenly spaced on the Slaney mel scale (librosa's
    default) or the HTK one (`htk`, RMVPE's); band i rises from edge i to i + 1 and falls to i + 2. `f_max`
    None is librosa's sr / 2."""
    if f_max is None:
        f_max = float(sample_rate) / 2
    to_mel, to_hz = (_hz_to_htk_mel, _htk_mel_to_hz) if htk else (_hz_to_mel, _mel_to_hz)
    weights = np.zeros((n_mels, 1 + n_fft // 2), dtype=np.float32)
    fft_freqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sample_rate)
    mel_f = to_hz(np.linspace(to_mel(f_min), to_mel(f_max), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fft_freqs)
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))  # rounded to float32 here ...
    weights *= (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, np.newaxis]  # ... and again here
    return weights


def librosa_slaney_bank(sample_rate: int, n_fft: int, n_mels: int, f_min: float = 0.0,
                        f_max: float | None = None) -> np.ndarray:
    """librosa.filters.mel with its defaults (Slaney scale and norm): `librosa_bank(..., htk=False)`."""
    return librosa_bank(sample_rate, n_fft, n_mels, f_min, f_max)


# --------------------------------------------------------------------------------------------------
# transformers' Slaney mel filter bank (float64)


def _hertz_to_mel_slaney(freq: float) -> float:
    # transformers' scalar path: a Python float in, numpy's log where it is above 1 kHz
    mels = 3.0 * freq / 200.0
    if freq >= 1000.0:
        mels = 15.0 + np.log(freq / 1000.0) * (27.0 / np.log(6.4))
    return mels


def _mel_to_hertz_slaney(mels: np.ndarray) -> np.ndarray:
    freq = 200.0 * mels / 3.0
    log_region = mels >= 15.0
    freq[log_region] = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mels[log_region] - 15.0))
    return freq


def transformers_slaney_bank(num_frequency_bins: int, num_mel_filters: int, min_frequency: float,
                             max_frequency: float, sampling_rate: int) -> np.ndarray:
    """transformers' mel_filter_bank with Slaney scale and norm: float64 (num_frequency_bins, num_mel_filters)."""
    mel_freqs = np.linspace(_hertz_to_mel_slaney(min_frequency), _hertz_to_mel_slaney(max_frequency),
                            num_mel_filters + 2)
    filter_freqs = _mel_to_hertz_slaney(mel_freqs)
    fft_freqs = np.linspace(0, sampling_rate // 2, num_frequency_bins)
    filter_diff = np.diff(filter_freqs)
    slopes = np.expand_dims(filter_freqs, 0) - np.expand_dims(fft_freqs, 1)
    down_slopes = -slopes[:, :-2] / filter_diff[:-1]
    up_slopes = slopes[:, 2:] / filter_diff[1:]
    bank = np.maximum(np.zeros(1), np.minimum(down_slopes, up_slopes))
    bank *= np.expand_dims(2.0 / (filter_freqs[2:num_mel_filters + 2] - filter_freqs[:num_mel_filters]), 0)
    return bank


# --------------------------------------------------------------------------------------------------
# The HiFi-GAN / BigVGAN log-mel spectrogram


@lru_cache(maxsize=8)
def _librosa_bank(sample_rate: int, n_fft: int, n_mels: int, f_min: float, f_max: float | None) -> torch.Tensor:
    return torch.from_numpy(librosa_slaney_bank(sample_rate, n_fft, n_mels, f_min, f_max)).float()


@lru_cache(maxsize=8)
def _hann(win_length: int) -> torch.Tensor:
    return torch.hann_window(win_length)


def hifigan_frames(samples: int, n_fft: int, hop_length: int) -> int:
    """How many frames hifigan_log_mel gives for `samples` samples."""
    return 1 + (samples + 2 * ((n_fft - hop_length) // 2) - n_fft) // hop_length


def hifigan_log_mel(wave: torch.Tensor, *, sample_rate: int, n_fft: int, n_mels: int, hop_length: int,
                    win_length: int, f_min: float = 0.0, f_max: float | None = None,
                    magnitude_eps: float = MAGNITUDE_EPS) -> torch.Tensor:
    """(batch, samples) float32 audio -> log-mels (batch, n_mels, frames), on the audio's device (the bank and
    window are built on the CPU and moved, as upstream builds them). `magnitude_eps`: what the magnitude adds
    under its square root (GPT-SoVITS' copy, module/mel_processing.py, adds 1e-8)."""
    padding = int((n_fft - hop_length) / 2)
    if wave.shape[-1] <= padding:
        raise InputError(f"the audio is too short for its mel spectrogram: {wave.shape[-1]} samples, it needs at "
                         f"least {padding + 1} at {sample_rate} Hz")
    y = F.pad(wave.unsqueeze(1), (padding, padding), mode="reflect").squeeze(1)
    spec = torch.stft(y, n_fft, hop_length=hop_length, win_length=win_length, window=_hann(win_length).to(y.device),
                      center=False, pad_mode="reflect", normalized=False, onesided=True, return_complex=True)
    spec = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + magnitude_eps)
    mel = torch.matmul(_librosa_bank(sample_rate, n_fft, n_mels, f_min, f_max).to(y.device), spec)
    return torch.log(torch.clamp(mel, min=LOG_FLOOR))
