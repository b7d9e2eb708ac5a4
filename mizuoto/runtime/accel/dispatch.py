"""attention(): the one entry every attention computation goes through."""

from __future__ import annotations

from mizuoto.runtime.context import ACCEL

from .site import Site

# Training binds one policy for the whole process: autograd runs backward and checkpoint
# recomputation on its own threads, where a context variable set on the caller's thread is unset.
PROCESS_POLICY = None


def attention(q, k, v, *, site: Site, mask=None, causal: bool = False, scale: float | None = None,
              enable_gqa: bool = False, dropout_p: float = 0.0, mask_info=None):
    """Attention over `(batch, heads, length, head_dim)` tensors at `site`.

    `mask` is boolean (True = attend) or additive, broadcastable to (B, H, Lq, Lk); `causal` is
    SDPA's top-left `is_causal`. With no policy bound (auto) this is exactly the site's reference.
    `mask_info` describes the mask's structure for fused kernels; the reference ignores it.
    """
    policy = ACCEL.get() or PROCESS_POLICY
    if policy is None:
        return site.reference(q, k, v, mask, causal, scale, enable_gqa, dropout_p)
    return policy.attend(site, q, k, v, mask, causal, scale, enable_gqa, dropout_p, mask_info)
