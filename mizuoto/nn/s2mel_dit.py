"""The s2mel DiT: the velocity estimator of Seed-VC v1's flow-matching mel generator (and of IndexTTS 2's s2mel).

Exact to seed-vc 0.4.3 `modules/diffusion_transformer.py` (`DiT` and its gpt-fast `Transformer`; GPL-3.0 code,
read not copied), with the WaveNet tail of `mizuoto/nn/wavenet.py`. Parameter names are upstream's, so a
checkpoint's `cfm` state dict loads as it is (`mizuoto/nn/s2mel_cfm.py` loads whole checkpoints).

Data flow of `DiT.forward(x (B, C, T) noisy mel, prompt_x (B, C, T), x_lens (B,), t (B or 1,), style (B, S),
cond (B, T, content_dim))`:
  t -> sinusoid -> MLP: t1 (B, H), the conditioning of every adaptive norm;
  [x, prompt_x, cond_projection(cond), style repeated over T] -> cond_x_merge_linear -> (B, T, H);
  optionally a style token and a time token in front (`style_as_token`, `time_as_token`);
  the transformer: per block, AdaLN(RMSNorm) -> self-attention with interleaved RoPE and a key-padding mask
  from x_lens -> AdaLN(RMSNorm) -> SwiGLU; U-ViT skips (the first half of the blocks hands its outputs, last
  first, to the blocks after the middle one); a final AdaLN;
  optionally the long skip (transformer output with x -> skip_linear);
  tail 'wavenet': Linear -> WaveNet conditioned on a second time embedding, plus a residual projection ->
  adaLN-modulated LayerNorm -> Linear -> 1x1 conv to C channels; tail 'mlp': Linear-SiLU-Linear.

Upstream's arithmetic kept where it decides the bits: RMSNorm as `x * rsqrt(mean(x * x) + eps)`; the rotary
table computed once for 16384 positions by `torch.polar` on the CPU and cast to the weights' dtype; rotation
as real pairs `(a·cos - b·sin, b·cos + a·sin)`; SDPA with upstream's dense boolean mask `(B, 1, L, L)`.
Only inference is ported: no class dropout, no KV cache, no cross-attention (no preset uses them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn.ops import Linear
from mizuoto.nn.wavenet import WaveNet
from mizuoto.runtime import accel

# Bidirectional attention over every frame of a chunk, masked by key padding only: approximate kernels are
# acceptable under a fast policy (a diffusion step, not an autoregressive one).
ATTENTION = accel.Site("s2mel.dit")

ROPE_POSITIONS = 16384  # upstream builds the DiT with block_size 16384 (the preset's block_size is ignored)
CAUSAL_POSITIONS = 8192  # the causal table of setup_caches(max_seq_length=8192), as seed-vc's inference sets up
ROPE_BASE = 10000
NORM_EPS = 1e-5


# ---------------------------------------------------------------------------------------------------
# Configuration: the preset's model_params, as data


@dataclass(frozen=True)
class WaveNetConfig:
    """model_params.wavenet (p_dropout and style_condition do nothing at inference)."""

    hidden_dim: int
    num_layers: int
    kernel_size: int
    dilation_rate: int = 1


def gpt_fast_hidden(dim: int) -> int:
    """gpt-fast's ModelArgs default feed-forward width, which the DiTs and Seed-VC v2's AR inherit:
    int(2 · 4·dim / 3) rounded up to a multiple of 256."""
    wanted = int(2 * (4 * dim) / 3)
    return -(-wanted // 256) * 256


class DiTSizes:
    """What the DiT configurations (s2mel's and Seed-VC v2's) derive from hidden_dim, num_heads and the tokens."""

    hidden_dim: int
    num_heads: int
    time_as_token: bool
    style_as_token: bool

    @property
    def head_dim(self) -> int:
        return self.hidden_dim // self.num_heads

    @property
    def tokens(self) -> int:
        """Positions in front of the frames (a style and / or a time token)."""
        return int(self.style_as_token) + int(self.time_as_token)

    @property
    def feed_forward_dim(self) -> int:
        return gpt_fast_hidden(self.hidden_dim)


@dataclass(frozen=True)
class DiTConfig(DiTSizes):
    """The fields of model_params.DiT (and style_encoder.dim, wavenet) that the estimator reads."""

    hidden_dim: int
    num_heads: int
    depth: int
    in_channels: int
    content_dim: int
    style_dim: int
    style_condition: bool = True
    final_layer_type: str = "wavenet"
    long_skip_connection: bool = False
    uvit_skip_connection: bool = False
    time_as_token: bool = False
    style_as_token: bool = False
    is_causal: bool = False
    wavenet: WaveNetConfig | None = None

    def __post_init__(self):
        if self.hidden_dim % self.num_heads:
            raise CheckpointError(f"s2mel DiT: hidden_dim {self.hidden_dim} is not a multiple of num_heads "
                                  f"{self.num_heads}; check the model's config")
        if self.final_layer_type not in ("wavenet", "mlp"):
            raise CheckpointError(f"s2mel DiT: final_layer_type must be 'wavenet' or 'mlp', got "
                                  f"{self.final_layer_type!r}; check the model's config")
        if self.final_layer_type == "wavenet":
            if self.wavenet is None:
                raise CheckpointError("s2mel DiT: final_layer_type 'wavenet' needs a model_params.wavenet section")
            if self.time_as_token or self.style_as_token:  # upstream's WaveNet mask then has the tokens' length
                raise CheckpointError("s2mel DiT: the 'wavenet' final layer does not run with time_as_token or "
                                      "style_as_token (upstream fails on it too); check the model's config")


    @classmethod
    def from_model_params(cls, model_params: dict) -> "DiTConfig":
        """From a preset's (or a checkpoint config's) `model_params` mapping; flags upstream reads with
        `hasattr` default to False as there."""
        dit = _section(model_params, "DiT")
        style = _section(model_params, "style_encoder")
        wavenet = None
        if _field(dit, "DiT", "final_layer_type") == "wavenet":
            section = _section(model_params, "wavenet")
            if bool(_field(section, "wavenet", "style_condition")) != bool(_field(dit, "DiT", "style_condition")):
                raise CheckpointError("s2mel config: DiT.style_condition and wavenet.style_condition differ "
                                      "(upstream asserts they are equal); check the model's config")
            wavenet = WaveNetConfig(hidden_dim=int(_field(section, "wavenet", "hidden_dim")),
                                    num_layers=int(_field(section, "wavenet", "num_layers")),
                                    kernel_size=int(_field(section, "wavenet", "kernel_size")),
                                    dilation_rate=int(_field(section, "wavenet", "dilation_rate")))
        return cls(hidden_dim=int(_field(dit, "DiT", "hidden_dim")), num_heads=int(_field(dit, "DiT", "num_heads")),
                   depth=int(_field(dit, "DiT", "depth")), in_channels=int(_field(dit, "DiT", "in_channels")),
                   content_dim=int(_field(dit, "DiT", "content_dim")),
                   style_dim=int(_field(style, "style_encoder", "dim")),
                   style_condition=bool(_field(dit, "DiT", "style_condition")),
                   final_layer_type=str(_field(dit, "DiT", "final_layer_type")),
                   long_skip_connection=bool(_field(dit, "DiT", "long_skip_connection")),
                   uvit_skip_connection=bool(dit.get("uvit_skip_connection", False)),
                   time_as_token=bool(dit.get("time_as_token", False)),
                   style_as_token=bool(dit.get("style_as_token", False)),
                   is_causal=bool(_field(dit, "DiT", "is_causal")), wavenet=wavenet)


def _section(params: dict, name: str) -> dict:
    section = params.get(name) if isinstance(params, dict) else None
    if not isinstance(section, dict):
        raise CheckpointError(f"s2mel config: model_params has no {name!r} section; check the model's config")
    return section


def _field(section: dict, name: str, key: str):
    if key not in section:
        raise CheckpointError(f"s2mel config: model_params.{name} has no {key!r}; check the model's config")
    return section[key]


# ---------------------------------------------------------------------------------------------------
# Norms, rotary positions, the transformer


class RMSNorm(nn.Module):
    """gpt-fast's RMSNorm: in float32, `x * rsqrt(mean(x * x) + eps)`, back to the input dtype, times weight."""

    def __init__(self, dim: int, eps: float = NORM_EPS):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(torch.mean(x32 * x32, dim=-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class AdaptiveNorm(nn.Module):
    """RMSNorm whose scale and shift come from the conditioning (`project_layer`); plain when there is none."""

    def __init__(self, dim: int):
        super().__init__()
        self.project_layer = Linear(dim, 2 * dim)
        self.norm = RMSNorm(dim)
        self.dim = dim

    def forward(self, x: torch.Tensor, condition: torch.Tensor | None) -> torch.Tensor:
        if condition is None:
            return self.norm(x)
        scale, shift = torch.split(self.project_layer(condition), self.dim, dim=-1)
        return scale * self.norm(x) + shift


def rope_table(head_dim: int, positions: int = ROPE_POSITIONS, base: float = ROPE_BASE) -> torch.Tensor:
    """(positions, head_dim / 2, 2) cos and sin of every position's angles, float32, on the CPU, by upstream's
    operations (`torch.polar` of unit magnitudes; an int base raised to float exponents). `angles.cos()` and
    `.sin()` are not the same bits: measured, they move the s2mel references by up to 3e-6."""
    exponents = torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim
    inverse = 1.0 / (base ** exponents)
    angles = torch.outer(torch.arange(positions), inverse)
    rotations = torch.polar(torch.ones_like(angles), angles)
    return torch.stack([rotations.real, rotations.imag], dim=-1)


def rotate(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Interleaved RoPE on (B, L, heads, head_dim): channels (2i, 2i+1) rotated as a complex pair by the
    table's rows (L, head_dim / 2, 2), in float32."""
    pairs = x.float().reshape(*x.shape[:-1], -1, 2)
    cos_sin = table.view(1, pairs.size(1), 1, pairs.size(3), 2)
    real, imag = pairs[..., 0], pairs[..., 1]
    cos, sin = cos_sin[..., 0], cos_sin[..., 1]
    rotated = torch.stack([real * cos - imag * sin, imag * cos + real * sin], dim=-1)
    return rotated.flatten(3).type_as(x)


class Attention(nn.Module):
    """Self-attention with one fused q/k/v projection (every head its own keys: no GQA in any preset), through
    `site` (Seed-VC v2's DiT has the same attention under its own site)."""

    def __init__(self, dim: int, heads: int, site: accel.Site = ATTENTION):
        super().__init__()
        self.heads, self.head_dim, self.site = heads, dim // heads, site
        self.wqkv = Linear(dim, 3 * dim, bias=False)
        self.wo = Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor, table: torch.Tensor, mask: torch.Tensor, mask_info) -> torch.Tensor:
        batch, length, dim = x.shape
        q, k, v = self.wqkv(x).split([dim, dim, dim], dim=-1)
        q = rotate(q.view(batch, length, self.heads, self.head_dim), table).transpose(1, 2)
        k = rotate(k.view(batch, length, self.heads, self.head_dim), table).transpose(1, 2)
        v = v.view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        # Upstream's repeat_interleave (by 1 head here) hands SDPA k and v as new (B, heads, L, d) tensors and
        # q as the transposed view: the same layouts.
        k, v = k.contiguous(), v.contiguous()
        y = accel.attention(q, k, v, site=self.site, mask=mask, mask_info=mask_info)
        return self.wo(y.transpose(1, 2).contiguous().view(batch, length, dim))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) · w3 x)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = Linear(dim, hidden, bias=False)
        self.w3 = Linear(dim, hidden, bias=False)
        self.w2 = Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, config: DiTConfig):
        super().__init__()
        dim = config.hidden_dim
        self.attention = Attention(dim, config.num_heads)
        self.feed_forward = FeedForward(dim, config.feed_forward_dim)
        self.ffn_norm = AdaptiveNorm(dim)
        self.attention_norm = AdaptiveNorm(dim)
        if config.uvit_skip_connection:  # every block has one, though only the late half uses it
            self.skip_in_linear = Linear(2 * dim, dim)
        self.time_as_token = config.time_as_token

    def forward(self, x, condition, table, mask, mask_info, skip=None) -> torch.Tensor:
        if self.time_as_token:  # the time is a token: the blocks' norms are plain RMSNorms
            condition = None
        if skip is not None:
            x = self.skip_in_linear(torch.cat([x, skip], dim=-1))
        h = x + self.attention(self.attention_norm(x, condition), table, mask, mask_info)
        return h + self.feed_forward(self.ffn_norm(h, condition))


