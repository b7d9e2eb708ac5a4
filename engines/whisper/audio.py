"""Whisper's audio front end: 16 kHz mono audio -> the log-mel spectrogram the encoder reads.

`log_mel_spectrogram`, `mel_filters` and `pad_or_trim` compute what openai-whisper 20250625's
`whisper/audio.py` computes, operation for operation, so on the same device and thread count the
spectrogram is bit for bit upstream's. The mel filter bank is upstream's own data file
(`assets/mel_filters.npz`, see assets/README.md). No file decoding: audio reaches the engine as a
tensor (ComfyUI AUDIO, or a file read with soundfile: mizuoto.audio.files), so ffmpeg is not needed.

openai-whisper decodes a file with ffmpeg into 16 kHz 16-bit mono; Mizuoto resamples with `resample`
below (windowed sinc, Kaiser window: no Python library reproduces ffmpeg's resampler). Audio that is
already 16 kHz 16-bit mono gives upstream's exact input; other rates give a spectrogram that differs
from upstream's in the last bits (two good resamplers differ).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from mizuoto.core.errors import InputError

SAMPLE_RATE = 16000
N_FFT = 400  # 25 ms window
HOP_LENGTH = 160  # 10 ms hop
CHUNK_LENGTH = 30  # seconds of audio per encoder window
N_SAMPLES = CHUNK_LENGTH * SAMPLE_RATE  # 480000
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3000 mel frames per window
N_SAMPLES_PER_TOKEN = 2 * HOP_LENGTH  # the encoder's second convolution has stride 2
FRAMES_PER_SECOND = SAMPLE_RATE // HOP_LENGTH  # 100: 10 ms per frame
TOKENS_PER_SECOND = SAMPLE_RATE // N_SAMPLES_PER_TOKEN  # 50: 20 ms per encoder position
assert N_SAMPLES % HOP_LENGTH == 0 and SAMPLE_RATE % N_SAMPLES_PER_TOKEN == 0

N_MELS = (80, 128)  # 128 for large-v3 and turbo, 80 for the others
MEL_FILTERS_PATH = Path(__file__).resolve().parent / "assets" / "mel_filters.npz"


@lru_cache(maxsize=None)
def mel_filters(device, n_mels: int = 80) -> torch.Tensor:
    """The (n_mels, N_FFT // 2 + 1) float32 mel filter bank on `device`, loaded once per device.

    The matrix is librosa's Slaney mel bank for 16 kHz and a 400-point FFT, as openai-whisper ships it.
    The tensor is shared between callers: do not modify it in place."""
    if n_mels not in N_MELS:
        raise InputError(f"Whisper has mel filter banks for n_mels 80 and 128, not {n_mels}")
    with np.load(MEL_FILTERS_PATH, allow_pickle=False) as data:
        bank = data[f"mel_{n_mels}"]
    return torch.from_numpy(bank).to(device)


@lru_cache(maxsize=None)
def _hann_window(device) -> torch.Tensor:
    # Built on the CPU and then moved, as upstream does, so every device gets the same values.
    return torch.hann_window(N_FFT).to(device)


def _as_float32_tensor(audio) -> torch.Tensor:
    if isinstance(audio, (str, Path)):
        raise InputError("Whisper's log_mel_spectrogram takes a 16 kHz waveform, not a file path; "
                         "read the file first (mizuoto.audio.files.read) and resample it to 16 kHz")
    if not torch.is_tensor(audio):
        audio = torch.from_numpy(np.ascontiguousarray(audio))
    if audio.dtype != torch.float32:
        # Upstream expects float32 (float64 fails in its filters @ magnitudes); converting is exact
        # for float16/bfloat16 and rounds float64 once.
        audio = audio.to(torch.float32)
    return audio


def log_mel_spectrogram(audio, n_mels: int = 80, padding: int = 0, device=None) -> torch.Tensor:
    """The log-mel spectrogram of 16 kHz mono `audio` -> (n_mels, n_frames), or (batch, n_mels, n_frames).

    audio: float waveform, shape (samples,) or (batch, samples), a tensor or a numpy array, at 16 kHz.
    padding: zero samples appended on the right first (transcribe passes N_SAMPLES).
    device: where to compute; by default the audio's own device.

    n_frames = (samples + padding) // HOP_LENGTH. Steps, as upstream: centred STFT (reflect padding,
    periodic Hann window), the last frame dropped, power, mel projection, log10 of max(x, 1e-10), a
    floor at the maximum minus 8 (the maximum of the whole input, batch included), then (x + 4) / 4.
    """
    audio = _as_float32_tensor(audio)
    if device is not None:
        audio = audio.to(device)
    if padding > 0:
        audio = F.pad(audio, (0, padding))
    spectrum = torch.stft(audio, N_FFT, HOP_LENGTH, window=_hann_window(audio.device), return_complex=True)
    power = spectrum[..., :-1].abs() ** 2
    mel = mel_filters(audio.device, n_mels) @ power
    log_mel = torch.clamp(mel, min=1e-10).log10()
    log_mel = torch.maximum(log_mel, log_mel.max() - 8.0)
    return (log_mel + 4.0) / 4.0


def pad_or_trim(array, length: int = N_SAMPLES, *, axis: int = -1):
    """Cut `array` to `length` along `axis`, or pad it there with zeros on the right; a tensor or a
    numpy array, returned as the same kind and dtype (a new array, never a view of the input)."""
    size = array.shape[axis]
    if torch.is_tensor(array):
        if size > length:
            array = array.narrow(axis, 0, length).clone()
        elif size < length:
            axis = axis % array.dim()
            pads = [0, 0] * (array.dim() - 1 - axis) + [0, length - size]  # F.pad counts from the last axis
            array = F.pad(array, pads)
        return array
    array = np.asarray(array)
    if size > length:
        array = np.take(array, np.arange(length), axis=axis)
    elif size < length:
        widths = [(0, 0)] * array.ndim
        widths[axis] = (0, length - size)
        array = np.pad(array, widths)
    return array


# Mixing down and resampling are shared with every engine: mizuoto/audio/resample.py.
from mizuoto.audio.resample import resample, to_mono  # noqa: E402,F401
