"""IndexTTS 2's conditioning Conformer: the wenet-derived encoder of upstream's indextts/gpt/conformer_encoder.py and
gpt/conformer/{attention,embedding,subsampling}.py, as UnifiedVoice v2 builds it (input_layer 'conv2d2', relative
positions, the convolution module, no macaron unless asked for).

    w2v-BERT features (B, T, 1024), lengths (B,)
      -> embed: Conv2d(1, D, 3, stride 2) + ReLU over (T, 1024) -> Linear(D * 511 -> D); x * sqrt(D); positions
         pe[:, :T'] (the plain sinusoid table, T' = (T - 1) // 2); the frame mask keeps frames 2, 4, ...
      -> blocks, pre-norm: [macaron FF x 0.5], attention, convolution module, FF (x 0.5 with macaron), norm_final
      -> after_norm
    -> (B, T', D) and the mask (B, 1, T')

The attention is handwritten (the seed's HANDWRITTEN kind, no accel site: the position term sits inside the softmax
and no fused kernel computes it): scores ((q + u)K^T + (q + v)P^T) / sqrt(d_k) with P = linear_pos(pe[:T']) and,
unlike CosyVoice's espnet attention, no rel_shift (upstream comments it out), masked with -inf, softmax, masked
to 0 (mizuoto/nn/wenet.py's RelPositionAttention, which both share). The operations and their layouts are
upstream's, so the floats are too.

The mask is upstream's ~make_pad_mask(lengths, T): frame t is valid where t < lengths[b]. infer_v2 passes
lengths = features.shape[-1] (1024, the width, not the frame count), which leaves every frame valid up to 1024
frames (`infer_v2_lengths`).

Module, parameter and buffer names are upstream's (gpt.pth's keys under `conditioning_encoder.` and
`emo_conditioning_encoder.`), including the persistent position table `embed.pos_enc.pe` (1, 5000, D).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import InputError
from mizuoto.nn.wenet import FeedForward, RelPositionAttention

MAX_POSITIONS = 5000  # PositionalEncoding's max_len: the table's length


@dataclass(frozen=True)
class ConformerConfig:
    input_size: int = 1024  # hard-coded in UnifiedVoice (w2v-BERT's width)
    output_size: int = 512
    attention_heads: int = 8
    linear_units: int = 2048
    num_blocks: int = 6
    input_layer: str = "conv2d2"
    kernel_size: int = 15  # cnn_module_kernel
    macaron: bool = False  # macaron_style: UnifiedVoice never sets it

    def __post_init__(self):
        if self.input_layer != "conv2d2":
            raise ValueError(f"IndexTTS's conditioning Conformer is ported with input_layer 'conv2d2' only, "
                             f"got {self.input_layer!r}")
        if self.output_size % self.attention_heads:
            raise ValueError(f"output_size {self.output_size} does not split into {self.attention_heads} heads")
        if self.kernel_size % 2 != 1:
            raise ValueError(f"the convolution module's kernel must be odd, got {self.kernel_size}")


def position_table(d_model: int, max_len: int = MAX_POSITIONS) -> torch.Tensor:
    """PositionalEncoding's `pe` (1, max_len, d_model): sin at even, cos at odd channels, built as upstream builds
    it (integer positions times the float frequencies)."""
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe.unsqueeze(0)


def valid_frames(lengths: torch.Tensor, frames: int) -> torch.Tensor:
    """~make_pad_mask(lengths, frames): (B, frames) True where t < lengths[b]; no host read."""
    return torch.arange(0, frames, dtype=torch.int64, device=lengths.device)[None, :] < lengths[:, None]


def infer_v2_lengths(features: torch.Tensor) -> torch.Tensor:
    """The lengths infer_v2 passes with features (B, T, 1024): its last size, 1024, for every row (upstream builds
    torch.tensor([features.shape[-1]]) for its batch of one). Every frame up to 1024 is then valid."""
    return torch.full((features.shape[0],), features.shape[-1], dtype=torch.int64, device=features.device)


class RelPositionalEncoding(nn.Module):
    """x * sqrt(d) and the table's first T rows as position embeddings (1, T, d); `reverse` is ignored upstream."""

    def __init__(self, d_model: int):
        super().__init__()
        self.xscale = math.sqrt(d_model)
        self.register_buffer("pe", position_table(d_model))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if x.size(1) >= self.pe.size(1):
            raise InputError(f"the conditioning features are too long: {x.size(1)} frames after subsampling, the "
                             f"position table holds fewer than {self.pe.size(1)}; use a shorter reference")
        return x * self.xscale, self.pe[:, : x.size(1)]


