"""Mixing down to mono and band-limited resampling, in torch.

Whisper needs 16 kHz while ComfyUI's AUDIO and users' files come at any rate. openai-whisper resamples
with ffmpeg while it decodes a file, which no resampler in Python reproduces, so this is Mizuoto's own:
windowed-sinc interpolation with a Kaiser window; resampling to the same rate returns the input. Only
audio already at 16 kHz is bit-exact to upstream. Engines whose upstream resamples with a library use
that library's exact resampler instead (torchaudio_sinc.py, librosa_soxr.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from mizuoto.core.errors import InputError

SAMPLE_RATE = 16000


def to_mono(waveform) -> torch.Tensor:
    """Average the channels: (channels, samples) -> (samples,), (batch, channels, samples) -> (batch, samples).

    The channel axis is the second to last, as in our WAV reader and ComfyUI's AUDIO; a 1-D waveform
    is already mono and comes back as it is."""
    waveform = torch.as_tensor(waveform)
    if waveform.dim() <= 1:
        return waveform
    if not waveform.is_floating_point():
        waveform = waveform.to(torch.float32)
    return waveform.mean(dim=-2)


# Resampler design: a windowed-sinc low-pass (Kaiser window) evaluated exactly at every output
# position. 64 zero crossings each side and beta 14.77 give about 140 dB stop-band rejection. The
# cut-off (-6 dB at 0.93 of the lower Nyquist frequency) puts the stop band at that Nyquist frequency,
# so nothing aliases, and the pass band is flat (gain within 1e-6) up to 0.86 of it: measured from
# 48 kHz to 16 kHz, 0-6.9 kHz pass untouched, 7.2 kHz at 0.96, 7.6 kHz at 0.13, 7.8 kHz at 0.004 and
# 8.1 kHz (would alias) at 6e-8. ffmpeg's default (cut-off 0.97, shorter filter) keeps a little more of
# 7-8 kHz and lets a little alias in, so Whisper's top mel bands differ most for non-16 kHz input.
ZERO_CROSSINGS = 64
KAISER_BETA = 14.769656459379492
ROLLOFF = 0.93
_I0_BETA = float(torch.special.i0(torch.tensor(KAISER_BETA, dtype=torch.float64)))
_MAX_CONV_TABLE = 1 << 22  # strided-convolution tables larger than this (odd rate pairs) use the gather path


def resample(waveform, orig_rate: int, new_rate: int = SAMPLE_RATE) -> torch.Tensor:
    """Resample `waveform` (..., samples) from `orig_rate` to `new_rate` Hz along its last axis.

    Band-limited windowed-sinc interpolation (see ZERO_CROSSINGS, KAISER_BETA, ROLLOFF above); the
    signal is taken as zero outside its ends, so the first and last few milliseconds (the filter's half
    length: 4 ms from 44.1 kHz, 9 ms from 8 kHz) ring slightly. The output has
    round(samples * new_rate / orig_rate) samples (halves round up), in the input's float dtype
    (integers become float32), on its device. Equal rates return the waveform itself, not a copy.

    openai-whisper resamples with ffmpeg, so only 16 kHz input reproduces its spectrogram exactly.
    """
    orig_rate, new_rate = int(orig_rate), int(new_rate)
    if orig_rate <= 0 or new_rate <= 0:
        raise InputError(f"sample rates must be positive, got {orig_rate} and {new_rate}")
    waveform = torch.as_tensor(waveform)
    if waveform.dim() == 0:
        raise InputError("resample needs a waveform with a time axis, got a single number")
    if orig_rate == new_rate:
        return waveform
    if not waveform.is_floating_point():
        waveform = waveform.to(torch.float32)
    g = math.gcd(orig_rate, new_rate)
    up, down = new_rate // g, orig_rate // g  # output j sits at input position j * down / up
    shape = waveform.shape
    x = waveform.reshape(math.prod(shape[:-1]), shape[-1])
    n = x.shape[-1]
    n_out = (2 * n * up + down) // (2 * down)
    # The low-pass in input samples: cut-off in cycles per input sample, support +-half_width samples.
    cutoff = ROLLOFF * min(up, down) / (2 * down)
    half_width = ZERO_CROSSINGS / (2 * cutoff)
    width = math.ceil(half_width)
    if n_out == 0:
        y = x.new_zeros(x.shape[0], 0)
    elif up * (2 * width + down + 1) <= _MAX_CONV_TABLE:
        y = _resample_polyphase(x, up, down, n_out, cutoff, half_width, width)
    else:
        y = _resample_direct(x, up, down, n_out, cutoff, half_width, width)
    return y.reshape(*shape[:-1], n_out)


def _lowpass(offsets: torch.Tensor, cutoff: float, half_width: float) -> torch.Tensor:
    """Kaiser-windowed ideal low-pass taps at `offsets` (input samples, float64) from the output point."""
    taps = 2 * cutoff * torch.sinc(2 * cutoff * offsets)
    r = offsets / half_width
    window = torch.special.i0(KAISER_BETA * torch.sqrt((1 - r * r).clamp(min=0))) / _I0_BETA
    return torch.where(r.abs() <= 1, taps * window, torch.zeros_like(taps))


def _resample_polyphase(x, up, down, n_out, cutoff, half_width, width):
    # Output j = q * up + p sits at input q * down + p * down / up: one filter per phase p, applied
    # with stride `down` by a convolution whose `up` output channels are the phases.
    phase = torch.arange(up, dtype=torch.float64)[:, None] * down / up
    k = torch.arange(-width, width + down + 1, dtype=torch.float64)[None, :]
    kernel = _lowpass(k - phase, cutoff, half_width).to(x.device, x.dtype)[:, None, :]  # (up, 1, taps)
    blocks = -(-n_out // up)
    n = x.shape[-1]
    right = max(0, (blocks - 1) * down + kernel.shape[-1] - (n + width))
    padded = F.pad(x[:, None, :], (width, right))
    y = F.conv1d(padded, kernel, stride=down)[..., :blocks]  # (batch, up, blocks)
    return y.transpose(1, 2).reshape(x.shape[0], -1)[:, :n_out]


def _resample_direct(x, up, down, n_out, cutoff, half_width, width, chunk=4096):
    # The same filter as a gather: output j reads the 2 * width + 1 input samples around floor(j * down / up)
    # with the taps of its phase j % up. For rate pairs whose strided-convolution table would be huge.
    taps = torch.arange(-width, width + 1)
    phases = torch.arange(min(up, n_out))
    frac = (phases * down % up).to(torch.float64) / up
    table = _lowpass(taps[None, :] - frac[:, None], cutoff, half_width).to(x.device, x.dtype)
    padded = F.pad(x, (width, width + 1))
    out = x.new_empty(x.shape[0], n_out)
    for start in range(0, n_out, chunk):
        j = torch.arange(start, min(start + chunk, n_out))
        index = (j * down // up)[:, None] + taps[None, :] + width  # floor of the position, exact
        out[:, start:start + j.numel()] = (padded[:, index.to(x.device)] * table[(j % up).to(x.device)]).sum(-1)
    return out
