"""wenet's Conformer parts that CosyVoice's flow encoder and IndexTTS's conditioning encoders both use.

RelPositionAttention is wenet's RelPositionMultiHeadedAttention (inference, no cache), a handwritten attention kind
(no accel Site, as the seed lists it): scores = ((q + u) K^T + (q + v) P^T) / sqrt(d_k) over the projected
position table P, -inf where masked, softmax, 0 where masked. Two position tables reach it:
  - espnet's relative table of 2T - 1 positions (CosyVoice's EspnetRelPositionalEncoding): the (q + v) P^T term is
    then rel_shift-ed onto the keys;
  - a table of T positions (IndexTTS's RelPositionalEncoding, wenet's legacy one): the term is used as it is,
    without rel_shift, as upstream's code does.
FeedForward is wenet's PositionwiseFeedForward with SiLU ("swish"). Parameter names are upstream's.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class RelPositionAttention(nn.Module):
    """wenet's RelPositionMultiHeadedAttention (inference, no cache)."""

    def __init__(self, size: int, heads: int):
        super().__init__()
        self.h, self.d_k = heads, size // heads
        self.linear_q = nn.Linear(size, size)
        self.linear_k = nn.Linear(size, size)
        self.linear_v = nn.Linear(size, size)
        self.linear_out = nn.Linear(size, size)
        self.linear_pos = nn.Linear(size, size, bias=False)
        self.pos_bias_u = nn.Parameter(torch.zeros(heads, self.d_k))
        self.pos_bias_v = nn.Parameter(torch.zeros(heads, self.d_k))

    @staticmethod
    def rel_shift(x: torch.Tensor) -> torch.Tensor:
        """(B, H, T, 2T - 1) scores against positions T-1 .. -(T-1) -> (B, H, T, T) against each key."""
        b, h, t, p = x.shape
        padded = torch.cat([torch.zeros((b, h, t, 1), device=x.device, dtype=x.dtype), x], dim=-1)
        return padded.view(b, h, p + 1, t)[:, :, 1:].view_as(x)[:, :, :, : p // 2 + 1]

    def forward(self, x: torch.Tensor, mask: torch.Tensor, pos_emb: torch.Tensor) -> torch.Tensor:
        """x (B, T, size); mask (B, 1 or T, T) True = may attend; pos_emb (1, 2T - 1, size) (rel_shift applied)
        or (1, T, size) (used as it is)."""
        batch = x.size(0)
        q = self.linear_q(x).view(batch, -1, self.h, self.d_k)  # (B, T, H, d_k): upstream adds the biases here
        k = self.linear_k(x).view(batch, -1, self.h, self.d_k).transpose(1, 2)
        v = self.linear_v(x).view(batch, -1, self.h, self.d_k).transpose(1, 2)
        p = self.linear_pos(pos_emb).view(pos_emb.size(0), -1, self.h, self.d_k).transpose(1, 2)
        matrix_ac = torch.matmul((q + self.pos_bias_u).transpose(1, 2), k.transpose(-2, -1))
        matrix_bd = torch.matmul((q + self.pos_bias_v).transpose(1, 2), p.transpose(-2, -1))
        if matrix_ac.shape != matrix_bd.shape:
            matrix_bd = self.rel_shift(matrix_bd)
        scores = (matrix_ac + matrix_bd) / math.sqrt(self.d_k)
        blocked = mask.unsqueeze(1).eq(0)[:, :, :, : scores.size(-1)]
        attn = torch.softmax(scores.masked_fill(blocked, -float("inf")), dim=-1).masked_fill(blocked, 0.0)
        out = torch.matmul(attn, v).transpose(1, 2).contiguous().view(batch, -1, self.h * self.d_k)
        return self.linear_out(out)


class FeedForward(nn.Module):
    def __init__(self, size: int, units: int):
        super().__init__()
        self.w_1 = nn.Linear(size, units)
        self.activation = nn.SiLU()  # wenet's "swish"
        self.w_2 = nn.Linear(units, size)

    def forward(self, x):
        return self.w_2(self.activation(self.w_1(x)))