class Conv2dSubsampling2(nn.Module):
    """(B, T, idim) -> (B, (T - 1) // 2, odim): one 3x3 stride-2 convolution over (time, feature) and a Linear."""

    def __init__(self, idim: int, odim: int):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, odim, 3, 2), nn.ReLU())
        self.out = nn.Sequential(nn.Linear(odim * ((idim - 1) // 2), odim))
        self.pos_enc = RelPositionalEncoding(odim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.conv(x.unsqueeze(1))
        b, c, t, f = x.size()
        x = self.out(x.transpose(1, 2).contiguous().view(b, t, c * f))
        x, pos_emb = self.pos_enc(x)
        return x, pos_emb, mask[:, :, 2::2]


class ConvolutionModule(nn.Module):
    """Pointwise conv to 2C -> GLU -> depthwise conv (symmetric) -> LayerNorm over channels -> SiLU -> pointwise conv;
    padded frames are zeroed before and after."""

    def __init__(self, channels: int, kernel_size: int):
        super().__init__()
        self.pointwise_conv1 = nn.Conv1d(channels, 2 * channels, kernel_size=1)
        self.depthwise_conv = nn.Conv1d(channels, channels, kernel_size, padding=(kernel_size - 1) // 2,
                                        groups=channels)
        self.norm = nn.LayerNorm(channels)
        self.pointwise_conv2 = nn.Conv1d(channels, channels, kernel_size=1)
        self.activation = nn.SiLU()

    def forward(self, x: torch.Tensor, mask_pad: torch.Tensor) -> torch.Tensor:
        """x (B, T, C), mask_pad (B, 1, T) True = a real frame."""
        x = x.transpose(1, 2).masked_fill(~mask_pad, 0.0)  # keeps the transposed layout, as upstream's in-place fill
        x = F.glu(self.pointwise_conv1(x), dim=1)
        x = self.depthwise_conv(x)
        x = self.activation(self.norm(x.transpose(1, 2))).transpose(1, 2)
        x = self.pointwise_conv2(x).masked_fill(~mask_pad, 0.0)
        return x.transpose(1, 2)


class ConformerLayer(nn.Module):
    """ConformerEncoderLayer with normalize_before, no concat_after, the convolution module on."""

    def __init__(self, config: ConformerConfig):
        super().__init__()
        size = config.output_size
        self.self_attn = RelPositionAttention(size, config.attention_heads)
        self.feed_forward = FeedForward(size, config.linear_units)
        self.feed_forward_macaron = FeedForward(size, config.linear_units) if config.macaron else None
        self.conv_module = ConvolutionModule(size, config.kernel_size)
        self.norm_ff = nn.LayerNorm(size, eps=1e-5)
        self.norm_mha = nn.LayerNorm(size, eps=1e-5)
        if config.macaron:
            self.norm_ff_macaron = nn.LayerNorm(size, eps=1e-5)
        self.ff_scale = 0.5 if config.macaron else 1.0
        self.norm_conv = nn.LayerNorm(size, eps=1e-5)
        self.norm_final = nn.LayerNorm(size, eps=1e-5)

    def forward(self, x, mask, pos_emb, mask_pad):
        if self.feed_forward_macaron is not None:
            x = x + self.ff_scale * self.feed_forward_macaron(self.norm_ff_macaron(x))
        x = x + self.self_attn(self.norm_mha(x), mask, pos_emb)
        x = x + self.conv_module(self.norm_conv(x), mask_pad)
        x = x + self.ff_scale * self.feed_forward(self.norm_ff(x))
        return self.norm_final(x)


class ConformerEncoder(nn.Module):
    def __init__(self, config: ConformerConfig = ConformerConfig()):
        super().__init__()
        self.config = config
        self.embed = Conv2dSubsampling2(config.input_size, config.output_size)
        self.after_norm = nn.LayerNorm(config.output_size, eps=1e-5)
        self.encoders = nn.ModuleList(ConformerLayer(config) for _ in range(config.num_blocks))

    def forward(self, xs: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """xs (B, T, input_size), lengths (B,) -> (B, T', output_size) and the frame mask (B, 1, T'), T' =
        (T - 1) // 2."""
        width = self.config.input_size
        if xs.dim() != 3 or xs.size(-1) != width:
            raise InputError(f"the conditioning Conformer takes features (batch, frames, {width}), "
                             f"got {tuple(xs.shape)}")
        if xs.size(1) < 3:
            raise InputError(f"the conditioning features need at least 3 frames, got {xs.size(1)}")
        if lengths.dim() != 1 or lengths.size(0) != xs.size(0):
            raise InputError(f"the conditioning lengths must be one per row ({xs.size(0)}), "
                             f"got shape {tuple(lengths.shape)}")
        masks = valid_frames(lengths, xs.size(1)).unsqueeze(1)
        xs, pos_emb, masks = self.embed(xs, masks)
        for layer in self.encoders:
            xs = layer(xs, masks, pos_emb, masks)
        return self.after_norm(xs), masks
