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

import functools

import numpy as np

BUFFER = 8192  # numpy 1's reduction buffer (NPY_BUFSIZE)
BLOCK = 128  # PW_BLOCKSIZE
F32 = np.float32


def _tree(n: int, start: int = 0):
    """numpy 1's pairwise tree over n elements: a leaf (start, length) where it sums directly, else the pair of
    its halves' trees (the first half rounded down to a multiple of 8)."""
    if n <= BLOCK:
        return (start, n)
    half = n // 2
    half -= half % 8
    return [_tree(half, start), _tree(n - half, start + half)]


def _leaves(tree) -> list:
    return [tree] if isinstance(tree, tuple) else _leaves(tree[0]) + _leaves(tree[1])


@functools.lru_cache(maxsize=64)
def _plan(n: int):
    """For n elements: the tree, its leaves in order, and index arrays gathering each leaf's 8-lane rows (up to
    16, padded with the index of an appended zero) and its tail (up to 7, padded likewise)."""
    tree = _tree(n)
    leaves = _leaves(tree)
    rows = np.full((len(leaves), BLOCK // 8, 8), n, dtype=np.int64)
    tails = np.full((len(leaves), 7), n, dtype=np.int64)
    for i, (start, length) in enumerate(leaves):
        whole = length - length % 8 if length >= 8 else 0
        rows[i, : whole // 8] = (start + np.arange(whole)).reshape(-1, 8)
        tails[i, : length - whole] = start + whole + np.arange(length - whole)
    return tree, leaves, rows, tails


def _combine(tree, totals: dict) -> np.float32:
    if isinstance(tree, tuple):
        return totals[tree]
    return F32(_combine(tree[0], totals) + _combine(tree[1], totals))


def _pairwise(a: np.ndarray) -> np.float32:
    """numpy 1's FLOAT_pairwise_sum of one buffer, every leaf at once: each lane's float32 adds in the same order
    (a padded zero adds nothing), the lanes joined as numpy joins them, the tail added one by one, then the tree."""
    tree, leaves, rows, tails = _plan(a.shape[0])
    padded = np.concatenate([a, np.zeros(1, dtype=F32)])
    lanes = padded[rows]  # (leaves, 16, 8)
    acc = lanes[:, 0].copy()
    for index in range(1, lanes.shape[1]):
        acc = acc + lanes[:, index]
    total = (acc[:, 0] + acc[:, 1]) + (acc[:, 2] + acc[:, 3]) + ((acc[:, 4] + acc[:, 5]) + (acc[:, 6] + acc[:, 7]))
    tail = padded[tails]
    for index in range(tail.shape[1]):
        total = total + tail[:, index]
    return _combine(tree, {leaf: F32(value) for leaf, value in zip(leaves, total, strict=True)})


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
