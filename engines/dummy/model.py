"""A tiny transformer encoder: byte ids to per-token frame parameters."""

from __future__ import annotations

import math

import torch
from torch import nn

from mizuoto.runtime import accel

from .config import PAD, DummyConfig

ATTN = accel.Site("dummy.attn")


class Attention(nn.Module):
    def __init__(self, config: DummyConfig):
        super().__init__()
        self.heads = config.heads
        self.qkv = nn.Linear(config.dim, 3 * config.dim)
        self.out = nn.Linear(config.dim, config.dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = accel.attention(q, k, v, site=ATTN, mask=mask)
        return self.out(y.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, config: DummyConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.dim)
        self.attn = Attention(config)
        self.norm2 = nn.LayerNorm(config.dim)
        self.mlp = nn.Sequential(nn.Linear(config.dim, config.mlp_hidden), nn.GELU(),
                                 nn.Linear(config.mlp_hidden, config.dim))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), mask)
        return x + self.mlp(self.norm2(x))


def sinusoids(length: int, dim: int) -> torch.Tensor:
    position = torch.arange(length, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)
    return table


class DummyModel(nn.Module):
    def __init__(self, config: DummyConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.dim)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.dim)
        self.head = nn.Linear(config.dim, config.frame_params)
        # Fixed, not learned: part of the architecture, so not stored in checkpoints.
        self.register_buffer("positions", sinusoids(config.max_tokens, config.dim), persistent=False)

    def reset_buffers(self) -> None:
        """Recompute the fixed buffers (after building on the meta device and `to_empty`)."""
        with torch.no_grad():
            self.positions.copy_(sinusoids(self.config.max_tokens, self.config.dim))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, L), right-padded with PAD -> raw frame parameters (B, L, frame_params)."""
        keep = ids != PAD
        # Padded keys are masked out; a batch of one has no padding and takes the unmasked path.
        mask = None if bool(keep.all()) else keep[:, None, None, :]
        x = self.embed(ids) + self.positions[: ids.shape[1]].to(self.embed.weight.dtype)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


def init_weights(model: DummyModel, seed: int) -> None:
    """Fill every parameter from a private generator: the same seed gives the same weights on any
    device and in any dtype, and the process's global random state is never touched."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                values = torch.randn(param.shape, generator=generator) * 0.02
            elif param.dim() == 1:  # LayerNorm gains: around one, but not exactly (tests see them)
                values = 1.0 + torch.randn(param.shape, generator=generator) * 0.1
            else:
                values = torch.randn(param.shape, generator=generator) * (1.0 / math.sqrt(param.shape[-1]))
            param.copy_(values.to(param.dtype))
