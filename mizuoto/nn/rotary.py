"""Rotary position embeddings, computed the way transformers' default RoPE computes them."""

from __future__ import annotations

import torch
from torch import nn


def inverse_frequencies(head_dim: int, theta: float) -> torch.Tensor:
    # int64 arange then float, as upstream does: a float arange rounds differently for large dims.
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


class Rotary(nn.Module):
    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        self.register_buffer("inv_freq", inverse_frequencies(head_dim, theta), persistent=False)

    @torch.no_grad()
    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions (B, L) -> cos, sin (B, L, head_dim) in `dtype`, computed in float32."""
        inv = self.inv_freq[None, :, None].float().expand(positions.shape[0], -1, 1)
        with torch.autocast(device_type=positions.device.type if positions.device.type != "mps" else "cpu",
                            enabled=False):
            freqs = (inv @ positions[:, None, :].float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos(), emb.sin()
        return cos.to(dtype), sin.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, H, L, D) rotated by cos/sin (B, L, D)."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (x * cos) + (rotate_half(x) * sin)
