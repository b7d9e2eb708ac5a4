"""Call: the hashable description of one attention call that backend selection depends on.

Everything here is host metadata (shapes, dtypes, flags), so building a Call never waits on the
device. A decode loop produces the same Call at every step and therefore selects its backend once.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

# Above this many queries some kernels change strategy (and SageAttention's block sizes apply).
LONG_QUERIES = 1024
# CUDA grids are limited to 65535 blocks in y/z: batch x heads beyond it breaks the efficient
# kernel's grid and xFormers 0.0.21+ (facebookresearch/xformers#845).
GRID_LIMIT = 65535


class Args(NamedTuple):
    """The call's arguments besides q, k and v, as every backend receives them."""

    mask: object  # None, a bool tensor (True = attend) or an additive float tensor
    causal: bool  # SDPA's is_causal: top-left
    scale: float | None
    enable_gqa: bool
    dropout_p: float
    mask_info: object  # MaskInfo or None


class Call(NamedTuple):
    # A NamedTuple rather than a dataclass: built on every dispatched call, and a tuple is built
    # several times faster than a frozen dataclass.
    device: str  # device type: cpu, cuda, mps, ...
    capability: tuple[int, int] | None  # CUDA compute capability
    dtype: str  # "float32", "bfloat16", "float16", ...
    head_dim: int  # of q and k
    value_dim: int  # of v
    gqa: bool  # fewer key/value heads than query heads
    single_query: bool  # one query per head (a decode step)
    equal_lengths: bool  # as many queries as keys
    long_queries: bool  # more than LONG_QUERIES queries
    mask: str  # "none", "bool" or "additive"
    mask_info: tuple | None  # MaskInfo.structure() when the site passed one
    custom_scale: bool
    causal: bool
    dropout: bool
    grad: bool  # autograd will need a backward
    wide_grid: bool  # batch x heads above GRID_LIMIT

    @classmethod
    def of(cls, q, k, v, args: Args, grad_enabled: bool) -> "Call":
        mask = args.mask
        if mask is None:
            mask_kind = "none"
        elif mask.dtype.is_floating_point:
            mask_kind = "additive"
        else:
            mask_kind = "bool"
        q_shape, k_shape = q.shape, k.shape
        n_q, n_k = q_shape[-2], k_shape[-2]
        four_d = len(q_shape) == 4
        device = q.device
        return cls(
            device.type,
            capability(device.type, device.index),
            _DTYPE_NAMES.get(q.dtype) or str(q.dtype).removeprefix("torch."),
            q_shape[-1],
            v.shape[-1],
            four_d and k_shape[1] != q_shape[1],
            n_q == 1,
            n_q == n_k,
            n_q > LONG_QUERIES,
            mask_kind,
            None if args.mask_info is None else args.mask_info.structure(),
            args.scale is not None,
            bool(args.causal),
            args.dropout_p > 0.0,
            grad_enabled and (q.requires_grad or k.requires_grad or v.requires_grad),
            (q_shape[0] * q_shape[1] if four_d else q_shape[0]) > GRID_LIMIT,
        )


def _dtype_names() -> dict:
    try:
        import torch
    except ImportError:  # this module is importable without torch
        return {}
    return {getattr(torch, n): n for n in ("float32", "float16", "bfloat16", "float64")}


class _LazyDtypeNames(dict):
    # Filled on first use, so importing the dispatcher never imports torch.
    def get(self, key, default=None):
        if not self:
            self.update(_dtype_names())
        return dict.get(self, key, default)


_DTYPE_NAMES = _LazyDtypeNames()


@lru_cache(maxsize=None)
def capability(device_type: str, index: int | None) -> tuple[int, int] | None:
    if device_type != "cuda":
        return None
    import torch

    return tuple(torch.cuda.get_device_capability(index))
