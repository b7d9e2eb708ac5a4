"""The AudioVAE's building blocks: Snake, causal convolutions, residual units, the encoder and decoder
blocks, the noise block and the v2 sample-rate conditioning.

Names follow upstream's state dict (`block`, `alpha`, `linear`, `scale_embed`, ...), except that each
weight-normed convolution holds its folded `weight` where the checkpoint stores `weight_g` and
`weight_v`: upstream recomputes `torch._weight_norm(weight_v, weight_g, 0)` before every call (the
legacy `torch.nn.utils.weight_norm` hook), and that function is deterministic, so computing it once
at load (audio_vae.load_audio_vae) gives the very weight upstream convolves with.

Every forward runs upstream's torch operations on the same operands in the same order, which is what
makes the output bit-identical on the CPU.

Streaming (the decoder only). A causal conv needs the last `context` input frames of the previous call;
a transposed conv needs the last input frame. Each such layer owns a slot in a list of state tensors
(one per layer, fixed shape (batch, channels, context)), reads its slot as the left context and
overwrites it in place with its new tail. With `states=None` the layer pads with zeros as upstream's
plain decode does. Neither path has data-dependent Python control flow, so both trace in one graph.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

SNAKE_EPS = 1e-9  # added to alpha before its reciprocal, as upstream's jit-scripted snake does


class Snake(nn.Module):
    """x + sin^2(alpha x) / (alpha + 1e-9), alpha per channel, over (B, C, T). Upstream scripts this
    with torch.jit; the CPU fuser is off in torch's builds, so the scripted graph runs these same five
    kernels."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + (self.alpha + SNAKE_EPS).reciprocal() * torch.sin(self.alpha * x).pow(2)


