"""The reference encoder of GPT-SoVITS's SoVITS: `module/modules.py::MelStyleEncoder` at 48b1a01 (from
StyleSpeech), which turns the reference's linear spectrogram (its first 704 bins) into the global timbre vector.

    spec (B, 704, T) -> 2 x (Linear + Mish) -> 2 x Conv1dGLU (k 5) -> 2-head self-attention (+ residual)
    -> Linear -> masked average over time: (B, out, 1)

Kept from upstream: the attention is handwritten and divides its scores by sqrt(d_model) = sqrt(128), not by
the head size (the "temperature" of StyleSpeech's ScaledDotProductAttention); the average divides each frame
by the length in float32 before summing, rather than summing and dividing.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

STYLE_BINS = 704  # SynthesizerTrn (v2 and later) hands the style encoder spec[:, :704]


class Linear(nn.Module):
    """LinearNorm: an nn.Linear at `fc`."""

    def __init__(self, inputs: int, outputs: int):
        super().__init__()
        self.fc = nn.Linear(inputs, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class ConvGLU(nn.Module):
    """Conv1dGLU: x + first half * sigmoid(second half) of a "same" convolution (at `conv1.conv`)."""

    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.channels = channels
        self.conv1 = nn.Module()
        self.conv1.conv = nn.Conv1d(channels, 2 * channels, kernel_size, padding=(kernel_size - 1) // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = torch.split(self.conv1.conv(x), self.channels, dim=1)
        return x + a * torch.sigmoid(b)


def mish(x: torch.Tensor) -> torch.Tensor:
    return x * torch.tanh(F.softplus(x))


class StyleAttention(nn.Module):
    """modules.MultiHeadAttention (w_qs, w_ks, w_vs, fc) with its residual; heads folded into the batch."""

    def __init__(self, heads: int, dim: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.temperature = math.sqrt(dim)
        self.w_qs = nn.Linear(dim, dim)
        self.w_ks = nn.Linear(dim, dim)
        self.w_vs = nn.Linear(dim, dim)
        self.fc = nn.Linear(dim, dim)

    def fold(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.heads, self.head_dim).permute(2, 0, 1, 3).contiguous().view(-1, n, self.head_dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x (B, T, dim); mask (B, T, T) True where a key is padding."""
        b, n, _ = x.shape
        q, k, v = self.fold(self.w_qs(x)), self.fold(self.w_ks(x)), self.fold(self.w_vs(x))
        scores = torch.bmm(q, k.transpose(1, 2)) / self.temperature
        scores = scores.masked_fill(mask.repeat(self.heads, 1, 1), -math.inf)
        out = torch.bmm(torch.softmax(scores, dim=2), v)
        out = out.view(self.heads, b, n, self.head_dim).permute(1, 2, 0, 3).contiguous().view(b, n, -1)
        return self.fc(out) + x


class MelStyleEncoder(nn.Module):
    def __init__(self, bins: int = STYLE_BINS, hidden: int = 128, out: int = 512, kernel_size: int = 5,
                 heads: int = 2):
        super().__init__()
        self.spectral = nn.ModuleList([Linear(bins, hidden), nn.Identity(), nn.Identity(), Linear(hidden, hidden)])
        self.temporal = nn.ModuleList([ConvGLU(hidden, kernel_size), ConvGLU(hidden, kernel_size)])
        self.slf_attn = StyleAttention(heads, hidden)
        self.fc = Linear(hidden, out)

    def forward(self, spec: torch.Tensor, spec_mask: torch.Tensor) -> torch.Tensor:
        """spec (B, bins, T), spec_mask (B, 1, T) of ones and zeros -> (B, out, 1)."""
        x = spec.transpose(1, 2)
        padding = (spec_mask.int() == 0).squeeze(1)  # (B, T)
        x = mish(self.spectral[3](mish(self.spectral[0](x))))
        x = self.temporal[1](self.temporal[0](x.transpose(1, 2))).transpose(1, 2)
        x = x.masked_fill(padding.unsqueeze(-1), 0)
        x = self.fc(self.slf_attn(x, padding.unsqueeze(1).expand(-1, x.shape[1], -1)))
        lengths = (~padding).sum(dim=1).unsqueeze(1)
        x = x.masked_fill(padding.unsqueeze(-1), 0)
        dtype = x.dtype
        return torch.div(x.float(), lengths.unsqueeze(1)).sum(dim=1).to(dtype).unsqueeze(-1)
