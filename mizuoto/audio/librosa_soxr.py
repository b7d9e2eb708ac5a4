"""librosa's default resampler, `librosa.resample(res_type="soxr_hq")`, sample for sample.

Engines whose upstream resamples with librosa (VoxCPM2's prompt and reference through `librosa.load(sr=...)`,
Qwen3-TTS's reference before its tokenizer and speaker encoder) use this one. librosa 0.11 hands each 1-D
row to `soxr.resample(row, orig, new, quality="soxr_hq")` in the row's own dtype, then pads with zeros or
cuts to ceil(samples * (new / orig)) samples (the ratio a float64), and returns the input's dtype; equal
rates return the input itself. The same calls here give the same samples: soxr's HQ quality runs its
single-precision engine, whose SIMD path is SSE, present on every x86-64 CPU, so the result does not depend
on which x86-64 machine runs it.
"""

from __future__ import annotations

import math

import torch

from mizuoto.core.errors import InputError

QUALITY = "soxr_hq"  # librosa's default res_type, and soxr's own default quality


def output_length(samples: int, orig_rate: int, new_rate: int) -> int:
    """librosa.resample's output length: ceil(samples * (new / orig)), the ratio in float64."""
    return int(math.ceil(samples * (float(new_rate) / orig_rate)))


def _soxr():
    try:
        import soxr
    except ImportError as exc:
        raise InputError(f"resampling this engine's audio needs the soxr package ({exc}); "
                         f"install it with: pip install soxr") from None
    return soxr


class Stream:
    """Mono float32 audio resampled chunk by chunk as one signal (soxr's streaming resampler, HQ): the chunks'
    outputs joined do not depend on where the input was cut. For live input at a rate other than a model's,
    as a sound system resamples a device; not librosa's whole-clip result (its edges differ)."""

    def __init__(self, orig_rate: int, new_rate: int):
        self.orig_rate, self.new_rate = int(orig_rate), int(new_rate)
        self._stream = _soxr().ResampleStream(self.orig_rate, self.new_rate, 1, dtype="float32", quality="HQ")

    def __call__(self, wave: torch.Tensor, last: bool = False) -> torch.Tensor:
        """The next chunk (samples,) -> what the resampler gives out for it; `last` flushes its delay line."""
        chunk = torch.as_tensor(wave).to(torch.float32).reshape(-1).cpu().numpy()
        return torch.from_numpy(self._stream.resample_chunk(chunk, last=last).copy())


def resample(wave, orig_rate: int, new_rate: int) -> torch.Tensor:
    """`wave` (..., samples), float32 or float64, resampled from `orig_rate` to `new_rate` Hz along its last
    axis exactly as librosa.resample(res_type="soxr_hq") resamples it; on the CPU, in the input's dtype."""
    import numpy

    soxr = _soxr()
    wave = torch.as_tensor(wave)
    orig_rate, new_rate = int(orig_rate), int(new_rate)
    if orig_rate <= 0 or new_rate <= 0:
        raise InputError(f"sample rates must be positive, got {orig_rate} and {new_rate}")
    if wave.dtype not in (torch.float32, torch.float64):
        raise InputError(f"resample needs float32 or float64 audio, got {wave.dtype}")
    if wave.dim() == 0:
        raise InputError("resample needs a waveform with a time axis, got a single number")
    if orig_rate == new_rate:
        return wave
    device = wave.device
    rows = wave.detach().cpu().reshape(-1, wave.shape[-1]).numpy()
    length = output_length(rows.shape[-1], orig_rate, new_rate)
    out = numpy.zeros((rows.shape[0], length), dtype=rows.dtype)
    for i, row in enumerate(rows):
        y = soxr.resample(numpy.ascontiguousarray(row), orig_rate, new_rate, quality=QUALITY)
        out[i, :min(length, y.shape[-1])] = y[:length]  # librosa's fix_length: zero-pad or cut
    return torch.from_numpy(out).reshape(*wave.shape[:-1], length).to(device)
