"""The shared Qwen decoder's step on the CPU, without the per-call machinery of modules and graph segments.

On the CPU, where nothing is captured, most of a small decoder's step goes to Python around the kernels:
module calls, LayerSteps' segment plumbing, per-call checks and lookups. `LeanDecoder` runs the same
kernels in the same order as QwenDecoder's layers (qwen.py: QwenLayer.before, attend, after, and
finish; QwenAttention.project's joint q/k norm and rotation), on weights gathered once into plain
tuples, so the results are the same bits. Engines on the shared decoder use it for CPU inference
(`usable`); CUDA keeps runtime.graphs.DecoderSteps (with or without graphs), where the q/k norm and
rotation stay separate as QwenAttention does it. Attention still goes through each decoder's accel site.

Build one per request (the weights are read from the modules then, so a reload between requests is seen).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.runtime import accel

from .norms import normalise
from .qwen import KVCache, Masked, QwenDecoder, fused_norm_exact


def usable(module: nn.Module) -> bool:
    """The lean steps serve CPU inference: every weight and buffer of `module` on the CPU, autograd off."""
    return not torch.is_grad_enabled() and all(t.device.type == "cpu" for t in (*module.parameters(),
                                                                                 *module.buffers()))


class _Norm(NamedTuple):
    weight: torch.Tensor
    eps: float
    fused: bool  # F.rms_norm gives the upcast norm's bits here (QwenDecoder's rms_norm decides the same)


def _norm(norm, x_like: torch.Tensor) -> _Norm:
    size = norm.weight.shape[-1]
    device = norm.weight.device
    return _Norm(norm.weight, norm.eps, fused_norm_exact(device.type, device.index, x_like.dtype, size, norm.eps))


def _apply_norm(n: _Norm, x: torch.Tensor) -> torch.Tensor:
    """QwenDecoder's rms_norm(norm, x)."""
    if n.fused:
        return F.rms_norm(x, (x.shape[-1],), n.weight, n.eps)
    return n.weight * normalise(x, n.eps)


class _Layer(NamedTuple):
    index: int
    site: accel.Site
    input_norm: _Norm
    post_norm: _Norm
    projections: tuple  # q, k, v (see _linear), or (stacked,) when fused
    sizes: tuple[int, int, int]  # q, k, v widths
    qk_weight: torch.Tensor | None  # q_norm's weight per query head, k_norm's per key head (H + Hk, D)
    qk_eps: float
    qk_fused: bool
    heads: int
    kv_heads: int
    head_dim: int
    scaling: float
    o_proj: tuple  # see _linear
    mlp: tuple  # (gate, up), or (stacked,) when fused
    down: tuple


def linear_parts(linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight.t(), bias): F.linear of a 2-D input is mm(x, weight.t()), or addmm(bias, x, weight.t())
    with a bias; calling those directly skips linear's and matmul's dispatch (a view, no copy)."""
    return linear.weight.t(), linear.bias


def mm(x: torch.Tensor, linear: tuple) -> torch.Tensor:
    weight_t, bias = linear
    return torch.mm(x, weight_t) if bias is None else torch.addmm(bias, x, weight_t)


def _layer(layer, dtype: torch.dtype) -> _Layer:
    a, m = layer.self_attn, layer.mlp
    h, hk, d = a.heads, a.kv_heads, a.head_dim
    if a.qkv_proj is not None:
        projections = (linear_parts(a.qkv_proj),)
    else:
        projections = tuple(linear_parts(p) for p in (a.q_proj, a.k_proj, a.v_proj))
    qk_weight, qk_eps, qk_fused = None, 0.0, False
    if a.qk_norm:
        qk_weight = a._qk_weight()
        qk_eps = a.q_norm.eps
        device = qk_weight.device
        qk_fused = fused_norm_exact(device.type, device.index, dtype, d, qk_eps, weighted=False)
    mlp = (m.gate_up_proj,) if m.gate_up_proj is not None else (m.gate_proj, m.up_proj)
    x_like = torch.empty(0, dtype=dtype)
    return _Layer(a.index, a.site, _norm(layer.input_layernorm, x_like), _norm(layer.post_attention_layernorm, x_like),
                  projections, (h * d, hk * d, hk * d), qk_weight, qk_eps, qk_fused, h, hk, d, a.scaling,
                  linear_parts(a.o_proj), tuple(map(linear_parts, mlp)), linear_parts(m.down_proj))


def signed_sin(sin: torch.Tensor) -> torch.Tensor:
    """sin with its first half negated: rotate_half(x) * sin == x.roll(half, -1) * signed_sin(sin)
    exactly ((-a) * b and a * (-b) round alike), one kernel fewer than rotate_half's slices, neg, cat."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


