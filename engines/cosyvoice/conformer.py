"""CosyVoice 2's flow encoder: wenet's UpsampleConformerEncoder as the flow builds it (upstream's
cosyvoice/transformer/{upsample_encoder,encoder_layer,attention,embedding,subsampling}.py).

    speech-token embeddings (B, T, 512)
      -> embed: Linear + LayerNorm, x sqrt(d), espnet relative positions (2T - 1 of them)
      -> PreLookaheadLayer (3 tokens of look-ahead: the next chunk's first tokens when streaming)
      -> 6 Conformer layers (relative-position self-attention, feed-forward; no macaron, no convolution)
      -> Upsample1D x2 (nearest, then a causal 5-tap convolution) -> up_embed -> 4 more layers -> LayerNorm
    -> (B, 2T, 512)

The attention is handwritten (the seed's HANDWRITTEN kind): scores (q + u)K^T + rel_shift((q + v)P^T), over
sqrt(d_k), masked with -inf, softmax, masked to 0 (mizuoto/nn/wenet.py, shared with IndexTTS). It needs the
position term inside the softmax, so it is no accel site; the operations and their layouts are upstream's, so
the float results are too.

Module and parameter names are upstream's (the keys of flow.pt under `encoder.`). Sizes: the hidden width is the
checkpoint's; the pre-look-ahead and upsampling layers are 512 wide in upstream whatever the width (hard-coded
there), so an encoder narrower than 512 does not exist.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.nn.wenet import FeedForward, RelPositionAttention

from .masks import chunk_mask, valid_frames

MAX_POSITIONS = 5000  # EspnetRelPositionalEncoding's max_len: its table is built at this size


@dataclass(frozen=True)
class EncoderConfig:
    size: int = 512  # output_size = input_size (and 512 is hard-coded upstream in the look-ahead/upsampling)
    heads: int = 8
    linear_units: int = 2048
    blocks: int = 6
    up_blocks: int = 4  # hard-coded upstream
    static_chunk_size: int = 25  # tokens per chunk when streaming (x2 after upsampling)
    pre_lookahead: int = 3


def relative_positions(d_model: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """EspnetRelPositionalEncoding's table (1, 2 * 5000 - 1, d_model): positions 4999 .. -4999. Built at upstream's
    full size because a vectorised sin/cos rounds its tail elements differently: the same shape gives the same
    floats."""
    positive = torch.zeros(MAX_POSITIONS, d_model)
    negative = torch.zeros(MAX_POSITIONS, d_model)
    position = torch.arange(0, MAX_POSITIONS, dtype=torch.float32).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -(math.log(10000.0) / d_model))
    positive[:, 0::2] = torch.sin(position * div_term)
    positive[:, 1::2] = torch.cos(position * div_term)
    negative[:, 0::2] = torch.sin(-1 * position * div_term)
    negative[:, 1::2] = torch.cos(-1 * position * div_term)
    table = torch.cat([torch.flip(positive, [0]).unsqueeze(0), negative[1:].unsqueeze(0)], dim=1)
    return table.to(device=device, dtype=dtype)


class LinearEmbed(nn.Module):
    """LinearNoSubsampling with espnet relative positions: (B, T, D) -> x * sqrt(D) and the (1, 2T - 1, D)
    position embeddings centred on the sequence (the table is shared by both embeds of an encoder)."""

    def __init__(self, size: int):
        super().__init__()
        self.out = nn.Sequential(nn.Linear(size, size), nn.LayerNorm(size, eps=1e-5), nn.Dropout(0.0))
        self.xscale = math.sqrt(size)

    def forward(self, x: torch.Tensor, table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.out(x) * self.xscale
        size, centre = x.size(1), table.size(1) // 2
        return x, table[:, centre - size + 1: centre + size]


class ConformerLayer(nn.Module):
    """ConformerEncoderLayer as the flow builds it: pre-norm attention and feed-forward, nothing else."""

    def __init__(self, size: int, heads: int, units: int):
        super().__init__()
        self.self_attn = RelPositionAttention(size, heads)
        self.feed_forward = FeedForward(size, units)
        self.norm_ff = nn.LayerNorm(size, eps=1e-12)
        self.norm_mha = nn.LayerNorm(size, eps=1e-12)

    def forward(self, x, mask, pos_emb):
        x = x + self.self_attn(self.norm_mha(x), mask, pos_emb)
        return x + self.feed_forward(self.norm_ff(x))


class PreLookaheadLayer(nn.Module):
    """(B, T, C) -> (B, T, C): each token sees itself and the next `pre_lookahead` (conv1, zero past the end or the
    given look-ahead `context`), then two tokens back (a causal conv2), plus the input. CosyVoice 3's flow uses it
    alone (its `pre_lookahead_layer`)."""

    def __init__(self, in_channels: int, channels: int, pre_lookahead: int = 3):
        super().__init__()
        self.pre_lookahead = pre_lookahead
        self.conv1 = nn.Conv1d(in_channels, channels, kernel_size=pre_lookahead + 1)
        self.conv2 = nn.Conv1d(channels, in_channels, kernel_size=3)

    def forward(self, inputs: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        outputs = inputs.transpose(1, 2).contiguous()
        if context is None or context.size(1) == 0:
            outputs = F.pad(outputs, (0, self.pre_lookahead), mode="constant", value=0.0)
        else:
            if context.size(1) != self.pre_lookahead:
                raise ValueError(f"the look-ahead context must be {self.pre_lookahead} tokens, got {context.size(1)}")
            outputs = torch.concat([outputs, context.transpose(1, 2).contiguous()], dim=2)
        outputs = F.leaky_relu(self.conv1(outputs))
        outputs = F.pad(outputs, (self.conv2.kernel_size[0] - 1, 0), mode="constant", value=0.0)
        return self.conv2(outputs).transpose(1, 2).contiguous() + inputs


class Upsample(nn.Module):
    """The encoder's Upsample1D: nearest x2, then a 5-tap convolution over the past (left pad 4)."""

    def __init__(self, channels: int, stride: int = 2):
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv1d(channels, channels, stride * 2 + 1)

    def forward(self, x):
        x = F.interpolate(x, scale_factor=float(self.stride), mode="nearest")
        return self.conv(F.pad(x, (self.stride * 2, 0), value=0.0))