class Transformer(nn.Module):
    def __init__(self, config: DiTConfig):
        super().__init__()
        self.layers = nn.ModuleList(TransformerBlock(config) for _ in range(config.depth))
        self.norm = AdaptiveNorm(config.hidden_dim)
        self.register_buffer("freqs_cis", rope_table(config.head_dim), persistent=False)
        middle = config.depth // 2
        skips = config.uvit_skip_connection
        self.emits_skip = [skips and i < middle for i in range(config.depth)]
        self.takes_skip = [skips and i > middle for i in range(config.depth)]

    def forward(self, x: torch.Tensor, condition: torch.Tensor, mask: torch.Tensor, mask_info) -> torch.Tensor:
        # (the table row of position p is freqs_cis[p]: a slice is upstream's freqs_cis[input_pos])
        table = self.freqs_cis[: x.shape[1]]
        skips = []
        for layer, emits, takes in zip(self.layers, self.emits_skip, self.takes_skip, strict=True):
            x = layer(x, condition, table, mask, mask_info, skips.pop() if takes else None)
            if emits:
                skips.append(x)
        return self.norm(x, condition)


# ---------------------------------------------------------------------------------------------------
# Time embedding, final layer, the DiT


class TimestepEmbedder(nn.Module):
    """Sinusoidal embedding of t·1000 (cos half, then sin half) through a two-layer SiLU MLP."""

    def __init__(self, hidden: int, frequencies: int = 256):
        super().__init__()
        self.mlp = nn.Sequential(Linear(frequencies, hidden), nn.SiLU(), Linear(hidden, hidden))
        half = frequencies // 2
        # A buffer (a checkpoint carries it): upstream's value is the one loaded.
        self.register_buffer("freqs", torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        args = 1000 * t[:, None].float() * self.freqs[None]
        return self.mlp(torch.cat([torch.cos(args), torch.sin(args)], dim=-1))


class FinalLayer(nn.Module):
    """LayerNorm without affine, shifted and scaled from t (adaLN), then a Linear (weight-normed upstream)."""

    def __init__(self, hidden: int, out: int):
        super().__init__()
        self.hidden = hidden
        self.linear = Linear(hidden, out)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), Linear(hidden, 2 * hidden))

    def forward(self, x: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(condition).chunk(2, dim=1)
        x = F.layer_norm(x, (self.hidden,), eps=1e-6)
        return self.linear(x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1))


