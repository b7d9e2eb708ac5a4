"""Wav2Vec2FeatureExtractor's zero-mean unit-variance normalisation with numpy 1's arithmetic, which is seed-vc
0.4.3's (it requires numpy < 2), computed the same way under any numpy.

transformers 4.57.3 normalises an utterance as `(x - x.mean()) / np.sqrt(x.var() + 1e-7)` on float32 arrays
(mizuoto/audio/wav2vec2_features.py computes that expression with the installed numpy). Its last bits depend on
numpy's version, and numpy 2 differs from numpy 1 twice:
- float32 sums: numpy 1.26 reduces a contiguous array in buffers of 8192 elements, each summed pairwise
  (`FLOAT_pairwise_sum`: blocks of at most 128 summed in 8 interleaved accumulators, longer runs split in halves
  rounded down to a multiple of 8), the buffers' sums added in order onto 0; numpy 2's SIMD reductions add in
  another order;
- promotion: numpy 1 divides a float32 scalar by the element count in float64 (mean, the variance's last step)
  and adds `1e-7` to the float32 variance in float64 (the square root too), the quotient's divisor then rounded
  to float32; numpy 2 keeps float32 throughout.
Everything here is float32 numpy arithmetic in that order (elementwise float32 operations are IEEE and the same
in every numpy), checked bit for bit against numpy 1.26.4 by tests/engines/test_seedvc_realtime.py.
"""

from __future__ import annotations

import numpy as np

BUFFER = 8192  # numpy 1's reduction buffer (NPY_BUFSIZE)
BLOCK = 128  # PW_BLOCKSIZE
F32 = np.float32


def _pairwise(a: np.ndarray) -> np.float32:
    n = a.shape[0]
    if n < 8:
        total = F32(0.0)
        for value in a:
            total = F32(total + value)
        return total
    if n <= BLOCK:
        whole = n - n % 8
        lanes = a[0:8].copy()
        for start in range(8, whole, 8):
            lanes = lanes + a[start:start + 8]
        total = F32(F32(F32(lanes[0] + lanes[1]) + F32(lanes[2] + lanes[3]))
                    + F32(F32(lanes[4] + lanes[5]) + F32(lanes[6] + lanes[7])))
        for value in a[whole:]:
            total = F32(total + value)
        return total
    half = n // 2
    half -= half % 8
    return F32(_pairwise(a[:half]) + _pairwise(a[half:]))


def float32_sum(a: np.ndarray) -> np.float32:
    """numpy 1.26's `a.sum()` of a contiguous 1-D float32 array."""
    total = F32(0.0)
    for start in range(0, a.shape[0], BUFFER):
        total = F32(total + _pairwise(a[start:start + BUFFER]))
    return total


def zero_mean_unit_var(row: np.ndarray) -> np.ndarray:
    """`(row - row.mean()) / np.sqrt(row.var() + 1e-7)` of a float32 row as numpy 1.26 computes it."""
    row = np.ascontiguousarray(row, dtype=np.float32)
    n = row.shape[0]
    mean = F32(np.float64(float32_sum(row)) / n)  # np.mean: the float32 sum over n, in float64
    centred = row - F32(float32_sum(row) / F32(n))  # np.var's mean: a 1-element array, divided in float32
    variance = F32(np.float64(float32_sum(centred * centred)) / n)
    deviation = F32(np.sqrt(np.float64(variance) + 1e-7))
    return (row - mean) / deviation
