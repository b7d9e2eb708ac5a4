"""RMVPE's log-mel front end: 16 kHz audio -> 128 HTK-scale log-mels every 10 ms.

Exact to seed-vc 0.4.3 `modules/rmvpe.py` (`MelSpectrogram`, as `RMVPE` builds it: 128 mels, 16 kHz, window and
FFT 1024, hop 160, 30 Hz to 8 kHz); the same front end as RVC's and GPT-SoVITS' copies. GPL-3.0 code, read not
copied. Data flow:

    audio (B, S) float32
      -> torch.stft(n_fft 1024, hop 160, periodic Hann 1024, center=True: reflect padding by 512 on each side)
      -> magnitude sqrt(re^2 + im^2)                                   (B, 513, 1 + S // 160)
      -> matmul(bank, magnitude) with librosa's HTK-scale, Slaney-normalised bank (128, 513)
      -> log(clamp(x, min=1e-5))                                       (B, 128, frames)

Only upstream's inference setting is reproduced: `RMVPE.infer_from_audio` never passes a key shift or a speed
(keyshift 0, speed 1, so the FFT, window and hop are the base ones and there is no magnitude rescaling), and
its `is_half=False` (float32 throughout; Seed-VC's wrapper uses that). The DirectML path (a conv-based STFT,
"privateuseone" devices only) is not reproduced.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from mizuoto.core.errors import InputError

from . import mel

SAMPLE_RATE = 16000
N_FFT = 1024
WIN_LENGTH = 1024
HOP_LENGTH = 160  # 10 ms at 16 kHz: one F0 value per hop
N_MELS = 128
F_MIN = 30
F_MAX = 8000
LOG_FLOOR = 1e-5  # upstream's clamp before the log


def librosa_htk_bank(sample_rate: int, n_fft: int, n_mels: int, f_min: float = 0.0,
                     f_max: float | None = None) -> np.ndarray:
    """librosa 0.11's `filters.mel(sr, n_fft, n_mels, fmin, fmax, htk=True)` (mizuoto/audio/mel.py's
    `librosa_bank`, bit for bit librosa's: the same numpy calls in the same order)."""
    return mel.librosa_bank(sample_rate, n_fft, n_mels, f_min, f_max, htk=True)


@lru_cache(maxsize=4)
def _bank(device: str) -> torch.Tensor:
    return torch.from_numpy(librosa_htk_bank(SAMPLE_RATE, N_FFT, N_MELS, F_MIN, F_MAX)).float().to(device)


@lru_cache(maxsize=4)
def _window(device: str) -> torch.Tensor:
    # upstream builds torch.hann_window (periodic) on the CPU and moves it
    return torch.hann_window(WIN_LENGTH).to(device)


def mel_bank(device: torch.device | str = "cpu") -> torch.Tensor:
    """The (128, 513) float32 filter bank RMVPE projects with (a fresh copy)."""
    return _bank(str(torch.device(device))).clone()


def frames_for(samples: int) -> int:
    """How many 10 ms frames `rmvpe_log_mel` gives for `samples` samples (a centred STFT)."""
    return 1 + samples // HOP_LENGTH


def rmvpe_log_mel(audio: torch.Tensor) -> torch.Tensor:
    """(batch, samples) float32 16 kHz audio -> log-mels (batch, 128, 1 + samples // 160) on its device.

    The reflect padding of a centred STFT needs more than n_fft / 2 = 512 samples; shorter audio (which
    upstream fails on inside torch) is an InputError."""
    if audio.dim() != 2 or not audio.is_floating_point():
        raise InputError(f"RMVPE's mel takes float audio of shape (batch, samples), got {audio.dtype} of shape "
                         f"{tuple(audio.shape)}")
    if audio.shape[-1] <= N_FFT // 2:
        raise InputError(f"the audio is too short for RMVPE: {audio.shape[-1]} samples, it needs at least "
                         f"{N_FFT // 2 + 1} at {SAMPLE_RATE} Hz")
    device = str(audio.device)
    spectrum = torch.stft(audio, n_fft=N_FFT, hop_length=HOP_LENGTH, win_length=WIN_LENGTH, window=_window(device),
                          center=True, return_complex=True)
    # re^2 + im^2 from the complex tensor's two views, as upstream sums them (not torch.abs)
    magnitude = torch.sqrt(spectrum.real.pow(2) + spectrum.imag.pow(2))
    mel = torch.matmul(_bank(device), magnitude)
    return torch.log(torch.clamp(mel, min=LOG_FLOOR))
