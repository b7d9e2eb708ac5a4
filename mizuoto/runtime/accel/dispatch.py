"""attention(): the one entry every attention computation goes through."""

from __future__ import annotations

import os

from mizuoto.runtime.context import ACCEL

from . import mask as mask_checks
from .site import Site

# Training binds one AccelRun for the whole process: autograd runs backward and checkpoint
# recomputation on its own threads, where a context variable set on the caller's thread is unset.
PROCESS_POLICY = None

# Small-engine tests turn this on: every call with a mask_info checks it against the dense mask.
DEBUG = False

# MIZUOTO_TEST_ACCEL=count records every site that reached the dispatcher, so the test suite can fail
# when a declared site of a small engine never did (a call that bypassed accel.attention).
COUNT = os.environ.get("MIZUOTO_TEST_ACCEL", "") == "count"
SEEN: set[str] = set()


def attention(q, k, v, *, site: Site, mask=None, causal: bool = False, scale: float | None = None,
              enable_gqa: bool = False, dropout_p: float = 0.0, mask_info=None):
    """Attention over `(batch, heads, length, head_dim)` tensors at `site`.

    `mask` is boolean (True = attend) or additive, broadcastable to (B, H, Lq, Lk); `causal` is
    SDPA's top-left `is_causal`. With no policy bound (auto) this is exactly the site's reference.
    `mask_info` describes the mask's structure for fused kernels; the reference ignores it.
    """
    if COUNT:
        SEEN.add(site.name)
    if DEBUG and mask_info is not None and not _capturing():
        mask_checks.check(mask_info, mask, causal, q, k)
    bound = ACCEL.get() or PROCESS_POLICY
    if bound is None:
        return site.reference(q, k, v, mask, causal, scale, enable_gqa, dropout_p)
    # A bound policy. A call like the site's last one (the layers of one decoder step are alike) reuses its
    # backend without building a key: the check is AccelRun.attend's `last` record, kept here because this
    # runs once per attention call and a call frame is a tenth of its cost. Anything else, and any
    # failure, goes the whole way (AccelRun.attend: key, selection, fallbacks).
    try:
        last = bound.last.get(site)
    except AttributeError:  # a bound object of its own (tests, a host's) that only has attend()
        last = None
    if last is not None and last[0] == q.shape and last[1] == k.shape and last[2] == v.shape \
            and last[3] == q.device and last[4] is q.dtype and last[5] is mask and last[6] is mask_info \
            and last[7] is causal and last[8] == scale and last[9] is enable_gqa and last[10] == dropout_p \
            and not (_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)):
        entry = last[12]
        run = entry.run  # None once a backend broke (the entry is dropped), or when the chain must be walked
        if run is not None:
            try:
                out = run(q, k, v, last[11])
            except Exception as exc:
                return bound.failed(site, q, k, v, last[11], entry, exc)
            bound.used[entry.ran] += 1
            return out
    return bound.attend(site, q, k, v, mask, causal, scale, enable_gqa, dropout_p, mask_info)


def _first_grad_enabled() -> bool:
    # This module imports without torch; the first bound call binds torch.is_grad_enabled itself.
    global _grad_enabled
    import torch

    _grad_enabled = torch.is_grad_enabled
    return _grad_enabled()


_grad_enabled = _first_grad_enabled


def _capturing() -> bool:
    # The DEBUG check reads tensors back; inside a CUDA graph capture that is illegal (warm-up checked).
    import torch

    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