class CausalConv(nn.Module):
    """Conv1d over `context` zeros (or the previous call's last frames) followed by the input: an
    output frame sees only its own and earlier input frames. Stride s shortens T to T / s."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, context: int, stride: int = 1,
                 dilation: int = 1, groups: int = 1, bias: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(out_channels, in_channels // groups, kernel_size))
        self.bias = nn.Parameter(torch.zeros(out_channels)) if bias else None
        self.context, self.stride, self.dilation, self.groups = context, stride, dilation, groups
        self.slot = -1  # index of this layer's streaming state (set by the decoder when context > 0)

    def forward(self, x: torch.Tensor, states: list[torch.Tensor] | None = None) -> torch.Tensor:
        if self.context:
            if states is None:
                x = F.pad(x, (self.context, 0))
            else:
                state = states[self.slot]
                x = torch.cat([state, x], dim=-1)
                state.copy_(x[..., x.shape[-1] - self.context:])
        return F.conv1d(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)

    def state_shape(self, batch: int) -> tuple[int, int, int]:
        return (batch, self.weight.shape[1] * self.groups, self.context)


class CausalUpConv(nn.Module):
    """ConvTranspose1d (kernel 2s, stride s) whose last s samples are cut: T frames give T * s samples,
    each frame writing only at or after its own position.

    Streaming, upstream runs it on [previous last frame, chunk] and cuts s samples at each end, which
    adds what the previous frame's kernel tail puts into this chunk. (Not the same arithmetic as the
    plain path: a streamed decode differs from a whole one by float rounding.)"""

    def __init__(self, in_channels: int, out_channels: int, stride: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(in_channels, out_channels, 2 * stride))
        self.bias = nn.Parameter(torch.zeros(out_channels))
        self.stride = stride
        # upstream cuts 2 * ceil(s / 2) - s % 2 samples, which is s for every s
        self.cut = 2 * math.ceil(stride / 2) - stride % 2
        self.context = (2 * stride - 1) // stride  # earlier frames whose kernel reaches this chunk: 1
        self.slot = -1

    def forward(self, x: torch.Tensor, states: list[torch.Tensor] | None = None) -> torch.Tensor:
        if states is None:
            y = F.conv_transpose1d(x, self.weight, self.bias, self.stride)
            return y[..., : y.shape[-1] - self.cut]
        state = states[self.slot]
        x = torch.cat([state, x], dim=-1)
        state.copy_(x[..., x.shape[-1] - self.context:])
        y = F.conv_transpose1d(x, self.weight, self.bias, self.stride)
        return y[..., self.context * self.stride: y.shape[-1] - self.cut]

    def state_shape(self, batch: int) -> tuple[int, int, int]:
        return (batch, self.weight.shape[0], self.context)


def causal_conv(in_channels: int, out_channels: int, kernel_size: int, padding: int, **kwargs) -> CausalConv:
    """A CausalConv declared as upstream declares its layers: `padding` p means 2p zeros on the left."""
    return CausalConv(in_channels, out_channels, kernel_size, 2 * padding, **kwargs)


class ResidualUnit(nn.Module):
    """x + (Snake, kernel-7 conv with `dilation`, Snake, 1x1 conv)(x)."""

    def __init__(self, dim: int, dilation: int, groups: int):
        super().__init__()
        self.block = nn.ModuleList([
            Snake(dim),
            causal_conv(dim, dim, 7, (6 * dilation) // 2, dilation=dilation, groups=groups),
            Snake(dim),
            causal_conv(dim, dim, 1, 0),
        ])

    def forward(self, x: torch.Tensor, states: list[torch.Tensor] | None = None) -> torch.Tensor:
        act1, conv1, act2, conv2 = self.block
        y = conv2(act2(conv1(act1(x), states)))
        return x + y


def residual_units(dim: int, groups: int) -> list[ResidualUnit]:
    return [ResidualUnit(dim, dilation, groups) for dilation in (1, 3, 9)]


class EncoderBlock(nn.Module):
    """Three residual units at `in_dim`, Snake, then a strided conv (kernel 2s) to `out_dim`.

    The strided conv's left padding is upstream's 2 * ceil(s / 2) in v1 and that minus s % 2 in v2:
    for an odd stride v1 reads one more zero on the left (its frames sit one sample later)."""

    def __init__(self, in_dim: int, out_dim: int, stride: int, groups: int, version: int):
        super().__init__()
        context = 2 * math.ceil(stride / 2) - (stride % 2 if version >= 2 else 0)
        self.block = nn.ModuleList([
            *residual_units(in_dim, groups),
            Snake(in_dim),
            CausalConv(in_dim, out_dim, 2 * stride, context, stride=stride),
        ])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.block:
            x = layer(x)
        return x


class NoiseBlock(nn.Module):
    """x + noise * conv1x1(x), noise ~ N(0, 1) of shape (B, 1, T). Upstream draws it from the global
    generator; here from `generator` (None: the global one, as upstream). Off in every released config."""

    def __init__(self, dim: int):
        super().__init__()
        self.linear = causal_conv(dim, dim, 1, 0, bias=False)

    def forward(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        b, _, t = x.shape
        noise = torch.randn((b, 1, t), generator=generator, device=x.device, dtype=x.dtype)
        h = self.linear(x)
        return x + noise * h


class DecoderBlock(nn.Module):
    """Snake, the upsampling conv to `out_dim`, the noise block if any, three residual units."""

    def __init__(self, in_dim: int, out_dim: int, stride: int, groups: int, noise: bool):
        super().__init__()
        self.in_dim = in_dim
        self.block = nn.ModuleList([
            Snake(in_dim),
            CausalUpConv(in_dim, out_dim, stride),
            *([NoiseBlock(out_dim)] if noise else []),
            *residual_units(out_dim, groups),
        ])

    def forward(self, x: torch.Tensor, states: list[torch.Tensor] | None = None,
                generator: torch.Generator | None = None) -> torch.Tensor:
        for layer in self.block:
            if isinstance(layer, Snake):
                x = layer(x)
            elif isinstance(layer, NoiseBlock):
                x = layer(x, generator)
            else:
                x = layer(x, states)
        return x


class SampleRateCondition(nn.Module):
    """v2: before a decoder block, the output rate's bucket selects a per-channel embedding:
    scale_bias(_init): x * scale + bias; add: x + e; concat: [x, e repeated over time] (then the out
    layer brings it back to `dim`). The optional out layer is Snake + 1x1 conv."""

    def __init__(self, dim: int, buckets: int, cond_type: str, cond_dim: int, out_layer: bool):
        super().__init__()
        self.cond_type = cond_type
        width = dim
        if cond_type in ("scale_bias", "scale_bias_init"):
            self.scale_embed = nn.Embedding(buckets, dim, _weight=torch.ones(buckets, dim))
            self.bias_embed = nn.Embedding(buckets, dim, _weight=torch.zeros(buckets, dim))
        elif cond_type == "add":
            self.cond_embed = nn.Embedding(buckets, dim, _weight=torch.zeros(buckets, dim))
        else:  # concat
            self.cond_embed = nn.Embedding(buckets, cond_dim, _weight=torch.zeros(buckets, cond_dim))
            width = dim + cond_dim
        self.out_layer = nn.ModuleList([Snake(width), causal_conv(width, dim, 1, 0)]) if out_layer else None

    def forward(self, x: torch.Tensor, bucket: torch.Tensor) -> torch.Tensor:
        if self.cond_type == "add":
            x = x + self.cond_embed(bucket).unsqueeze(-1)
        elif self.cond_type == "concat":
            # upstream repeats the embedding over time; expanding it over the batch too lets one rate
            # serve a batch (upstream's cat fails there), with the same values where upstream runs
            x = torch.cat([x, self.cond_embed(bucket).unsqueeze(-1).expand(x.shape[0], -1, x.shape[-1])], dim=1)
        else:
            x = x * self.scale_embed(bucket).unsqueeze(-1) + self.bias_embed(bucket).unsqueeze(-1)
        if self.out_layer is not None:
            act, conv = self.out_layer
            x = conv(act(x))
        return x
