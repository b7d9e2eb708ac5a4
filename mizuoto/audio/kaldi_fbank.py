"""Kaldi log mel filterbank features, bit for bit as torchaudio 2.11.1's `compliance.kaldi.fbank` computes them.

CAM++ speaker embeddings (Seed-VC, IndexTTS 2, CosyVoice) are taken from these features:
`fbank(wave_16k, num_mel_bins=80, dither=0, sample_frequency=16000)`, then every bin's mean over time is
subtracted (`campplus_features`). torchaudio's function is pure torch, so this module reproduces its float
operations in their order and dtypes, without importing torchaudio (its compiled libraries often do not
load beside the host's torch, and a node pack must not depend on it).

Data flow for one mono waveform of n samples (defaults: 25 ms frames every 10 ms, "snip edges": only frames
that fit whole):
    frames (m, window) as a strided view
    -> minus each frame's mean (DC offset)
    -> [log energy of each frame, only when use_energy]
    -> pre-emphasis x[j] - 0.97 x[j-1] (x[-1] := x[0])
    -> times the window (Povey: a symmetric Hann window to the power 0.85)
    -> zero-padded to the next power of two
    -> |rfft|^2 -> @ triangular mel filters (mel = 1127 ln(1 + f / 700)) -> log, floored at float32 epsilon.
Dithering draws noise from the global generator upstream; it is refused here (Seed-VC passes dither=0).
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
import torch.nn.functional as F

from mizuoto.core.errors import InputError

# Kaldi floors powers at std::numeric_limits<float>::epsilon(), as a float32 value whatever the audio's dtype.
FLOAT_EPSILON = torch.finfo(torch.float32).eps
WINDOW_TYPES = ("hamming", "hanning", "povey", "rectangular", "blackman")


def frame_sizes(sample_frequency: float, frame_length_ms: float, frame_shift_ms: float,
                round_to_power_of_two: bool = True) -> tuple[int, int, int]:
    """(window, shift, fft size) in samples. The products are formed in torchaudio's order (rate * ms * 0.001)
    and truncated, as it does: 16 kHz * 25 ms is 400.00000000000006 samples, which int() makes 400."""
    window = int(sample_frequency * frame_length_ms * 0.001)
    shift = int(sample_frequency * frame_shift_ms * 0.001)
    fft_size = 1 << (window - 1).bit_length() if round_to_power_of_two and window > 0 else window
    return window, shift, fft_size


def window_function(window_type: str, size: int, blackman_coeff: float, dtype: torch.dtype,
                    device=None) -> torch.Tensor:
    """The (size,) analysis window. Every variant is the symmetric (non-periodic) one, as Kaldi's."""
    if window_type == "hanning":
        return torch.hann_window(size, periodic=False, dtype=dtype, device=device)
    if window_type == "povey":  # a Hann window that reaches zero more gently at its ends
        return torch.hann_window(size, periodic=False, dtype=dtype, device=device).pow(0.85)
    if window_type == "hamming":
        return torch.hamming_window(size, periodic=False, alpha=0.54, beta=0.46, dtype=dtype, device=device)
    if window_type == "rectangular":
        return torch.ones(size, dtype=dtype, device=device)
    if window_type == "blackman":
        # Kaldi's generalised Blackman window (torch.blackman_window fixes the coefficient at 0.42)
        step = 2 * math.pi / (size - 1)
        n = torch.arange(size, dtype=dtype, device=device)
        return blackman_coeff - 0.5 * torch.cos(step * n) + (0.5 - blackman_coeff) * torch.cos(2 * step * n)
    raise InputError(f"unknown window type {window_type!r}; use one of {', '.join(WINDOW_TYPES)}")


def mel(freq):
    """Hz -> mel on Kaldi's scale (natural log, 1127)."""
    if isinstance(freq, torch.Tensor):
        return 1127.0 * (1.0 + freq / 700.0).log()
    return 1127.0 * math.log(1.0 + freq / 700.0)


