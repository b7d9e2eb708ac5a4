"""torchaudio's default resampler (`sinc_interp_hann`, width 6, rolloff 0.99), reproduced bit for bit.

Engines whose upstream resamples with torchaudio (F5-TTS's `torchaudio.transforms.Resample`, VoxCPM 1's
`torchaudio.functional.resample`) use this one; `librosa_soxr.py` is librosa's (soxr), and `resample.py`
Mizuoto's own Kaiser-window resampler for Whisper, whose upstream resamples with ffmpeg while decoding.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
import torch.nn.functional as F

from mizuoto.core.errors import InputError

# torchaudio's resampling defaults (sinc_interp_hann).
LOWPASS_FILTER_WIDTH = 6
ROLLOFF = 0.99


@lru_cache(maxsize=32)
def _sinc_kernel(orig: int, new: int, compute_dtype: torch.dtype, phase_dtype: torch.dtype,
                 out_dtype: torch.dtype) -> tuple[torch.Tensor, int]:
    """The (new, 1, taps) polyphase filter bank of torchaudio's sinc_interp_hann resampler, on the CPU,
    for rates already divided by their gcd; and its half width in input samples.

    Row j holds the taps for output phase j, i.e. for the input position j * orig / new: a
    Hann-windowed sinc low-pass at `ROLLOFF` of the lower Nyquist frequency, `LOWPASS_FILTER_WIDTH` zero
    crossings each side. The operations and their dtypes are torchaudio 2.11's (the last bits of every
    tap depend on them): the phase offsets j / new are computed in `phase_dtype` and only then added to
    the tap positions in `compute_dtype`. Shared between callers: never modified in place.
    """
    cutoff = min(orig, new) * ROLLOFF  # in units of the reduced rates
    width = math.ceil(LOWPASS_FILTER_WIDTH * orig / cutoff)
    positions = torch.arange(-width, width + orig, dtype=compute_dtype)[None, None] / orig
    phases = torch.arange(0, -new, -1, dtype=phase_dtype)[:, None, None] / new
    t = (phases + positions) * cutoff
    t = t.clamp(-LOWPASS_FILTER_WIDTH, LOWPASS_FILTER_WIDTH)
    window = torch.cos(t * math.pi / LOWPASS_FILTER_WIDTH / 2) ** 2
    t = t * math.pi
    sinc = torch.where(t == 0, torch.tensor(1.0).to(t), t.sin() / t)
    kernel = sinc * (window * (cutoff / orig))
    return kernel.to(out_dtype), width


def resample(wave: torch.Tensor, orig_freq: int, new_freq: int, *, transform_kernel: bool = True) -> torch.Tensor:
    """`wave` (..., samples) resampled from `orig_freq` to `new_freq` Hz along its last axis, bit for bit
    as torchaudio 2.11 does it with its defaults (sinc_interp_hann, width 6, rolloff 0.99).

    `transform_kernel=True` reproduces `torchaudio.transforms.Resample(orig_freq, new_freq)` (what
    F5-TTS uses): the filter is built in float64 (phase offsets in float32, torch's default dtype) and kept
    in float32, whatever the waveform's dtype; a float64 waveform is filtered with that float32 filter
    widened (torchaudio would refuse the dtype mix). `False` reproduces `torchaudio.functional.resample`,
    which builds the filter in the waveform's own dtype, so float32 input gives slightly different taps.

    Equal rates return `wave` itself. The output has ceil(samples * new / orig) samples, that ceiling
    taken in float32 like torchaudio's (so it can come out one short for very long inputs); the signal
    counts as zero beyond both ends. Runs on `wave`'s device; only the CPU result is exact to upstream.
    """
    orig_freq, new_freq = int(orig_freq), int(new_freq)
    if orig_freq <= 0 or new_freq <= 0:
        raise InputError(f"sample rates must be positive, got {orig_freq} and {new_freq}")
    if not torch.is_floating_point(wave):
        raise InputError(f"resample needs a floating-point waveform, got {wave.dtype}")
    if orig_freq == new_freq:
        return wave
    gcd = math.gcd(orig_freq, new_freq)
    orig, new = orig_freq // gcd, new_freq // gcd
    if transform_kernel:
        kernel, width = _sinc_kernel(orig, new, torch.float64, torch.float32, torch.float32)
    else:
        kernel, width = _sinc_kernel(orig, new, wave.dtype, wave.dtype, wave.dtype)
    kernel = kernel.to(device=wave.device, dtype=wave.dtype)

    shape = wave.shape
    rows = wave.reshape(-1, shape[-1])
    length = rows.shape[-1]
    # Each output block of `new` samples comes from one stride-`orig` step: output channel j of the
    # convolution is phase j, so transposing and flattening interleaves the phases into time order.
    padded = F.pad(rows, (width, width + orig))
    blocks = F.conv1d(padded[:, None], kernel, stride=orig)
    out = blocks.transpose(1, 2).reshape(rows.shape[0], -1)
    n_out = int(torch.tensor(new * length / orig, dtype=torch.float32).ceil())
    out = out[..., :n_out]
    return out.reshape(shape[:-1] + out.shape[-1:])
