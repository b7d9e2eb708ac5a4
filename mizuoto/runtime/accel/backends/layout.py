"""Layout helpers shared by the backends: head-dim padding, masks, GQA, layouts, devices.

Every conversion a kernel needs happens inside its backend, on new tensors: the caller's q, k, v and
mask are only read.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

from ..call import Args

HALF = ("float16", "bfloat16")


def pad_head_dim(x, multiple: int = 8):
    """Zero-pad the last dim to a multiple: padded q/k columns add nothing to the scores and padded
    v columns come out as zeros, which the caller slices off."""
    import torch.nn.functional as F

    extra = -x.shape[-1] % multiple
    return x if extra == 0 else F.pad(x, (0, extra))


def softmax_scale(args: Args, head_dim: int) -> float:
    # Padding changes the head dim a kernel sees: the scale must stay the caller's, or 1/sqrt(original D).
    return args.scale if args.scale is not None else 1.0 / math.sqrt(head_dim)


def nhd(x):
    """(B, H, L, D) -> (B, L, H, D) as a view: the kernels take any strides but need a unit last one."""
    x = x.transpose(1, 2)
    return x if x.stride(-1) == 1 else x.contiguous()


@contextmanager
def on_device(device):
    """Make `device` current for a kernel call, then give the caller back its own current device.

    flash-attn checks the *current* device's compute capability and sizes its splits by its SM
    count; SageAttention 2 calls torch.cuda.set_device(v.device) on every call and never restores
    it, while CUDA graphs, default generators and streams all key on the current device.
    """
    if device.type != "cuda":
        yield
        return
    import torch

    saved = torch.cuda.current_device()
    torch.cuda.set_device(device)
    try:
        yield
    finally:
        torch.cuda.set_device(saved)


def capability(device) -> tuple[int, int]:
    import torch

    return tuple(torch.cuda.get_device_capability(device))


def additive(mask, dtype):
    """A boolean mask (True = attend) as an additive one in `dtype`; additive masks pass through.

    Kernels below the SDPA entry take additive masks only (the math kernel would add a boolean mask
    as 0/1, silently wrong), so the conversion SDPA does for its own kernels is done here.
    """
    import torch

    if mask is None or mask.dtype != torch.bool:
        return None if mask is None else mask.to(dtype)
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))


def expand_kv(q, k, v):
    """Repeat key/value heads for kernels without native GQA (head h reads kv head h // group)."""
    group = q.shape[1] // k.shape[1]
    if group == 1:
        return k, v
    return k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
