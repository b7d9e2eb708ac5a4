"""CosyVoice 3's flow estimator: its DiT (upstream's cosyvoice/flow/DiT/{dit,modules}.py), F5-TTS's DiT made
causal and speaker-conditioned, built from the shared blocks of mizuoto/nn/f5_dit.py.

    x, cond, mu (B, 80, T), spks (B, 80) -> proj(cat(x, cond, mu, spks over time)) + causal conv positions
      -> depth x DiTBlock (AdaLN-zero from the time embedding; RoPE on the unsplit projections: head 0 only)
      -> final AdaLN, proj_out -> the velocity (B, 80, T)

Attention (accel site `cosyvoice.dit`) takes upstream's boolean mask (B, 1, T, T): padding only, or block-causal
chunks of `static_chunk_size` frames when streaming; each block's attention output is zeroed on the frames the
mask's last row does not see, as upstream's AttnProcessor does. Differences from F5-TTS's copy stay here: the
input embedding takes the speaker and mu (no text encoder) and its position convolutions are causal
(CausalConvPositionEmbedding: `conv1`, `conv2`, left padding). Module and parameter names are upstream's (flow.pt's
`decoder.estimator.` keys).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.nn.f5_dit import AdaLayerNormFinal, MaskedDiTBlock, RotaryEmbedding, TimestepEmbedding
from mizuoto.runtime import accel
from mizuoto.runtime.graphs import Graphs, LayerSteps

from .masks import chunk_mask

# bidirectional within the visible chunks, one of ten flow steps: approximate kernels are acceptable
ATTENTION = accel.Site("cosyvoice.dit")


@dataclass(frozen=True)
class DiTConfig:
    dim: int = 1024
    depth: int = 22
    heads: int = 16
    dim_head: int = 64
    ff_mult: float = 2
    mel_dim: int = 80
    mu_dim: int = 80
    spk_dim: int = 80
    static_chunk_size: int = 50


class CausalConvPositionEmbedding(nn.Module):
    def __init__(self, dim: int, kernel_size: int = 31, groups: int = 16):
        super().__init__()
        self.kernel_size = kernel_size
        self.conv1 = nn.Sequential(nn.Conv1d(dim, dim, kernel_size, groups=groups), nn.Mish())
        self.conv2 = nn.Sequential(nn.Conv1d(dim, dim, kernel_size, groups=groups), nn.Mish())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 1)
        x = self.conv1(F.pad(x, (self.kernel_size - 1, 0, 0, 0)))
        x = self.conv2(F.pad(x, (self.kernel_size - 1, 0, 0, 0)))
        return x.permute(0, 2, 1)


class InputEmbedding(nn.Module):
    def __init__(self, mel_dim: int, mu_dim: int, out_dim: int, spk_dim: int):
        super().__init__()
        self.proj = nn.Linear(mel_dim * 2 + mu_dim + spk_dim, out_dim)
        self.conv_pos_embed = CausalConvPositionEmbedding(out_dim)

    def forward(self, x, cond, mu, spks):
        """x, cond, mu (B, T, C), spks (B, spk) -> (B, T, out_dim)."""
        spks = spks[:, None, :].expand(-1, x.shape[1], -1)  # einops repeat "b c -> b t c"
        x = self.proj(torch.cat([x, cond, mu, spks], dim=-1))
        return self.conv_pos_embed(x) + x


class DiT(nn.Module):
    def __init__(self, config: DiTConfig = DiTConfig()):
        super().__init__()
        self.config = config
        self.time_embed = TimestepEmbedding(config.dim)
        self.input_embed = InputEmbedding(config.mel_dim, config.mu_dim, config.dim, config.spk_dim)
        self.rotary_embed = RotaryEmbedding(config.dim_head)
        # rotated_heads=1: upstream rotates the first dim_head channels of the unsplit projections, i.e. head 0
        self.transformer_blocks = nn.ModuleList(
            MaskedDiTBlock(config.dim, config.heads, config.dim_head, config.ff_mult, ATTENTION, rotated_heads=1)
            for _ in range(config.depth))
        self.norm_out = AdaLayerNormFinal(config.dim)
        self.proj_out = nn.Linear(config.dim, config.mel_dim)

    def positions(self, mask: torch.Tensor, streaming: bool) -> tuple[tuple, tuple]:
        """mask (B, 1, T) -> what every block reads: pos (RoPE cos, sin, the frames whose attention output is zeroed
        (B, T, 1)) and index (the boolean mask (B, 1, T, T), its MaskInfo when it is padding only)."""
        frames = mask.shape[-1]
        keys = mask.bool()
        if streaming:
            allowed, info = chunk_mask(keys, self.config.static_chunk_size).unsqueeze(1), None
        else:
            allowed = chunk_mask(keys).repeat(1, frames, 1).unsqueeze(1)
            info = accel.MaskInfo(keys[:, 0], padding="right")
        hidden = ~allowed[:, 0, -1].unsqueeze(-1)
        return (*self.rotary_embed.tables(frames), hidden), (allowed, info)

    def segments(self) -> list:
        return list(self.transformer_blocks)

    def embed(self, x, mu, t, spks, cond):
        """Segment 0's head: the transformer's input and the time conditioning."""
        return self.input_embed(x.transpose(1, 2), cond.transpose(1, 2), mu.transpose(1, 2), spks), self.time_embed(t)

    def finish(self, state) -> torch.Tensor:
        x, t = state
        return self.proj_out(self.norm_out(x, t)).transpose(1, 2)

    def forward(self, x, mask, mu, t, spks, cond, streaming: bool = False, graphs: Graphs | None = None):
        """x, mu, cond (B, 80, T), mask (B, 1, T), t (B,), spks (B, 80) -> the velocity (B, 80, T)."""
        if t.ndim == 0:
            t = t.repeat(x.shape[0])
        pos, index = self.positions(mask, streaming)
        return LayerSteps(self.segments(), self.embed, self.finish, graphs)((x, mu, t, spks, cond), pos, index)
