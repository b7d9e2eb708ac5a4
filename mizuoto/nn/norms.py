"""RMSNorm as Qwen (and LLaMA) compute it: in float32, scaled in the input dtype."""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * normalise(x, self.eps)


def normalise(x: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm without its weight, in upstream's exact order: upcast, mean of squares, rsqrt, back to
    the input dtype (the weight multiply then happens in that dtype)."""
    dtype = x.dtype
    if dtype != torch.float32:  # (a cast to the same dtype is a no-op, skipped for its launch cost)
        x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x if dtype == torch.float32 else x.to(dtype)