class DiT(nn.Module):
    """The estimator: velocity (B, C, T) of the noisy mel x at time t (see the module docstring)."""

    def __init__(self, config: DiTConfig):
        super().__init__()
        self.config = config
        hidden, channels = config.hidden_dim, config.in_channels
        self.transformer = Transformer(config)
        self.cond_projection = Linear(config.content_dim, hidden)
        self.t_embedder = TimestepEmbedder(hidden)
        if config.final_layer_type == "wavenet":
            wn = config.wavenet
            self.t_embedder2 = TimestepEmbedder(wn.hidden_dim)
            self.conv1 = Linear(hidden, wn.hidden_dim)
            self.conv2 = nn.Conv1d(wn.hidden_dim, channels, 1)
            self.wavenet = WaveNet(wn.hidden_dim, wn.kernel_size, wn.dilation_rate, wn.num_layers,
                                   gin_channels=wn.hidden_dim)
            self.final_layer = FinalLayer(wn.hidden_dim, wn.hidden_dim)
            self.res_projection = Linear(hidden, wn.hidden_dim)
        else:
            self.final_mlp = nn.Sequential(Linear(hidden, hidden), nn.SiLU(), Linear(hidden, channels))
        if config.long_skip_connection:
            self.skip_linear = Linear(hidden + channels, hidden)
        style_in_frames = config.style_dim if config.style_condition and not config.style_as_token else 0
        self.cond_x_merge_linear = Linear(hidden + 2 * channels + style_in_frames, hidden)
        if config.style_as_token:
            self.style_in = Linear(config.style_dim, hidden)

    def unused_checkpoint_keys(self) -> tuple[str, ...]:
        """Prefixes of what upstream's DiT holds but its inference never reads (dropped at load): the unused
        input embedders, the content mask embedding, the position buffer, and skip_linear without the long skip."""
        unused = ("x_embedder.", "cond_embedder.", "content_mask_embedder.", "input_pos")
        return unused if self.config.long_skip_connection else (*unused, "skip_linear.")

    def forward(self, x: torch.Tensor, prompt_x: torch.Tensor, x_lens: torch.Tensor, t: torch.Tensor,
                style: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        config = self.config
        frames = x.shape[2]
        length = frames + config.tokens
        limit = CAUSAL_POSITIONS if config.is_causal else ROPE_POSITIONS
        if length > limit:
            raise InputError(f"the s2mel DiT takes at most {limit - config.tokens} frames at once, got {frames}; "
                             f"use a shorter chunk")
        t1 = self.t_embedder(t)
        x = x.transpose(1, 2)
        merged = torch.cat([x, prompt_x.transpose(1, 2), self.cond_projection(cond)], dim=-1)
        if config.style_condition and not config.style_as_token:
            merged = torch.cat([merged, style[:, None, :].repeat(1, frames, 1)], dim=-1)
        h = self.cond_x_merge_linear(merged)
        if config.style_as_token:
            h = torch.cat([self.style_in(style).unsqueeze(1), h], dim=1)
        if config.time_as_token:
            h = torch.cat([t1.unsqueeze(1), h], dim=1)

        # Real keys: the first x_lens (+ tokens) positions. Upstream sizes this mask by max(x_lens) and needs
        # it to equal the length; it is sized by the length here (the same mask then, and no device wait).
        keys = torch.arange(length, device=x.device) < (x_lens.to(x.device) + config.tokens)[:, None]
        frame_mask = keys.unsqueeze(1)  # (B, 1, L), the WaveNet's mask too
        if config.is_causal:  # upstream's (1, 1, L, L) rows of a lower-triangular table
            mask = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()[None, None]
            mask_info = accel.MaskInfo.full(h.shape[0], length, device=x.device, causal=True)
        else:  # upstream's dense key-padding mask, (B, 1, L, L)
            mask = frame_mask[:, None, :].repeat(1, 1, length, 1)
            mask_info = accel.MaskInfo(keys.expand(h.shape[0], -1), padding="right")
        out = self.transformer(h, t1.unsqueeze(1), mask, mask_info)[:, config.tokens:]

        if config.long_skip_connection:
            out = self.skip_linear(torch.cat([out, x], dim=-1))
        if config.final_layer_type == "mlp":
            return self.final_mlp(out).transpose(1, 2)
        y = self.conv1(out).transpose(1, 2)
        t2 = self.t_embedder2(t)
        y = self.wavenet(y, frame_mask, g=t2.unsqueeze(2)).transpose(1, 2) + self.res_projection(out)
        return self.conv2(self.final_layer(y, t1).transpose(1, 2))
