"""flash-attn 2.x (`flash_attn`), called directly (PLATFORM.md §2).

Two entry points:
- `flash_attn_func` for calls without a mask: autograd, dropout, native GQA, causal aligned
  bottom-right (so SDPA's top-left `is_causal` is taken only when there are as many queries as keys).
- `flash_attn_with_kvcache` for calls with a MaskInfo: per-row real keys (`cache_seqlens`, or
  `cache_leftpad` from 2.6.1), bottom-right causality and a sliding window, with no dense mask. It has
  no backward and no dropout. It writes into k_cache/v_cache only when new keys come as `k=`/`v=`,
  which is never done here, so the caller's tensors are only read.

The helpers at the top are shared with the xFormers and SageAttention backends.
"""

from __future__ import annotations

import inspect

from ..call import Args, Call
from .base import Backend, version_tuple
from .layout import HALF, capability, nhd, on_device, pad_head_dim, softmax_scale


def window_size(info) -> tuple[int, int]:
    """MaskInfo's window keeps keys j > i' - window (i' = the query's bottom-right-aligned position);
    flash keeps [i' - left, i' + right], so left = window - 1. Causal: right = 0; -1 = unbounded."""
    if info.window is None:
        return (-1, -1)
    return (info.window - 1, 0 if info.causal else -1)


class FlashAttn(Backend):
    name = "flash"
    package = "flash-attn"
    dropout = True
    install = "pip install flash-attn --no-build-isolation --no-deps"

    # Set by load(); tests put fakes here.
    _flash_attn_func = None
    _flash_attn_with_kvcache = None
    _leftpad = True  # flash_attn_with_kvcache takes cache_leftpad (2.6.1+)

    def version_problem(self, version: str | None) -> str | None:
        if version is not None and version_tuple(version) < (2, 6):
            return f"flash-attn {version} is older than 2.6"
        return None

    def load(self) -> None:
        from flash_attn import flash_attn_func, flash_attn_with_kvcache

        self._flash_attn_func = flash_attn_func
        self._flash_attn_with_kvcache = flash_attn_with_kvcache
        try:
            self._leftpad = "cache_leftpad" in inspect.signature(flash_attn_with_kvcache).parameters
        except (TypeError, ValueError):  # no Python signature to read: assume 2.6.1+ (only 2.6.0 lacks it)
            self._leftpad = True

    def device_problem(self, device) -> str | None:
        major, minor = capability(device)
        if major < 8:
            return f"compute capability {major}.{minor} (needs 8.0+)"
        return None

    def constraints(self, call: Call) -> str | None:
        if call.dtype not in HALF:
            return f"dtype {call.dtype}"
        if call.head_dim > 256:
            return f"head dim {call.head_dim}"
        if call.value_dim != call.head_dim:
            return "value dim differs"
        if call.mask_info is None:
            if call.mask != "none":
                return "dense mask"
            if call.causal and not call.equal_lengths:
                return "causal with unequal lengths"  # flash's causal is bottom-right, SDPA's top-left
            return None
        # With a MaskInfo the dense arguments are ignored: flash_attn_with_kvcache takes the structure.
        padding, causal, has_window = call.mask_info
        if padding is None:
            return "mask_info without contiguous padding"
        if call.grad:
            return "mask_info under autograd"  # flash_attn_with_kvcache has no backward
        if call.dropout:
            return "dropout with mask_info"
        if padding == "left" and not self._leftpad:
            return "left padding needs flash-attn 2.6.1"
        # With right padding (cache_seqlens) the kernel aligns causality and the window to the end of
        # each row's real keys; MaskInfo aligns them to the end of all keys. They agree for any row
        # lengths only when the alignment does not matter: no window, and causal only for one query.
        if padding == "right" and has_window:
            return "right padding with window"
        if padding == "right" and causal and not call.single_query:
            return "right padding with causal chunk"
        return None

    def run(self, q, k, v, args: Args):
        if args.mask is not None and args.mask_info is None:
            raise ValueError("flash takes masks only as mask_info")
        d = q.shape[-1]
        scale = softmax_scale(args, d)
        q2, k2, v2 = (nhd(pad_head_dim(x)) for x in (q, k, v))
        with on_device(q.device):
            if args.mask_info is None:
                out = self._flash_attn_func(q2, k2, v2, dropout_p=args.dropout_p, softmax_scale=scale,
                                            causal=args.causal)
            else:
                out = self._flash_attn_with_kvcache(q2, k2, v2, softmax_scale=scale,
                                                    **self._structure(args.mask_info, k.shape[-2]))
        return out[..., :d].transpose(1, 2)

    @staticmethod
    def _structure(info, n_k: int) -> dict:
        """MaskInfo as flash_attn_with_kvcache arguments (never k=/v=, which would write the caches)."""
        import torch

        if info.padding is None:
            raise ValueError("flash needs mask_info with contiguous (right or left) padding")
        if info.padding == "left":
            # Row b's keys are [leftpad_b, n_k): the kernel sees n_k - leftpad_b keys starting at
            # leftpad_b and aligns causality and the window to key n_k - 1, exactly as MaskInfo does.
            leftpad = info.leftpad()
            lengths = {"cache_seqlens": torch.full_like(leftpad, n_k), "cache_leftpad": leftpad}
        else:
            lengths = {"cache_seqlens": info.seqlens()}
        return {"causal": info.causal, "window_size": window_size(info), **lengths}