class UpsampleConformerEncoder(nn.Module):
    def __init__(self, config: EncoderConfig = EncoderConfig()):
        super().__init__()
        self.config = config
        size = config.size
        self.embed = LinearEmbed(size)
        self.after_norm = nn.LayerNorm(size, eps=1e-5)
        self.pre_lookahead_layer = PreLookaheadLayer(size, size, config.pre_lookahead)
        self.encoders = nn.ModuleList(ConformerLayer(size, config.heads, config.linear_units)
                                      for _ in range(config.blocks))
        self.up_layer = Upsample(size)
        self.up_embed = LinearEmbed(size)
        self.up_encoders = nn.ModuleList(ConformerLayer(size, config.heads, config.linear_units)
                                         for _ in range(config.up_blocks))
        self._table: torch.Tensor | None = None

    def positions(self, like: torch.Tensor) -> torch.Tensor:
        table = self._table
        if table is None or table.device != like.device or table.dtype != like.dtype:
            table = self._table = relative_positions(self.config.size, like.device, like.dtype)
        return table

    def forward(self, xs: torch.Tensor, xs_lens: torch.Tensor, context: torch.Tensor | None = None,
                streaming: bool = False) -> torch.Tensor:
        """xs (B, T, size) embedded tokens with lengths xs_lens (B,); `context` (1, 3, size): the look-ahead tokens
        of a streaming chunk that is not the last. -> (B, 2T, size). Streaming: block-causal chunks of
        `static_chunk_size` tokens (twice that after upsampling), as upstream's streaming=True."""
        table = self.positions(xs)
        frames = xs.size(1)
        keys = valid_frames(xs_lens, frames).unsqueeze(1)
        xs, pos_emb = self.embed(xs, table)
        if context is not None and context.size(1) != 0:
            context, _ = self.embed(context, table)
        chunk = self.config.static_chunk_size if streaming else 0
        masks = chunk_mask(keys, chunk)
        xs = self.pre_lookahead_layer(xs, context)
        for layer in self.encoders:
            xs = layer(xs, masks, pos_emb)
        xs = self.up_layer(xs.transpose(1, 2).contiguous()).transpose(1, 2).contiguous()
        keys = valid_frames(xs_lens * self.up_layer.stride, xs.size(1)).unsqueeze(1)
        xs, pos_emb = self.up_embed(xs, table)
        masks = chunk_mask(keys, chunk * self.up_layer.stride)
        for layer in self.up_encoders:
            xs = layer(xs, masks, pos_emb)
        return self.after_norm(xs)
