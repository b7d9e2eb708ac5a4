"""Rotary position embeddings, computed the way transformers' default RoPE computes them."""

from __future__ import annotations

import torch
from torch import nn


def inverse_frequencies(head_dim: int, theta: float) -> torch.Tensor:
    # int64 arange then float, as upstream does: a float arange rounds differently for large dims.
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))


def cos_sin(inv_freq: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 cos, sin (B, L, head_dim) for positions (B, L): upstream's exact operations."""
    inv = inv_freq[None, :, None].float().expand(positions.shape[0], -1, 1)
    with torch.autocast(device_type=positions.device.type if positions.device.type != "mps" else "cpu",
                        enabled=False):
        freqs = (inv @ positions[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


class Rotary(nn.Module):
    """cos/sin for positions, read from a table filled for every position a cache can hold.

    Each table row is computed by upstream's own expression for that one position (its matmul has a
    single term per entry, so a row does not depend on which other positions are computed with it):
    looking rows up gives the same bits as computing them per step, for a fraction of the launches.
    """

    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        self.register_buffer("inv_freq", inverse_frequencies(head_dim, theta), persistent=False)
        self._tables: dict = {}

    def reserve(self, positions: int) -> None:
        """Make the table hold positions [0, positions) on inv_freq's device (done by new_cache)."""
        device = self.inv_freq.device
        found = self._tables.get(device)
        if found is None or found[0].shape[0] < positions or found[2] != self.inv_freq.data_ptr():
            cos, sin = cos_sin(self.inv_freq, torch.arange(positions, device=device)[None])
            self._tables[device] = (cos[0], sin[0], self.inv_freq.data_ptr())

    @torch.no_grad()
    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """positions (B, L) -> cos, sin (B, 1, L, head_dim) in `dtype`, ready to broadcast over heads."""
        table = self._tables.get(positions.device)
        if table is None:  # no cache reserved positions here: compute them directly
            cos, sin = cos_sin(self.inv_freq, positions)
        else:
            cos, sin = table[0][positions], table[1][positions]
        if cos.dtype != dtype:
            cos, sin = cos.to(dtype), sin.to(dtype)
        return cos[:, None], sin[:, None]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (B, H, L, D) rotated by cos/sin (B, 1, L, D)."""
    return (x * cos) + (rotate_half(x) * sin)
