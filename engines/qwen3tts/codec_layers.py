"""The convolutional pieces of the 12 Hz codec decoder and its residual vector quantizer.

Every module keeps upstream's parameter names (`conv`, `dwconv`, `gamma`, `alpha`, `beta`, `block`,
`_codebook.embedding_sum`, ...) so that the `decoder.*` tensors of `speech_tokenizer/model.safetensors`
load as they are, and every forward runs upstream's torch operations in upstream's order (a product
written `a * b` upstream is not `b * a` here), which is what makes the output bit-identical on the CPU.

Everything here is causal: an output sample depends on the frames up to its own and none after, which
is what lets the decoder work through a long utterance in chunks (codec_decoder.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.nn.ops import Linear

SNAKE_EPS = 1e-9  # added to exp(beta) before dividing, as upstream does
CODEBOOK_EPS = 1e-5  # the smallest cluster usage a codebook entry is divided by
CONVNEXT_LN_EPS = 1e-6


class CausalConv1d(nn.Module):
    """Conv1d padded on the left by (kernel - stride) zeros, plus on the right whatever makes the
    last window complete (nothing for stride 1, the only stride the decoder uses)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1, stride: int = 1,
                 groups: int = 1):
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, stride=stride, dilation=dilation,
                              groups=groups)
        self.stride = stride
        self.span = (kernel_size - 1) * dilation + 1  # the receptive field of one output
        self.left = self.span - stride

    def extra_right(self, length: int) -> int:
        frames = (length - self.span + self.left) / self.stride + 1
        ideal = (math.ceil(frames) - 1) * self.stride + (self.span - self.left)
        return ideal - length

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.pad(x, (self.left, self.extra_right(x.shape[-1])), mode="constant", value=0)
        return self.conv(x).contiguous()


class CausalConvTranspose1d(nn.Module):
    """ConvTranspose1d whose last (kernel - stride) samples are cut: each input frame then only
    writes samples at or after its own position, and T frames give exactly T * stride samples."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1):
        super().__init__()
        self.conv = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride)
        self.right = int(kernel_size - stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        if self.right > 0:
            x = x[..., : x.shape[-1] - self.right]
        return x.contiguous()


class ConvNeXtBlock(nn.Module):
    """Causal depthwise conv (kernel 7), LayerNorm, 4x pointwise MLP with GELU, scaled by gamma,
    added to the input. (B, C, T) in and out."""

    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = CausalConv1d(dim, dim, kernel_size=7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=CONVNEXT_LN_EPS)
        self.pwconv1 = Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dwconv(x).permute(0, 2, 1)
        h = self.pwconv2(self.act(self.pwconv1(self.norm(h))))
        h = (self.gamma * h).permute(0, 2, 1)
        return x + h


class SnakeBeta(nn.Module):
    """x + sin^2(x e^alpha) / (e^beta + 1e-9), per channel over (B, C, T); alpha and beta are stored
    as logarithms."""

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = torch.exp(self.alpha.unsqueeze(0).unsqueeze(-1))
        beta = torch.exp(self.beta.unsqueeze(0).unsqueeze(-1))
        return x + (1.0 / (beta + SNAKE_EPS)) * torch.pow(torch.sin(x * alpha), 2)


class ResidualUnit(nn.Module):
    """Snake, dilated causal conv (kernel 7), Snake, 1x1 conv, plus the input."""

    def __init__(self, dim: int, dilation: int):
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv1d(dim, dim, kernel_size=7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv1d(dim, dim, kernel_size=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.act2(self.conv1(self.act1(x)))) + x


class DecoderBlock(nn.Module):
    """Snake, causal transposed conv (kernel 2r, stride r) halving the channels, then residual units
    with dilations 1, 3 and 9. Upstream keeps them in one list named `block`."""

    def __init__(self, in_dim: int, out_dim: int, rate: int):
        super().__init__()
        self.block = nn.ModuleList([SnakeBeta(in_dim), CausalConvTranspose1d(in_dim, out_dim, 2 * rate, rate),
                                    *(ResidualUnit(out_dim, dilation) for dilation in (1, 3, 9))])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.block:
            x = layer(x)
        return x


# ---------------------------------------------------------------------------------------------------
# Residual vector quantizer (decode side only)


class Codebook(nn.Module):
    """A codebook kept as its training statistics: entry i = embedding_sum[i] / max(cluster_usage[i], eps)."""

    def __init__(self, dim: int, size: int):
        super().__init__()
        self.cluster_usage = nn.Parameter(torch.ones(size))
        self.embedding_sum = nn.Parameter(torch.zeros(size, dim))

    def table(self) -> torch.Tensor:
        """The (size, dim) entries, divided as upstream divides them on every decode."""
        return self.embedding_sum / self.cluster_usage.clamp(min=CODEBOOK_EPS)[:, None]


class VectorQuantizer(nn.Module):
    """One quantizer: a codebook (upstream's `project_out` is the identity at this size)."""

    def __init__(self, dim: int, size: int):
        super().__init__()
        self._codebook = Codebook(dim, size)


class ResidualQuantizer(nn.Module):
    """Quantizers whose entries are summed, then projected by a 1x1 conv. `input_proj` only serves
    encoding; it is kept so that the published file loads strictly."""

    def __init__(self, count: int, dim: int, size: int, io_dim: int):
        super().__init__()
        self.input_proj = nn.Conv1d(io_dim, dim, 1, bias=False)
        self.output_proj = nn.Conv1d(dim, io_dim, 1, bias=False)
        self.vq = nn.Module()
        self.vq.layers = nn.ModuleList(VectorQuantizer(dim, size) for _ in range(count))

    def tables(self) -> list[torch.Tensor]:
        return [layer._codebook.table() for layer in self.vq.layers]

    def decode(self, codes: torch.Tensor, tables: list[torch.Tensor]) -> torch.Tensor:
        """codes (B, K, T) -> (B, io_dim, T)."""
        # Upstream starts its sum from a float32 zero scalar (a 0-dim tensor: it never changes the
        # dtype), so a first entry of -0.0 becomes +0.0 exactly as there.
        total = torch.zeros((), device=codes.device)
        for index in range(codes.shape[1]):
            total = total + F.embedding(codes[:, index], tables[index]).transpose(1, 2)
        return self.output_proj(total)


class SplitResidualQuantizer(nn.Module):
    """The first (semantic) quantizer and the other (acoustic) ones, each group with its own projection."""

    def __init__(self, num_quantizers: int, dim: int, size: int, io_dim: int):
        super().__init__()
        self.semantic = 1
        self.rvq_first = ResidualQuantizer(1, dim, size, io_dim)
        self.rvq_rest = ResidualQuantizer(num_quantizers - 1, dim, size, io_dim)

    def tables(self) -> list[torch.Tensor]:
        """Every quantizer's entries, in code order: computed once per decode, used by every chunk."""
        return self.rvq_first.tables() + self.rvq_rest.tables()

    def decode(self, codes: torch.Tensor, tables: list[torch.Tensor] | None = None) -> torch.Tensor:
        """codes (B, Q, T) -> (B, io_dim, T)."""
        if tables is None:
            tables = self.tables()
        first = self.semantic
        hidden = self.rvq_first.decode(codes[:, :first], tables[:first])
        if codes.shape[1] > first:
            hidden += self.rvq_rest.decode(codes[:, first:], tables[first:])
        return hidden
