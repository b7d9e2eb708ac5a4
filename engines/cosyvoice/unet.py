"""CosyVoice 2's flow estimator: CausalConditionalDecoder, Matcha-TTS's 1-D U-Net made causal (upstream's
cosyvoice/flow/decoder.py over third_party/Matcha-TTS's decoder.py and transformer.py, whose transformer block is
diffusers 0.29's BasicTransformerBlock with AttnProcessor2_0).

    x, mu, spks (repeated over time), cond: (B, 80 each, T) -> cat (B, 320, T)
      down:  [causal ResNet block, n transformer blocks, 2x downsample (a causal conv on the last level)] per level
      mid:   [causal ResNet block, n transformer blocks] x num_mid_blocks
      up:    [ResNet block over (x, skip), n transformer blocks, 2x transposed conv (a causal conv on the last)]
      final: causal block, 1x1 conv -> the velocity (B, 80, T), zero on padding

The time t (B,) enters every ResNet block through a sinusoidal embedding and an MLP. Attention is plain softmax
attention with an additive mask (0 / -1e10 from `masks.to_bias`; block-causal chunks of `static_chunk_size` frames
when streaming), repeated per head as diffusers prepares it: the accel site `cosyvoice.unet`.

Module and parameter names are upstream's (flow.pt's `decoder.estimator.` keys).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.runtime import accel

from .masks import chunk_mask, to_bias

# bidirectional within the visible chunks, one of ten flow steps: approximate kernels are acceptable
ATTENTION = accel.Site("cosyvoice.unet")


@dataclass(frozen=True)
class UNetConfig:
    in_channels: int = 320
    out_channels: int = 80
    channels: tuple[int, ...] = (256,)
    attention_head_dim: int = 64
    n_blocks: int = 4
    num_mid_blocks: int = 12
    num_heads: int = 8
    static_chunk_size: int = 50  # frames (chunk_size 25 tokens x token_mel_ratio 2)


class CausalConv1d(nn.Conv1d):
    """A stride-1 convolution over the past: left-padded by kernel_size - 1."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__(in_channels, out_channels, kernel_size)
        self.causal_padding = kernel_size - 1

    def forward(self, x):
        return super().forward(F.pad(x, (self.causal_padding, 0), value=0.0))


class Transpose(nn.Module):
    def forward(self, x):
        return torch.transpose(x, 1, 2)


class CausalBlock(nn.Module):
    """conv (causal, 3 taps) -> LayerNorm over channels -> Mish, masked before and after."""

    def __init__(self, dim: int, dim_out: int):
        super().__init__()
        self.block = nn.Sequential(CausalConv1d(dim, dim_out, 3), Transpose(), nn.LayerNorm(dim_out), Transpose(),
                                   nn.Mish())

    def forward(self, x, mask):
        return self.block(x * mask) * mask


class CausalResnetBlock(nn.Module):
    def __init__(self, dim: int, dim_out: int, time_emb_dim: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Mish(), nn.Linear(time_emb_dim, dim_out))
        self.block1 = CausalBlock(dim, dim_out)
        self.block2 = CausalBlock(dim_out, dim_out)
        self.res_conv = nn.Conv1d(dim, dim_out, 1)

    def forward(self, x, mask, time_emb):
        h = self.block1(x, mask)
        h += self.mlp(time_emb).unsqueeze(-1)
        h = self.block2(h, mask)
        return h + self.res_conv(x * mask)


def sinusoidal_time(t: torch.Tensor, dim: int, scale: float = 1000) -> torch.Tensor:
    """Matcha's SinusoidalPosEmb: (B,) -> (B, dim), sin then cos of scale * t * 10000^(-i / (dim/2 - 1))."""
    if t.ndim < 1:
        t = t.unsqueeze(0)
    half = dim // 2
    freqs = torch.exp(torch.arange(half, device=t.device).float() * -(math.log(10000) / (half - 1)))
    angles = scale * t.unsqueeze(1) * freqs.unsqueeze(0)
    return torch.cat((angles.sin(), angles.cos()), dim=-1)


