"""The codec decoder's transformer: causal sliding-window attention with RoPE and LayerScale.

Upstream (`Qwen3TTSTokenizerV2DecoderTransformerModel`) is a transformers model run with its default
`sdpa` attention. With transformers 4.57.3 its mask is always materialised: the model passes position
ids and no attention mask, so `create_sliding_window_causal_mask` takes the positions for a possible
packed batch and may no longer skip the mask. Every call therefore hands SDPA a dense boolean mask of
shape (B, 1, T, T), True where key j <= query i and j > i - sliding_window, with `is_causal=False`,
even for a single frame or a chunk shorter than the window; key and value heads are repeated first
(transformers' sdpa path repeats them whenever a mask is given). Passing `is_causal=True` instead,
or a (1, 1, T, T) mask, is the same arithmetic on paper and may pick another kernel.

Positions start at 0 in every call: a chunk is decoded as a sequence of its own.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.nn.norms import RMSNorm
from mizuoto.nn.ops import Linear
from mizuoto.nn.qwen import transformers_sdpa
from mizuoto.nn.rotary import apply_rotary, cos_sin, inverse_frequencies
from mizuoto.runtime import accel
from mizuoto.runtime.accel import MaskInfo

# Exact attention only: the codec runs once per chunk, and an approximate kernel would change the audio.
SITE = accel.Site("qwen3tts.codec", reference=transformers_sdpa, approx_ok=False)

ACTIVATIONS = {"silu": F.silu, "swish": F.silu}


def sliding_window_mask(batch: int, length: int, window: int, device) -> torch.Tensor:
    """transformers' sdpa sliding-window causal mask for an uncached sequence: (B, 1, T, T) bool."""
    q = torch.arange(length, device=device)[:, None]
    k = torch.arange(length, device=device)[None, :]
    allowed = (k <= q) & (k > q - window)
    return allowed[None, None].expand(batch, 1, length, length).contiguous()


class LayerScale(nn.Module):
    """A learnt per-channel factor on a residual branch (its `scale` starts at 0.01 in training)."""

    def __init__(self, channels: int):
        super().__init__()
        self.scale = nn.Parameter(torch.full((channels,), 0.01))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class CodecAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, bias: bool):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.scaling = head_dim ** -0.5
        self.q_proj = Linear(hidden, heads * head_dim, bias=bias)
        self.k_proj = Linear(hidden, kv_heads * head_dim, bias=bias)
        self.v_proj = Linear(hidden, kv_heads * head_dim, bias=bias)
        self.o_proj = Linear(heads * head_dim, hidden, bias=bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                info: MaskInfo) -> torch.Tensor:
        b, n, _ = x.shape
        shape = (b, n, -1, self.head_dim)
        q = self.q_proj(x).view(shape).transpose(1, 2)
        k = self.k_proj(x).view(shape).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        groups = self.heads // self.kv_heads
        # The reference repeats the key/value heads itself (a mask is always given); fused kernels
        # may take them grouped.
        out = accel.attention(q, k, v, site=SITE, mask=mask, causal=False, scale=self.scaling,
                              enable_gqa=groups > 1, mask_info=info)
        out = out.transpose(1, 2).contiguous().reshape(b, n, -1).contiguous()
        return self.o_proj(out)


class CodecMlp(nn.Module):
    def __init__(self, hidden: int, intermediate: int, act):
        super().__init__()
        self.gate_proj = Linear(hidden, intermediate, bias=False)
        self.up_proj = Linear(hidden, intermediate, bias=False)
        self.down_proj = Linear(intermediate, hidden, bias=False)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class CodecLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        hidden = config.hidden_size
        self.self_attn = CodecAttention(hidden, config.num_attention_heads, config.num_key_value_heads,
                                        config.head_dim, config.attention_bias)
        self.mlp = CodecMlp(hidden, config.intermediate_size, ACTIVATIONS[config.hidden_act])
        self.input_layernorm = RMSNorm(hidden, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(hidden, config.rms_norm_eps)
        self.self_attn_layer_scale = LayerScale(hidden)
        self.mlp_layer_scale = LayerScale(hidden)

    def forward(self, x, cos, sin, mask, info):
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cos, sin, mask, info))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class CodecTransformer(nn.Module):
    """(B, T, latent) -> (B, T, latent): in-projection, the layers, a final RMSNorm, out-projection."""

    def __init__(self, config):
        super().__init__()
        self.window = config.sliding_window
        self.head_dim = config.head_dim
        self.theta = config.rope_theta
        self.layers = nn.ModuleList(CodecLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.input_proj = Linear(config.latent_dim, config.hidden_size)
        self.output_proj = Linear(config.hidden_size, config.latent_dim)
        self.register_buffer("inv_freq", inverse_frequencies(self.head_dim, self.theta), persistent=False)

    def reset_buffers(self) -> None:
        """Recompute the RoPE frequencies in float32 (after a meta build, or a cast of the model)."""
        self.inv_freq = inverse_frequencies(self.head_dim, self.theta).to(self.input_proj.weight.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.input_proj(x)
        b, n, _ = x.shape
        cos, sin = cos_sin(self.inv_freq, torch.arange(n, device=x.device)[None])
        cos, sin = cos.to(x.dtype)[:, None], sin.to(x.dtype)[:, None]
        mask = sliding_window_mask(b, n, self.window, x.device)
        info = MaskInfo.full(b, n, device=x.device, causal=True, window=self.window)
        for layer in self.layers:
            x = layer(x, cos, sin, mask, info)
        return self.output_proj(self.norm(x))
