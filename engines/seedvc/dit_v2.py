"""Seed-VC v2's DiT: the velocity estimator of its flow-matching mel generator.

Exact to seed-vc 0.4.3 `modules/v2/dit_wrapper.py::DiT` and `modules/v2/dit_model.py` (a gpt-fast `Transformer`;
GPL-3.0 code, read not copied), as configs/v2/vc_wrapper.yaml's `cfm.estimator` section builds it. Parameter and
buffer names are upstream's, so a checkpoint's `net.cfm` state dict loads as it is (engines/seedvc/cfm_v2.py).

Data flow of `DiTV2.forward(x (B, C, T) noisy mel, prompt_x (B, C, T), x_lens (B,), t (B,), style (B, S),
cond (B, T, content_dim))`:
  t -> sinusoid of t·1000 -> MLP: t1 (B, H), the conditioning of every adaptive norm;
  [x, prompt_x, cond_projection(cond)] -> cond_x_merge_linear -> (B, T, H);
  a style token (style_in(style)) and then a time token (t1) in front when `style_as_token` / `time_as_token`:
  style is only ever a token in v2 (without the flag it conditions nothing);
  the transformer: per block, AdaLN(RMSNorm) with six modulations from t1 (shift, scale, gate for attention and
  for the MLP) -> self-attention with interleaved RoPE and a key-padding mask from x_lens -> gated residual ->
  RMSNorm modulated by the MLP's shift and scale -> SwiGLU -> gated residual; a final AdaLN (scale, shift);
  the tokens dropped -> final_mlp (Linear-SiLU-Linear) -> (B, C, T).

Where v2 differs from the v1 DiT (mizuoto/nn/s2mel_dit.py, whose RMSNorm, rotation, SwiGLU and time embedder are
reused here because they are the same computation):
- the modulation: `norm(x) * (1 + scale) + shift` with gates on both residuals (v1: `scale * norm(x) + shift`),
  and the blocks keep their time conditioning with `time_as_token` (v1 drops it);
- the rotary table is a persistent buffer `transformer.freqs_cis` of `block_size` rows in **bfloat16**
  (upstream's `precompute_freqs_cis` default dtype), the checkpoint's values loaded over it; the rotation then
  multiplies float32 pairs by bfloat16 cos/sin (promoted: the bf16-rounded values in float32 arithmetic);
- `uvit_skip_connection` builds nothing and changes nothing: upstream's v2 Transformer lists the skip layers but
  its forward never uses them (no skip weights exist in its state dict either);
- upstream's persistent (block_size, block_size) `causal_mask` buffer is never read (the DiT is bidirectional):
  it is not a buffer here, and a checkpoint may or may not hold it.
Only inference is ported: no class dropout (upstream's `self.training` draws), no dropout, no x_embedder (upstream
builds a weight-normed one its forward never calls; its keys are ignored at load).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn.ops import Linear
from mizuoto.nn.s2mel_dit import Attention, DiTSizes, FeedForward, RMSNorm, TimestepEmbedder, rope_table
from mizuoto.runtime import accel

# Bidirectional attention over the frames of one chunk (and its tokens), masked by key padding only: approximate
# kernels are acceptable under a fast policy (a diffusion step, not an autoregressive one).
ATTENTION = accel.Site("seedvc.dit_v2")

# What of upstream's CFM state dict the port never reads (prefixes under `estimator.`): the unused input embedder
# and the causal table.
UNUSED_KEYS = ("x_embedder.", "transformer.causal_mask")


@dataclass(frozen=True)
class DiTV2Config(DiTSizes):
    """The fields of vc_wrapper.yaml's `cfm.estimator` section that inference reads (class_dropout_prob,
    dropout_rate and attn_dropout_rate only act in training)."""

    hidden_dim: int
    num_heads: int
    depth: int
    in_channels: int
    content_dim: int
    style_dim: int
    block_size: int = 8192
    time_as_token: bool = True
    style_as_token: bool = True
    uvit_skip_connection: bool = False  # accepted and recorded; upstream's v2 forward ignores it

    def __post_init__(self):
        for name in ("hidden_dim", "num_heads", "depth", "in_channels", "content_dim", "style_dim", "block_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CheckpointError(f"Seed-VC v2 cfm.estimator: {name} must be a positive whole number, got "
                                      f"{value!r}; check the model's vc_wrapper.yaml")
        if self.hidden_dim % self.num_heads or (self.hidden_dim // self.num_heads) % 2:
            raise CheckpointError(f"Seed-VC v2 cfm.estimator: hidden_dim {self.hidden_dim} must split into "
                                  f"{self.num_heads} heads of an even size; check the model's vc_wrapper.yaml")

    @classmethod
    def from_section(cls, section: dict) -> "DiTV2Config":
        """From vc_wrapper.yaml's `cfm.estimator` mapping (upstream's DiT takes every field without a default:
        a missing one fails its hydra build too)."""
        if not isinstance(section, dict):
            raise CheckpointError("Seed-VC v2 config: cfm.estimator is not a mapping; check the model's "
                                  "vc_wrapper.yaml")
        fields = {"hidden_dim": "hidden_dim", "num_heads": "num_heads", "depth": "depth",
                  "in_channels": "in_channels", "content_dim": "content_dim", "style_dim": "style_encoder_dim",
                  "block_size": "block_size", "time_as_token": "time_as_token", "style_as_token": "style_as_token",
                  "uvit_skip_connection": "uvit_skip_connection"}
        missing = [key for key in fields.values() if key not in section]
        if missing:
            raise CheckpointError(f"Seed-VC v2 config: cfm.estimator has no {missing[0]!r}; check the model's "
                                  f"vc_wrapper.yaml")
        values = {ours: section[theirs] for ours, theirs in fields.items()}
        for flag in ("time_as_token", "style_as_token", "uvit_skip_connection"):
            values[flag] = bool(values[flag])
        return cls(**values)


# ---------------------------------------------------------------------------------------------------
# The transformer


class AdaptiveNorm(nn.Module):
    """RMSNorm modulated by the conditioning: `linear(silu(c))` chunked into `chunks` pieces; the first two are
    what the norm takes (upstream's AdaptiveLayerNorm: shift, scale, then the gates and the MLP's shift and scale;
    its AdaptiveLayerNormFinal: scale, shift)."""

    def __init__(self, dim: int, chunks: int):
        super().__init__()
        self.linear = Linear(dim, chunks * dim)
        self.norm = RMSNorm(dim)
        self.chunks = chunks

    def modulations(self, condition: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.chunk(self.linear(F.silu(condition)), self.chunks, dim=-1)


class TransformerBlock(nn.Module):
    def __init__(self, config: DiTV2Config):
        super().__init__()
        dim = config.hidden_dim
        self.attention = Attention(dim, config.num_heads, ATTENTION)
        self.feed_forward = FeedForward(dim, config.feed_forward_dim)
        self.ffn_norm = RMSNorm(dim)
        self.attention_norm = AdaptiveNorm(dim, 6)

    def forward(self, x, condition, table, mask, mask_info) -> torch.Tensor:
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.attention_norm.modulations(condition)
        normed = self.attention_norm.norm(x) * (1 + scale_msa) + shift_msa
        x = x + gate_msa * self.attention(normed, table, mask, mask_info)
        normed = self.ffn_norm(x) * (1 + scale_mlp) + shift_mlp
        return x + gate_mlp * self.feed_forward(normed)


class Transformer(nn.Module):
    def __init__(self, config: DiTV2Config):
        super().__init__()
        self.layers = nn.ModuleList(TransformerBlock(config) for _ in range(config.depth))
        self.norm = AdaptiveNorm(config.hidden_dim, 2)
        # upstream's precompute_freqs_cis: the float32 table of rope_table, stored as bfloat16 (its default dtype);
        # persistent, so a checkpoint's own values replace it at load
        self.register_buffer("freqs_cis", rope_table(config.head_dim, config.block_size).to(torch.bfloat16))

    def forward(self, x: torch.Tensor, condition: torch.Tensor, mask: torch.Tensor, mask_info) -> torch.Tensor:
        # (row p of the table is position p: a slice is upstream's freqs_cis[arange(L)])
        table = self.freqs_cis[: x.shape[1]]
        for layer in self.layers:
            x = layer(x, condition, table, mask, mask_info)
        scale, shift = self.norm.modulations(condition)
        return self.norm.norm(x) * (1 + scale) + shift


# ---------------------------------------------------------------------------------------------------
# The DiT


class DiTV2(nn.Module):
    """The estimator: velocity (B, C, T) of the noisy mel x at time t (see the module docstring)."""

    def __init__(self, config: DiTV2Config):
        super().__init__()
        self.config = config
        hidden, channels = config.hidden_dim, config.in_channels
        self.in_channels = channels
        self.transformer = Transformer(config)
        self.cond_projection = Linear(config.content_dim, hidden)
        self.t_embedder = TimestepEmbedder(hidden)  # its `freqs` buffer is ours (upstream computes it per call)
        self.final_mlp = nn.Sequential(Linear(hidden, hidden), nn.SiLU(), Linear(hidden, channels))
        self.cond_x_merge_linear = Linear(hidden + 2 * channels, hidden)
        self.style_in = Linear(config.style_dim, hidden)  # in every checkpoint; read only with style_as_token

    def forward(self, x: torch.Tensor, prompt_x: torch.Tensor, x_lens: torch.Tensor, t: torch.Tensor,
                style: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        config = self.config
        length = x.shape[2] + config.tokens
        if length > config.block_size:  # upstream's freqs_cis[input_pos] would index past its table
            raise InputError(f"the Seed-VC v2 DiT takes at most {config.block_size - config.tokens} frames at once "
                             f"(block_size {config.block_size}), got {x.shape[2]}; use a shorter chunk")
        t1 = self.t_embedder(t)
        h = self.cond_x_merge_linear(torch.cat([x.transpose(1, 2), prompt_x.transpose(1, 2),
                                                self.cond_projection(cond)], dim=-1))
        if config.style_as_token:
            h = torch.cat([self.style_in(style).unsqueeze(1), h], dim=1)
        if config.time_as_token:
            h = torch.cat([t1.unsqueeze(1), h], dim=1)
        # upstream's sequence_mask(x_lens + tokens, max_length=L), as a dense (B, 1, L, L) key-padding mask
        lengths = x_lens.to(x.device) + config.tokens
        keys = torch.arange(length, dtype=lengths.dtype, device=x.device) < lengths[:, None]
        mask = keys[:, None, None, :].repeat(1, 1, length, 1)
        mask_info = accel.MaskInfo(keys.expand(h.shape[0], -1), padding="right")
        out = self.transformer(h, t1.unsqueeze(1), mask, mask_info)[:, config.tokens:]
        return self.final_mlp(out).transpose(1, 2)