class TimestepEmbedding(nn.Module):
    def __init__(self, in_channels: int, time_embed_dim: int):
        super().__init__()
        self.linear_1 = nn.Linear(in_channels, time_embed_dim)
        self.act = nn.SiLU()
        self.linear_2 = nn.Linear(time_embed_dim, time_embed_dim)

    def forward(self, x):
        return self.linear_2(self.act(self.linear_1(x)))


class Attention(nn.Module):
    """diffusers' Attention (self-attention, no bias on q/k/v) with AttnProcessor2_0's computation."""

    def __init__(self, dim: int, heads: int, dim_head: int):
        super().__init__()
        self.heads = heads
        inner = heads * dim_head
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_k = nn.Linear(dim, inner, bias=False)
        self.to_v = nn.Linear(dim, inner, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim), nn.Dropout(0.0)])

    def forward(self, x, bias, mask_info=None):
        batch = x.shape[0]
        q = self.to_q(x)
        k = self.to_k(x)
        v = self.to_v(x)
        head_dim = k.shape[-1] // self.heads
        q = q.view(batch, -1, self.heads, head_dim).transpose(1, 2)
        k = k.view(batch, -1, self.heads, head_dim).transpose(1, 2)
        v = v.view(batch, -1, self.heads, head_dim).transpose(1, 2)
        a = accel.attention(q, k, v, site=ATTENTION, mask=bias, mask_info=mask_info)
        a = a.transpose(1, 2).reshape(batch, -1, self.heads * head_dim).to(q.dtype)
        return self.to_out[0](a)


class GELUProjection(nn.Module):
    """diffusers' GELU: a Linear, then the exact (erf) GELU."""

    def __init__(self, dim_in: int, dim_out: int):
        super().__init__()
        self.proj = nn.Linear(dim_in, dim_out)

    def forward(self, x):
        return F.gelu(self.proj(x))


class FeedForward(nn.Module):
    def __init__(self, dim: int, mult: int = 4):
        super().__init__()
        self.net = nn.ModuleList([GELUProjection(dim, dim * mult), nn.Dropout(0.0), nn.Linear(dim * mult, dim)])

    def forward(self, x):
        for module in self.net:
            x = module(x)
        return x


