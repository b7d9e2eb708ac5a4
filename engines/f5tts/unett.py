"""E2-TTS's UNetT: the flat U-Net transformer of E2TTS_Base, exact to f5-tts 1.1.22 (MIT).

    text ids ─ TextEmbedding (embedding; ConvNeXt-V2 blocks and positions when configured) ─┐
    noisy mel, reference mel ───────────────────────────────────────── InputEmbedding ─────┴─ x
    [time token, x] ─ layers 1..depth/2 (each input kept) ─ layers depth/2+1..depth, each first
    joined with the input of its mirror layer (concatenated and projected, or added)
    ─ RMSNorm ─ drop the time token ─ proj_out ─ predicted flow

Layers are pre-norm (x-transformers' RMSNorm) attention and GELU-tanh FFN blocks, with RoPE over the
time token and the frames. Parameter names are upstream's (each layer is a ModuleList: skip
projection, attention norm, attention, FFN norm, FFN), so its checkpoints load as they are. The
same packing, segments and solver as the DiT (dit.py) apply.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .dit import Attention, FeedForward, InputEmbedding, RotaryEmbedding, TextEmbedding, TimestepEmbedding


@dataclass(frozen=True)
class UNetTConfig:
    """upstream's `model.arch` of the UNetT backbone (E2TTS_Base.yaml), plus the loader's sizes."""

    dim: int = 1024
    depth: int = 24
    heads: int = 16
    dim_head: int = 64
    ff_mult: float = 4
    text_dim: int | None = None  # None: the mel size, as upstream
    text_mask_padding: bool = False
    qk_norm: str | None = None
    conv_layers: int = 0
    pe_attn_head: int | None = 1
    skip_connect_type: str = "concat"  # "concat", "add" or "none"
    mel_dim: int = 100
    text_num_embeds: int = 2545

    def to_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    """x-transformers' RMSNorm: unit-length rows scaled by sqrt(dim) and the gain `g`."""

    def __init__(self, dim: int):
        super().__init__()
        self.scale = dim**0.5
        self.g = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.normalize(x, dim=-1) * self.scale * (self.g + 0.0)


class _Layer:
    """One UNetT layer for LayerSteps: `before` joins the mirror layer's input (second half), keeps
    this layer's input (first half) and projects; `after` adds the attention and the FFN."""

    def __init__(self, modules: nn.ModuleList, index: int, depth: int, skip_type: str, rotated_heads: int | None):
        self.skip_proj, self.attn_norm, self.attn, self.ff_norm, self.ff = modules
        self.first_half = index < depth // 2
        self.skip_type, self.rotated_heads = skip_type, rotated_heads

    def before(self, state, rope):
        x, skips = state
        if self.first_half:
            skips = (*skips, x)
        else:
            skip, skips = skips[-1], skips[:-1]
            if self.skip_type == "concat":
                x = self.skip_proj(torch.cat((x, skip), dim=-1))
            elif self.skip_type == "add":
                x = x + skip
        q, k, v = self.attn.project(self.attn_norm(x), rope, self.rotated_heads)
        return q, k, v, (x, skips)

    def attend(self, q, k, v, index=None):
        return self.attn.attend(q, k, v)

    def after(self, a, residual):
        x, skips = residual
        x = self.attn.to_out[0](a) + x
        return self.ff(self.ff_norm(x)) + x, skips


class UNetT(nn.Module):
    def __init__(self, config: UNetTConfig):
        super().__init__()
        if config.depth % 2:
            raise ValueError(f"UNetT's depth must be even, got {config.depth}")
        self.config = config
        self.dim = config.dim
        text_dim = config.text_dim or config.mel_dim
        self.time_embed = TimestepEmbedding(config.dim)
        self.text_embed = TextEmbedding(config.text_num_embeds, text_dim, config.text_mask_padding,
                                        config.conv_layers, max_positions=4096, clamp_positions=True)
        self.input_embed = InputEmbedding(config.mel_dim, text_dim, config.dim)
        self.rotary_embed = RotaryEmbedding(config.dim_head)
        self.layers = nn.ModuleList()
        for index in range(config.depth):
            later = index >= config.depth // 2
            skip_proj = nn.Linear(config.dim * 2, config.dim, bias=False) \
                if later and config.skip_connect_type == "concat" else None
            self.layers.append(nn.ModuleList([
                skip_proj, RMSNorm(config.dim),
                Attention(config.dim, config.heads, config.dim_head, config.qk_norm),
                RMSNorm(config.dim), FeedForward(config.dim, config.ff_mult)]))
        self.norm_out = RMSNorm(config.dim)
        self.proj_out = nn.Linear(config.dim, config.mel_dim)

    def segments(self) -> list:
        return [_Layer(modules, i, self.config.depth, self.config.skip_connect_type, self.config.pe_attn_head)
                for i, modules in enumerate(self.layers)]

    def rope(self, frames: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.rotary_embed.tables(frames + 1)  # the time token is position 0

    def text_embeddings(self, text: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.text_embed(text, length), self.text_embed(text, length, drop_text=True)

    def embed(self, x, cond, texts, time, guided: bool = True):
        text, null_text = texts
        t = self.time_embed(time.repeat(x.shape[0]))
        if guided:
            x = torch.cat((self.input_embed(x, cond, text), self.input_embed(x, torch.zeros_like(cond), null_text)))
            t = torch.cat((t, t))
        else:
            x = self.input_embed(x, cond, text)
        return torch.cat([t.unsqueeze(1), x], dim=1), ()

    def finish(self, state):
        x, skips = state
        return self.proj_out(self.norm_out(x)[:, 1:, :])

    def forward(self, x, cond, texts, time, guided: bool = True) -> torch.Tensor:
        rope = self.rope(x.shape[1])
        state = self.embed(x, cond, texts, time, guided)
        for layer in self.segments():
            q, k, v, residual = layer.before(state, rope)
            state = layer.after(layer.attend(q, k, v), residual)
        return self.finish(state)