@lru_cache(maxsize=16)
def mel_filters(num_bins: int, fft_size: int, sample_frequency: float, low_freq: float,
                high_freq: float) -> torch.Tensor:
    """The (num_bins, fft_size // 2 + 1) float32 triangular filters, equally spaced on the mel scale between
    low_freq and high_freq (<= 0: that far below Nyquist). Each weight is min(rising, falling) edge, clamped
    at zero, evaluated at the FFT bin's own mel value (Kaldi interpolates in mel, not in Hz). The Nyquist
    bin gets no weight. Shared between calls: never modified in place."""
    nyquist = 0.5 * sample_frequency
    if high_freq <= 0.0:
        high_freq += nyquist
    if num_bins <= 3:
        raise InputError(f"num_mel_bins is {num_bins}; Kaldi's filterbank needs at least 4 bins")
    if not (0.0 <= low_freq < nyquist and 0.0 < high_freq <= nyquist and low_freq < high_freq):
        raise InputError(f"mel band {low_freq}..{high_freq} Hz does not fit 0..{nyquist} Hz (the Nyquist frequency "
                         f"of {sample_frequency} Hz); change low_freq / high_freq")
    mel_low, mel_high = mel(low_freq), mel(high_freq)
    spacing = (mel_high - mel_low) / (num_bins + 1)  # num_bins + 1 gaps: the outer triangles reach the edges
    index = torch.arange(num_bins, dtype=torch.float32).unsqueeze(1)
    left = mel_low + index * spacing
    centre = mel_low + (index + 1.0) * spacing
    right = mel_low + (index + 2.0) * spacing
    bin_mel = mel((sample_frequency / fft_size) * torch.arange(fft_size // 2, dtype=torch.float32)).unsqueeze(0)
    rising = (bin_mel - left) / (centre - left)
    falling = (right - bin_mel) / (right - centre)
    filters = torch.maximum(torch.zeros(1), torch.minimum(rising, falling))
    return F.pad(filters, (0, 1))  # the Nyquist column


def _mono(waveform: torch.Tensor) -> torch.Tensor:
    if not isinstance(waveform, torch.Tensor) or not waveform.is_floating_point():
        raise InputError("fbank takes a floating-point waveform tensor of shape (1, samples) or (samples,)")
    if waveform.dim() == 2 and waveform.shape[0] == 1:
        return waveform[0]
    if waveform.dim() == 1:
        return waveform
    raise InputError(f"fbank takes one mono waveform, (1, samples) or (samples,); got shape "
                     f"{tuple(waveform.shape)}: mix the channels down or pass one of them")


def fbank(waveform: torch.Tensor, *, num_mel_bins: int = 23, sample_frequency: float = 16000.0,
          frame_length: float = 25.0, frame_shift: float = 10.0, dither: float = 0.0, window_type: str = "povey",
          blackman_coeff: float = 0.42, preemphasis_coefficient: float = 0.97, remove_dc_offset: bool = True,
          round_to_power_of_two: bool = True, low_freq: float = 20.0, high_freq: float = 0.0,
          use_energy: bool = False, energy_floor: float = 1.0) -> torch.Tensor:
    """(frames, num_mel_bins [+ 1 with use_energy]) log mel energies of a mono `waveform`, as
    torchaudio.compliance.kaldi.fbank with the same arguments (its defaults too; snip_edges, raw_energy,
    use_power and use_log_fbank on; no VTLN). With use_energy the frame's log energy (before pre-emphasis
    and windowing, floored at log(energy_floor) unless that is 0) is the first column."""
    if dither != 0.0:
        raise InputError("fbank with dither > 0 draws noise from the global generator; pass dither=0 "
                         "(as Seed-VC, IndexTTS 2 and CosyVoice do)")
    if window_type not in WINDOW_TYPES:
        raise InputError(f"unknown window type {window_type!r}; use one of {', '.join(WINDOW_TYPES)}")
    if not 0.0 <= preemphasis_coefficient <= 1.0:
        raise InputError(f"preemphasis_coefficient is {preemphasis_coefficient}; it must be within [0, 1]")
    if not sample_frequency > 0:
        raise InputError(f"sample_frequency is {sample_frequency}; it must be positive")
    wave = _mono(waveform)
    window, shift, fft_size = frame_sizes(sample_frequency, frame_length, frame_shift, round_to_power_of_two)
    if shift <= 0:
        raise InputError(f"frame_shift {frame_shift} ms is under one sample at {sample_frequency} Hz")
    if fft_size % 2:
        raise InputError(f"a {frame_length} ms frame is {window} samples: an FFT needs an even size; use "
                         f"round_to_power_of_two or another frame_length")
    if not 2 <= window <= wave.shape[0]:
        raise InputError(f"the audio has {wave.shape[0]} samples, fewer than one {frame_length} ms frame "
                         f"({window} samples at {sample_frequency} Hz); give a longer clip")
    dtype, device = wave.dtype, wave.device
    epsilon = torch.tensor(FLOAT_EPSILON, dtype=torch.float32).to(device=device, dtype=dtype)

    frames = wave.unfold(0, window, shift)  # (m, window), a view: frame i starts at sample i * shift
    if remove_dc_offset:
        frames = frames - torch.mean(frames, dim=1).unsqueeze(1)
    if use_energy:  # "raw" energy: after the DC offset, before pre-emphasis and the window
        log_energy = torch.maximum(frames.pow(2).sum(1), epsilon).log()
        if energy_floor != 0.0:
            log_energy = torch.maximum(log_energy, torch.tensor(math.log(energy_floor), dtype=dtype, device=device))
    if preemphasis_coefficient != 0.0:
        previous = torch.cat((frames[:, :1], frames[:, :-1]), dim=1)  # the first sample is its own predecessor
        frames = frames - preemphasis_coefficient * previous
    frames = frames * window_function(window_type, window, blackman_coeff, dtype, device).unsqueeze(0)
    if fft_size != window:
        frames = F.pad(frames, (0, fft_size - window))

    power = torch.fft.rfft(frames).abs().pow(2.0)  # (m, fft_size // 2 + 1)
    filters = mel_filters(num_mel_bins, fft_size, float(sample_frequency), float(low_freq), float(high_freq))
    # the filters are made on the CPU in float32 (as torchaudio does, whatever the audio's device and dtype);
    # the transposed view, not a contiguous copy: the matrix product's rounding depends on the layout
    energies = torch.mm(power, filters.to(device=device, dtype=dtype).T)
    features = torch.maximum(energies, epsilon).log()
    if use_energy:
        features = torch.cat((log_energy.unsqueeze(1), features), dim=1)
    return features


def campplus_features(wave_16k: torch.Tensor) -> torch.Tensor:
    """The (frames, 80) input of CAM++ for a 16 kHz mono waveform, as Seed-VC, IndexTTS 2 and CosyVoice make it:
    80-bin Kaldi fbank without dither, each bin's mean over the clip subtracted."""
    features = fbank(wave_16k, num_mel_bins=80, dither=0.0, sample_frequency=16000)
    return features - features.mean(dim=0, keepdim=True)
