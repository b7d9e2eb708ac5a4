"""The dummy model: a tiny text encoder and an autoregressive code decoder."""

from __future__ import annotations

import math

import torch
from torch import nn

from mizuoto.nn.qwen import QwenConfig, QwenDecoder
from mizuoto.nn.rotary import inverse_frequencies
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


class TextEncoder(nn.Module):
    """Bidirectional encoder over the text's bytes (the engine's own attention site, dummy.attn)."""

    def __init__(self, config: DummyConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.dim)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.dim)
        # Fixed, not learned: part of the architecture, so not stored in checkpoints.
        self.register_buffer("positions", sinusoids(config.max_tokens, config.dim), persistent=False)

    def forward(self, ids: torch.Tensor, padded: bool) -> torch.Tensor:
        """ids (B, L), right-padded with PAD -> states (B, L, dim). `padded`: whether any row is padded."""
        # Padded keys are masked out; without padding the unmasked call needs no mask at all.
        mask = (ids != PAD)[:, None, None, :] if padded else None
        x = self.embed(ids) + self.positions[: ids.shape[1]].to(self.embed.weight.dtype)
        for block in self.blocks:
            x = block(x, mask)
        return self.norm(x)


class DummyModel(nn.Module):
    """Text encoder, then an autoregressive decoder of acoustic codes on the shared QwenDecoder; each
    code owns a row of raw synthesiser parameters (code_params)."""

    def __init__(self, config: DummyConfig):
        super().__init__()
        self.config = config
        self.encoder = TextEncoder(config)
        self.bridge = nn.Linear(config.dim, config.dim)
        self.decoder = QwenDecoder(QwenConfig(
            hidden_size=config.dim, intermediate_size=config.decoder_mlp, num_layers=config.decoder_layers,
            num_heads=config.decoder_heads, num_kv_heads=config.decoder_kv_heads,
            head_dim=config.decoder_head_dim, rope_theta=10000.0, vocab_size=config.codes + 2))
        self.code_head = nn.Linear(config.dim, config.codes + 1)  # the codes and EOS
        self.code_params = nn.Embedding(config.codes, config.frame_params)

    def reset_buffers(self) -> None:
        """Recompute the fixed buffers (after building on the meta device and `to_empty`)."""
        with torch.no_grad():
            self.encoder.positions.copy_(sinusoids(self.config.max_tokens, self.config.dim))
            self.decoder.rotary.inv_freq.copy_(inverse_frequencies(self.config.decoder_head_dim, 10000.0))


def init_weights(model: DummyModel, seed: int) -> None:
    """Fill every parameter from a private generator: the same seed gives the same weights on any
    device and in any dtype, and the process's global random state is never touched."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                values = torch.randn(param.shape, generator=generator) * 0.02
            elif param.dim() == 1:  # norm gains: around one, but not exactly (tests see them)
                values = 1.0 + torch.randn(param.shape, generator=generator) * 0.1
            elif name == "code_params.weight":  # raw synthesiser controls: spread, so codes sound apart
                values = torch.randn(param.shape, generator=generator) * 1.5
            else:
                values = torch.randn(param.shape, generator=generator) * (1.0 / math.sqrt(param.shape[-1]))
            param.copy_(values.to(param.dtype))