def _rotate(x: torch.Tensor, cos: torch.Tensor, ssin: torch.Tensor) -> torch.Tensor:
    """rotary.apply_rotary(x, cos, sin): (x * cos) + (rotate_half(x) * sin)."""
    return (x * cos) + (x.roll(x.shape[-1] // 2, -1) * ssin)


def _layer_step(p: _Layer, x: torch.Tensor, b: int, n: int, cos: torch.Tensor, ssin: torch.Tensor, cache: KVCache,
                mask: Masked) -> torch.Tensor:
    """QwenLayer.forward on the CPU, op for op (QwenAttention.project's joint q/k norm and rotation), on
    x (B * L, hidden): the matmul that F.linear on three dimensions folds into (see _linear)."""
    h = _apply_norm(p.input_norm, x)
    if len(p.projections) == 1:
        q, k, v = mm(h, p.projections[0]).split(p.sizes, dim=-1)
    else:
        q, k, v = (mm(h, projection) for projection in p.projections)
    q = q.view(b, n, p.heads, p.head_dim)
    k = k.view(b, n, p.kv_heads, p.head_dim)
    v = v.view(b, n, p.kv_heads, p.head_dim).transpose(1, 2)
    qk = torch.cat((q, k), dim=2)
    if p.qk_weight is not None:
        if p.qk_fused:
            qk = p.qk_weight * F.rms_norm(qk, (p.head_dim,), None, p.qk_eps)
        else:
            qk = p.qk_weight * normalise(qk, p.qk_eps)
    qk = _rotate(qk.transpose(1, 2), cos, ssin)
    keys, values = cache.write(p.index, qk[:, p.heads:], v)
    out = accel.attention(qk[:, : p.heads], keys, values, site=p.site, mask=mask.dense, causal=mask.causal,
                          scale=p.scaling, enable_gqa=p.heads != p.kv_heads, mask_info=mask.info)
    x = x + mm(out.transpose(1, 2).reshape(b * n, -1), p.o_proj)
    h = _apply_norm(p.post_norm, x)
    if len(p.mlp) == 1:
        gate, up = mm(h, p.mlp[0]).chunk(2, dim=-1)
    else:
        gate, up = mm(h, p.mlp[0]), mm(h, p.mlp[1])
    return x + mm(F.silu(gate) * up, p.down)


class LeanDecoder:
    """A QwenDecoder's layers and final norm as plain tuples, run as `QwenDecoder.forward` runs them
    (without advancing the cache)."""

    def __init__(self, decoder: QwenDecoder, dtype: torch.dtype):
        self.layers = tuple(_layer(layer, dtype) for layer in decoder.layers)
        self.norm = _norm(decoder.norm, torch.empty(0, dtype=dtype))

    def __call__(self, x: torch.Tensor, cos: torch.Tensor, ssin: torch.Tensor, cache: KVCache,
                 mask: Masked) -> torch.Tensor:
        """Embeddings (B, L, hidden) -> final-normed states (B, L, hidden); the cache is written, not
        advanced. `ssin`: signed_sin(sin)."""
        b, n, width = x.shape
        x = x.reshape(b * n, width)
        for p in self.layers:
            x = _layer_step(p, x, b, n, cos, ssin, cache, mask)
        return _apply_norm(self.norm, x).view(b, n, -1)



def head(hidden: torch.Tensor, linear: tuple) -> torch.Tensor:
    """A head over every position of (B, L, hidden), as upstream computes it; the last one's scores in
    float32."""
    b, n, width = hidden.shape
    return mm(hidden.reshape(b * n, width), linear).view(b, n, -1)[:, -1].float()
