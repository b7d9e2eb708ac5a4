"""resampy's "kaiser_best" band-limited interpolation as GPT-SoVITS v5 computes it in torch
(`TTS_infer_pack/TTS.py::resample(match_librosa=True)` on the cuda_graph_accel_v5 branch at ac846f5, MIT), sample for
sample.

Upstream names it match_librosa: older librosa resampled with resampy's kaiser_best. Its reference prompt is loaded
this way at 16 kHz (load_audio_gpu), where 48b1a01 used librosa.load (soxr, librosa_soxr.py).

Each output sample n_out / ratio sits between input samples n and n + 1; the left wing sums x[n - i] over the taps
i whose table position offset + i * step stays inside the half window, the right wing x[n + 1 + i] likewise from
the other side; each tap's weight is the table's value plus the fractional position times the next difference
(linear interpolation within the table, computed in float32 as upstream: torch.diff of the float32 table). For
ratio < 1 (downsampling) the window is scaled by the ratio and stepped by ratio * 8192 (the anti-aliasing stretch).
The output has int(samples * ratio) samples; upstream evaluates it in chunks of 4096 outputs, and so does this (the
sums are per output sample, so chunking changes no bits, but keeps the tap matrices small).

The table (assets/resampy_kaiser_best.xz, written by scripts/resampy_kaiser_table.py from resampy 0.4.3, ISC,
Copyright (c) 2016 Brian McFee) is resampy's stored half window in float32: 50 zero crossings at 8192 values each,
rolloff 0.917.
"""

from __future__ import annotations

import hashlib
import lzma
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from mizuoto.core.errors import InputError

TABLE = Path(__file__).resolve().parent / "assets" / "resampy_kaiser_best.xz"
TABLE_SHA256 = "096d7b5d3a0b91f8ef4df04b6609bed24183cd0b0d6e29ae2bbac1ee7da80a89"  # of the float32 values
PRECISION = 8192  # table values per zero crossing (resampy's precision 2**13)
CHUNK = 4096  # outputs per evaluation, upstream's


@lru_cache(maxsize=1)
def _table() -> torch.Tensor:
    deltas = np.frombuffer(lzma.decompress(TABLE.read_bytes()), dtype="<i4")
    table = np.cumsum(deltas, dtype=np.int64).astype(np.uint32).view(np.float32)
    if hashlib.sha256(table.tobytes()).hexdigest() != TABLE_SHA256:
        raise RuntimeError(f"{TABLE} is damaged; reinstall mizuoto")
    return torch.from_numpy(table.copy())


@lru_cache(maxsize=8)
def _filter(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The window and its forward differences (the last 0) on `device`, as _resampy_gpu_filter builds them."""
    window = _table().to(device)
    return window, torch.diff(window, append=window[-1:])


def resample(audio: torch.Tensor, orig_freq: int, new_freq: int) -> torch.Tensor:
    """`audio` (channels, samples) from `orig_freq` to `new_freq` Hz -> (channels, int(samples * ratio)); equal
    rates give a copy."""
    if audio.dim() != 2:
        raise InputError(f"resampling takes (channels, samples) audio, got shape {tuple(audio.shape)}")
    if orig_freq <= 0 or new_freq <= 0:
        raise InputError(f"sample rates must be positive, got {orig_freq} and {new_freq}")
    if int(orig_freq) == int(new_freq):
        return audio.clone()
    device, dtype = audio.device, audio.dtype
    ratio = float(new_freq) / float(orig_freq)
    scale = min(1.0, ratio)
    n_orig = audio.shape[-1]
    n_out = int(n_orig * ratio)
    window, delta = _filter(device)
    if ratio < 1.0:
        window, delta = window * ratio, delta * ratio
    step = int(scale * PRECISION)
    nwin = window.numel()
    t_all = torch.arange(n_out, device=device, dtype=torch.float32) / ratio
    out = torch.zeros((audio.shape[0], n_out), device=device, dtype=dtype)
    taps = torch.arange((nwin + step - 1) // step, device=device).view(1, -1)
    for begin in range(0, n_out, CHUNK):
        t = t_all[begin:begin + CHUNK]
        n = torch.floor(t).long()
        frac = scale * (t - n.to(t.dtype))
        left = _wing(window, delta, frac, n + 1, taps, step, nwin).to(dtype)
        right = _wing(window, delta, scale - frac, n_orig - n - 1, taps, step, nwin).to(dtype)
        left_at = (n.view(-1, 1) - taps).clamp(0, n_orig - 1)
        right_at = (n.view(-1, 1) + taps + 1).clamp(0, n_orig - 1)
        out[:, begin:begin + t.numel()] = ((audio[:, left_at] * left.unsqueeze(0)).sum(-1)
                                           + (audio[:, right_at] * right.unsqueeze(0)).sum(-1))
    return out


def _wing(window, delta, frac, available, taps, step: int, nwin: int) -> torch.Tensor:
    """One side's tap weights (outputs, taps): the table at frac * PRECISION + i * step, interpolated, zero past
    the window's end or past the `available` input samples on that side."""
    position = frac * PRECISION
    offset = torch.floor(position).long()
    eta = position - offset.to(position.dtype)
    index = (offset.view(-1, 1) + taps * step).clamp(0, nwin - 1)
    inside = taps < torch.minimum(available, (nwin - offset) // step).view(-1, 1)
    return (window[index] + eta.view(-1, 1) * delta[index]) * inside
