"""The VITS transformer encoder of GPT-SoVITS's SoVITS (`module/attentions.py::Encoder` at 48b1a01): post-norm
layers of relative-position self-attention (window 4, one key and one value table shared by the heads) and a
convolutional FFN, on (B, C, T) tensors with channel-wise LayerNorms; and the plain cross-attention MRTE uses.

The relative attention is handwritten upstream and stays handwritten here (its logits add rel-key scores, its
output adds the probabilities times rel-values: no fused kernel computes that):

    scores = (q / sqrt(d)) @ k^T + rel_to_abs((q / sqrt(d)) @ E_k^T)      masked_fill(mask == 0, -1e4)
    out    = softmax(scores) @ v + abs_to_rel(softmax(scores)) @ E_v

The cross-attention (no window) goes through the site `gpt_sovits.mrte`, whose reference is that same
arithmetic (q / sqrt(d) before the product, -1e4 where masked: it differs from SDPA's -inf only on a fully
masked row).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.runtime import accel


def vits_attention(q, k, v, mask, causal, scale, enable_gqa, dropout_p):
    """MultiHeadAttention.attention without relative positions, as an attention site's reference: q, k, v
    (B, H, L, D) (upstream's views), `mask` bool (True: attend) or None."""
    scores = torch.matmul(q / math.sqrt(q.shape[-1]), k.transpose(-2, -1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e4)
    return torch.matmul(F.softmax(scores, dim=-1), v)


MRTE_SITE = accel.Site("gpt_sovits.mrte", reference=vits_attention)


class ChannelLayerNorm(nn.Module):
    """modules.LayerNorm: F.layer_norm over the channels of (B, C, T) (gamma, beta)."""

    def __init__(self, channels: int, eps: float = 1e-5):
        super().__init__()
        self.channels, self.eps = channels, eps
        self.gamma = nn.Parameter(torch.ones(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.layer_norm(x.transpose(1, -1), (self.channels,), self.gamma, self.beta, self.eps)
        return x.transpose(1, -1)


class MultiHeadAttention(nn.Module):
    """attentions.MultiHeadAttention: 1x1 convolutions for q, k, v and out; `window` None for cross-attention."""

    def __init__(self, channels: int, out_channels: int, heads: int, window: int | None = None):
        super().__init__()
        if channels % heads:
            raise ValueError(f"{channels} channels do not split into {heads} heads")
        self.heads, self.window, self.head_dim = heads, window, channels // heads
        self.conv_q = nn.Conv1d(channels, channels, 1)
        self.conv_k = nn.Conv1d(channels, channels, 1)
        self.conv_v = nn.Conv1d(channels, channels, 1)
        self.conv_o = nn.Conv1d(channels, out_channels, 1)
        if window is not None:  # heads_share: one table for every head
            self.emb_rel_k = nn.Parameter(torch.zeros(1, 2 * window + 1, self.head_dim))
            self.emb_rel_v = nn.Parameter(torch.zeros(1, 2 * window + 1, self.head_dim))

    def forward(self, x: torch.Tensor, c: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x (B, C, Tq) attends to c (B, C, Tk) under `mask` (B, 1, Tq, Tk), 1 where allowed."""
        q, k, v = self.conv_q(x), self.conv_k(c), self.conv_v(c)
        b, d, t_s, t_t = (*k.size(), q.size(2))
        q = q.view(b, self.heads, self.head_dim, t_t).transpose(2, 3)
        k = k.view(b, self.heads, self.head_dim, t_s).transpose(2, 3)
        v = v.view(b, self.heads, self.head_dim, t_s).transpose(2, 3)
        if self.window is None:
            out = accel.attention(q, k, v, site=MRTE_SITE, mask=mask != 0)
        else:
            out = self.relative_attention(q, k, v, mask)
        return self.conv_o(out.transpose(2, 3).contiguous().view(b, d, t_t))

    def relative_attention(self, q, k, v, mask) -> torch.Tensor:
        length = k.shape[2]
        if q.shape[2] != length:
            raise ValueError("relative attention is only available for self-attention")
        scaled = q / math.sqrt(self.head_dim)
        scores = torch.matmul(scaled, k.transpose(-2, -1))
        rel_keys = self.relative_embeddings(self.emb_rel_k, length)
        scores = scores + relative_to_absolute(torch.matmul(scaled, rel_keys.unsqueeze(0).transpose(-2, -1)))
        scores = scores.masked_fill(mask == 0, -1e4)
        p = F.softmax(scores, dim=-1)
        out = torch.matmul(p, v)
        rel_values = self.relative_embeddings(self.emb_rel_v, length)
        return out + torch.matmul(absolute_to_relative(p), rel_values.unsqueeze(0))

    def relative_embeddings(self, table: torch.Tensor, length: int) -> torch.Tensor:
        """The 2 * length - 1 rows of `table` for relative offsets -(length-1)..length-1 (zeros beyond the
        window), padded first and sliced after, as upstream does."""
        window = self.window
        pad = max(length - (window + 1), 0)
        start = max((window + 1) - length, 0)
        if pad > 0:
            table = F.pad(table, [0, 0, pad, pad, 0, 0])
        return table[:, start:start + 2 * length - 1]


def relative_to_absolute(x: torch.Tensor) -> torch.Tensor:
    """(B, H, L, 2L-1) relative logits -> (B, H, L, L), by upstream's pad-and-reshape skew."""
    batch, heads, length, _ = x.size()
    x = F.pad(x, [0, 1, 0, 0, 0, 0, 0, 0])
    flat = F.pad(x.view([batch, heads, length * 2 * length]), [0, length - 1, 0, 0, 0, 0])
    return flat.view([batch, heads, length + 1, 2 * length - 1])[:, :, :length, length - 1:]


def absolute_to_relative(x: torch.Tensor) -> torch.Tensor:
    """(B, H, L, L) -> (B, H, L, 2L-1), the inverse skew."""
    batch, heads, length, _ = x.size()
    x = F.pad(x, [0, length - 1, 0, 0, 0, 0, 0, 0])
    flat = F.pad(x.view([batch, heads, length ** 2 + length * (length - 1)]), [length, 0, 0, 0, 0, 0])
    return flat.view([batch, heads, length, 2 * length])[:, :, :, 1:]


class FFN(nn.Module):
    """attentions.FFN (ReLU, "same" padding by F.pad: (k-1)//2 left, k//2 right)."""

    def __init__(self, channels: int, filter_channels: int, kernel_size: int):
        super().__init__()
        self.kernel_size = kernel_size
        self.conv_1 = nn.Conv1d(channels, filter_channels, kernel_size)
        self.conv_2 = nn.Conv1d(filter_channels, channels, kernel_size)

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        if self.kernel_size == 1:
            return x
        return F.pad(x, [(self.kernel_size - 1) // 2, self.kernel_size // 2, 0, 0, 0, 0])

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv_1(self.pad(x * mask)))
        return self.conv_2(self.pad(x * mask)) * mask


class Encoder(nn.Module):
    """attentions.Encoder (window 4, no flow conditioning)."""

    def __init__(self, channels: int, filter_channels: int, heads: int, layers: int, kernel_size: int,
                 window: int = 4):
        super().__init__()
        self.attn_layers = nn.ModuleList(MultiHeadAttention(channels, channels, heads, window) for _ in range(layers))
        self.norm_layers_1 = nn.ModuleList(ChannelLayerNorm(channels) for _ in range(layers))
        self.ffn_layers = nn.ModuleList(FFN(channels, filter_channels, kernel_size) for _ in range(layers))
        self.norm_layers_2 = nn.ModuleList(ChannelLayerNorm(channels) for _ in range(layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        attn_mask = mask.unsqueeze(2) * mask.unsqueeze(-1)
        x = x * mask
        for attn, norm1, ffn, norm2 in zip(self.attn_layers, self.norm_layers_1, self.ffn_layers,
                                           self.norm_layers_2, strict=True):
            x = norm1(x + attn(x, x, attn_mask))
            x = norm2(x + ffn(x, mask))
        return x * mask
