"""The Mimi encoder's transformer (transformers 4.57.3 `MimiTransformerModel`, sdpa attention), which
runs over the 25 Hz latent frames between the convolutional encoder and the downsampling conv.

Each layer: LayerNorm -> attention (RoPE on q and k, causal) -> LayerScale -> + input, then LayerNorm ->
fc1 -> GELU (erf) -> fc2 -> LayerScale -> + input. Parameter names are transformers' own
(`layers.N.self_attn.q_proj.weight`, `layers.N.self_attn_layer_scale.scale`, ...).

The attention mask. `MimiTransformerModel` builds its mask with `create_causal_mask` (not the sliding
window variant), and in one call over a whole reference there is no cache for `sliding_window` to
limit, so every frame sees all the frames before it however long the reference: upstream attends
with plain causality, and so does this port. With the default sdpa implementation transformers then
drops the mask altogether and calls SDPA with `is_causal=True` (for more than one frame), which is the
reference of the `qwen3tts.mimi` site here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.nn.ops import Linear
from mizuoto.nn.rotary import apply_rotary, cos_sin, inverse_frequencies
from mizuoto.runtime import accel
from mizuoto.runtime.accel import MaskInfo

from .mimi_config import MimiEncoderConfig

SITE = accel.Site("qwen3tts.mimi", approx_ok=False)


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, Hk, T, D) -> (B, Hk * groups, T, D), as transformers repeats key/value heads before SDPA."""
    if groups == 1:
        return x
    b, h, n, d = x.shape
    return x[:, :, None].expand(b, h, groups, n, d).reshape(b, h * groups, n, d)


class LayerScale(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.scale = nn.Parameter(torch.empty(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class MimiAttention(nn.Module):
    def __init__(self, config: MimiEncoderConfig):
        super().__init__()
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = config.attention_head_dim
        bias = config.attention_bias
        self.q_proj = Linear(config.hidden_size, self.heads * self.head_dim, bias=bias)
        self.k_proj = Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.v_proj = Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=bias)
        self.o_proj = Linear(self.heads * self.head_dim, config.hidden_size, bias=bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask_info: MaskInfo) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        groups = self.heads // self.kv_heads
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)
        # transformers passes is_causal only for more than one query (one query sees its one key anyway).
        out = accel.attention(q, k, v, site=SITE, causal=n > 1, mask_info=mask_info)
        return self.o_proj(out.transpose(1, 2).contiguous().view(b, n, -1))


class MimiMLP(nn.Module):
    def __init__(self, config: MimiEncoderConfig):
        super().__init__()
        self.fc1 = Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.fc2 = Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class MimiTransformerLayer(nn.Module):
    def __init__(self, config: MimiEncoderConfig):
        super().__init__()
        self.self_attn = MimiAttention(config)
        self.mlp = MimiMLP(config)
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps)
        self.post_attention_layernorm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps)
        self.self_attn_layer_scale = LayerScale(config.hidden_size)
        self.mlp_layer_scale = LayerScale(config.hidden_size)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask_info: MaskInfo) -> torch.Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cos, sin, mask_info))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class MimiTransformer(nn.Module):
    """(B, T, hidden) latent frames -> (B, T, hidden), causal over the whole sequence."""

    def __init__(self, config: MimiEncoderConfig):
        super().__init__()
        self.layers = nn.ModuleList(MimiTransformerLayer(config) for _ in range(config.num_hidden_layers))
        self.head_dim, self.rope_theta = config.attention_head_dim, config.rope_theta
        self._inv_freq = None  # built on first use (a model may be built on the meta device)

    @property
    def inv_freq(self) -> torch.Tensor:
        # On the CPU, as upstream builds it, and out of the state dict, which has no such key.
        if self._inv_freq is None:
            with torch.device("cpu"):
                self._inv_freq = inverse_frequencies(self.head_dim, self.rope_theta)
        return self._inv_freq

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        positions = torch.arange(n, device=x.device)[None]  # cache_position.unsqueeze(0): one row for the batch
        cos, sin = cos_sin(self.inv_freq.to(x.device), positions)
        cos, sin = cos.to(x.dtype)[:, None], sin.to(x.dtype)[:, None]  # (1, 1, T, D) over batch and heads
        mask_info = MaskInfo.full(b, n, device=x.device, causal=True)
        for layer in self.layers:
            x = layer(x, cos, sin, mask_info)
        return x