class TransformerBlock(nn.Module):
    """BasicTransformerBlock with layer norms and no cross-attention: x + attn(norm1 x), then + ff(norm3 x)."""

    def __init__(self, dim: int, heads: int, dim_head: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn1 = Attention(dim, heads, dim_head)
        self.norm3 = nn.LayerNorm(dim)
        self.ff = FeedForward(dim)

    def forward(self, x, bias, mask_info=None):
        x = self.attn1(self.norm1(x), bias, mask_info) + x
        return self.ff(self.norm3(x)) + x


class Resample(nn.Module):
    """Matcha's Downsample1D (a stride-2 conv) and Upsample1D (a stride-2 transposed conv): the conv as `.conv`."""

    def __init__(self, conv: nn.Module):
        super().__init__()
        self.conv = conv

    def forward(self, x):
        return self.conv(x)


class Level(nn.ModuleList):
    """One U-Net level as upstream lists it: [ResNet block, transformer blocks] and, on down and up levels, the
    resampling after them (keys `<level>.0.*`, `<level>.1.<n>.*`, `<level>.2.*`)."""

    def __init__(self, dim_in: int, dim_out: int, time_dim: int, config: UNetConfig, resample: nn.Module | None):
        blocks = nn.ModuleList(
            TransformerBlock(dim_out, config.num_heads, config.attention_head_dim) for _ in range(config.n_blocks))
        super().__init__([CausalResnetBlock(dim_in, dim_out, time_dim), blocks]
                         + ([resample] if resample is not None else []))

    def resample(self, x):
        return self[2](x)

    def attend(self, x, mask, t, bias, mask_info):
        """The ResNet block and the transformer blocks: (B, C, T) -> (B, C', T)."""
        x = self[0](x, mask, t)
        x = x.transpose(1, 2).contiguous()  # rearrange "b c t -> b t c"
        for block in self[1]:
            x = block(x, bias, mask_info)
        return x.transpose(1, 2).contiguous()


class CausalConditionalDecoder(nn.Module):
    def __init__(self, config: UNetConfig = UNetConfig()):
        super().__init__()
        self.config = config
        channels = tuple(config.channels)
        time_dim = channels[0] * 4
        self.time_mlp = TimestepEmbedding(config.in_channels, time_dim)
        self.down_blocks = nn.ModuleList()
        self.mid_blocks = nn.ModuleList()
        self.up_blocks = nn.ModuleList()
        out = config.in_channels
        for i, width in enumerate(channels):
            last = i == len(channels) - 1
            down = CausalConv1d(width, width, 3) if last else Resample(nn.Conv1d(width, width, 3, 2, 1))
            self.down_blocks.append(Level(out, width, time_dim, config, down))
            out = width
        for _ in range(config.num_mid_blocks):
            self.mid_blocks.append(Level(channels[-1], channels[-1], time_dim, config, None))
        ups = channels[::-1] + (channels[0],)
        for i in range(len(ups) - 1):
            last = i == len(ups) - 2
            up = (CausalConv1d(ups[i + 1], ups[i + 1], 3) if last
                  else Resample(nn.ConvTranspose1d(ups[i + 1], ups[i + 1], 4, 2, 1)))
            self.up_blocks.append(Level(ups[i] * 2, ups[i + 1], time_dim, config, up))
        self.final_block = CausalBlock(ups[-1], ups[-1])
        self.final_proj = nn.Conv1d(ups[-1], config.out_channels, 1)

    def attention_bias(self, mask: torch.Tensor, streaming: bool, dtype: torch.dtype):
        """mask (B, 1, T) -> the additive bias (B, heads, T, T) as diffusers prepares it, and its MaskInfo (padding
        only, when not streaming)."""
        frames = mask.shape[-1]
        keys = mask.bool()
        if streaming:
            allowed = chunk_mask(keys, self.config.static_chunk_size)
            info = None
        else:
            allowed = chunk_mask(keys).repeat(1, frames, 1)
            info = accel.MaskInfo(keys[:, 0], padding="right")
        bias = to_bias(allowed, dtype).repeat_interleave(self.config.num_heads, dim=0)
        return bias.view(mask.shape[0], self.config.num_heads, frames, frames), info

    def forward(self, x, mask, mu, t, spks, cond, streaming: bool = False):
        """x, mu, cond (B, 80, T), mask (B, 1, T), t (B,), spks (B, 80) -> the velocity (B, 80, T)."""
        t = self.time_mlp(sinusoidal_time(t, self.config.in_channels).to(t.dtype))
        x = torch.cat([x, mu, spks.unsqueeze(-1).expand(-1, -1, x.shape[-1]), cond], dim=1)
        hiddens, masks = [], [mask]
        for level in self.down_blocks:
            mask_down = masks[-1]
            x = level.attend(x, mask_down, t, *self.attention_bias(mask_down, streaming, x.dtype))
            hiddens.append(x)
            x = level.resample(x * mask_down)
            masks.append(mask_down[:, :, ::2])
        masks = masks[:-1]
        mask_mid = masks[-1]
        bias = self.attention_bias(mask_mid, streaming, x.dtype)
        for level in self.mid_blocks:
            x = level.attend(x, mask_mid, t, *bias)
        for level in self.up_blocks:
            mask_up = masks.pop()
            skip = hiddens.pop()
            x = torch.cat([x[:, :, :skip.shape[-1]], skip], dim=1)
            x = level.attend(x, mask_up, t, *self.attention_bias(mask_up, streaming, x.dtype))
            x = level.resample(x * mask_up)
        x = self.final_block(x, mask_up)
        return self.final_proj(x * mask_up) * mask
