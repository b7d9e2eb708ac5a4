"""QwenDecoder: the Qwen2 / Qwen3 decoder stack that several engines share.

GQA attention with optional per-head q/k RMSNorm (Qwen3), RoPE and a SwiGLU MLP, over a
preallocated KV cache. In eager float32 on the CPU it computes what transformers' Qwen2/Qwen3 models
compute with `attn_implementation="sdpa"`, bit for bit; the parameter names are transformers' too,
so a `model.*` state dict loads as it is.

Each layer is split at its attention call (`before`, `attend`, `after`) so that CUDA graphs can
capture everything but the attention, which runs eagerly on the growing keys (runtime/graphs.py). On the
CPU in inference, qwen_lean.LeanDecoder runs the same kernels without the module plumbing (same bits,
faster); the engines on this decoder step with it there.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.runtime import accel
from mizuoto.runtime.accel import MaskInfo, sdpa_reference

from .norms import RMSNorm, normalise
from .ops import Linear
from .rotary import Rotary, apply_rotary


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(B, Hk, L, D) -> (B, Hk * groups, L, D), each key head repeated for its query heads."""
    if groups == 1:
        return x
    b, h, n, d = x.shape
    return x[:, :, None].expand(b, h, groups, n, d).reshape(b, h * groups, n, d)


def transformers_sdpa(q, k, v, mask, causal, scale, enable_gqa, dropout_p):
    """What transformers' sdpa attention does: with a mask it repeats the key/value heads itself and
    calls SDPA without enable_gqa; without a mask it lets SDPA do GQA."""
    if enable_gqa and mask is not None:
        groups = q.shape[1] // k.shape[1]
        k, v, enable_gqa = repeat_kv(k, groups), repeat_kv(v, groups), False
    return sdpa_reference(q, k, v, mask, causal, scale, enable_gqa, dropout_p)


ATTN = accel.Site("qwen.attn", reference=transformers_sdpa, approx_ok=False)


@dataclass(frozen=True)
class QwenConfig:
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    qk_norm: bool = True  # Qwen3; Qwen2 has none
    qkv_bias: bool = False  # Qwen2: True
    o_bias: bool = False  # Qwen3's attention_bias covers o_proj too; Qwen2's o_proj has none
    vocab_size: int | None = None  # None: the engine feeds embeddings itself

    @classmethod
    def from_transformers(cls, config) -> "QwenConfig":
        """From a transformers Qwen2Config or Qwen3Config."""
        qwen3 = config.model_type.startswith("qwen3")
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return cls(
            hidden_size=config.hidden_size, intermediate_size=config.intermediate_size,
            num_layers=config.num_hidden_layers, num_heads=config.num_attention_heads,
            num_kv_heads=config.num_key_value_heads, head_dim=head_dim, rope_theta=config.rope_theta,
            rms_norm_eps=config.rms_norm_eps, qk_norm=qwen3,
            qkv_bias=config.attention_bias if qwen3 else True, o_bias=config.attention_bias if qwen3 else False,
            vocab_size=config.vocab_size,
        )


@dataclass(frozen=True)
class Masked:
    """A decoder mask: the dense mask transformers would pass (None when SDPA's is_causal does it),
    whether to pass is_causal, and the mask's structure for fused kernels."""

    dense: torch.Tensor | None
    causal: bool
    info: MaskInfo


class AttentionStep(NamedTuple):
    """What a layer's attention needs besides q, k, v: the cache to write to and the mask."""

    cache: "KVCache"
    mask: Masked


class KVCache:
    """Preallocated keys and values for every layer: (layers, B, Hk, capacity, D) each.

    `length` (a host int) counts the positions written; a step writes its keys at [length, length+L)
    and attends to the view [0, length+L), so no step allocates or waits on the device.
    """

    def __init__(self, config: QwenConfig, batch: int, capacity: int, device, dtype):
        shape = (batch, config.num_kv_heads, capacity, config.head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_layers)]
        self.capacity = capacity
        self.length = 0

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start, n = self.length, k.shape[2]
        if start + n > self.capacity:
            raise RuntimeError(f"KV cache holds {self.capacity} positions; this step needs {start + n}")
        keys, values = self.k[layer], self.v[layer]
        keys.narrow(2, start, n).copy_(k)
        values.narrow(2, start, n).copy_(v)
        return keys.narrow(2, 0, start + n), values.narrow(2, 0, start + n)

    def advance(self, n: int) -> None:
        self.length += n


@functools.lru_cache(maxsize=None)
def fused_norm_exact(device_type: str, device_index: int | None, dtype: torch.dtype, size: int, eps: float,
                      weighted: bool = True) -> bool:
    """Whether F.rms_norm gives, bit for bit, the upcast norm on this device and dtype (checked once).

    On recent torch with CUDA in bf16/fp16 it does, and replaces eight kernels by one; elsewhere the
    upcast norm is kept. `weighted=False` checks the norm without its weight (q and k normalised
    together, each then scaled by its own weight)."""
    if not hasattr(F, "rms_norm"):
        return False
    device = torch.device(device_type, device_index) if device_index is not None else torch.device(device_type)
    generator = torch.Generator().manual_seed(0)
    x = (torch.randn(3, 5, size, generator=generator) * 3).to(device, dtype)
    norm = RMSNorm(size, eps).to(device, dtype)
    with torch.no_grad():
        if not weighted:
            return torch.equal(F.rms_norm(x, (size,), None, eps), normalise(x, eps))
        norm.weight.copy_(torch.randn(size, generator=generator))
        return torch.equal(F.rms_norm(x, (size,), norm.weight, eps), norm(x))


def rms_norm(norm: RMSNorm, x: torch.Tensor) -> torch.Tensor:
    if not torch.is_grad_enabled() and fused_norm_exact(x.device.type, x.device.index, x.dtype,
                                                         x.shape[-1], norm.eps):
        return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.eps)
    return norm(x)


def _version(t: torch.Tensor) -> int:
    # In-place updates bump a tensor's version; inference tensors have none (and cannot be updated
    # outside inference mode, where their address is the whole story).
    return -1 if t.is_inference() else t._version


def rms_normalise(x: torch.Tensor, eps: float) -> torch.Tensor:
    """The weightless norm, fused where that is proven exact."""
    if fused_norm_exact(x.device.type, x.device.index, x.dtype, x.shape[-1], eps, weighted=False):
        return F.rms_norm(x, (x.shape[-1],), None, eps)
    return normalise(x, eps)


class QwenAttention(nn.Module):
    def __init__(self, config: QwenConfig, index: int, site: accel.Site = ATTN):
        super().__init__()
        self.index = index
        self.site = site  # engines name their own decoders' call sites (QwenDecoder's `site`)
        self.heads, self.kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        self.scaling = config.head_dim ** -0.5
        hidden = config.hidden_size
        self.q_proj = Linear(hidden, self.heads * self.head_dim, bias=config.qkv_bias)
        self.k_proj = Linear(hidden, self.kv_heads * self.head_dim, bias=config.qkv_bias)
        self.v_proj = Linear(hidden, self.kv_heads * self.head_dim, bias=config.qkv_bias)
        self.o_proj = Linear(self.heads * self.head_dim, hidden, bias=config.o_bias)
        self.qk_norm = config.qk_norm
        if config.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.qkv_proj = None  # set by fuse()

    def project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """x (B, L, hidden) -> q (B, H, L, D), k and v (B, Hk, L, D), normalised and rotated."""
        b, n, _ = x.shape
        if self.qkv_proj is not None:
            q, k, v = self.qkv_proj(x).split([self.heads * self.head_dim, self.kv_heads * self.head_dim,
                                              self.kv_heads * self.head_dim], dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.view(b, n, self.heads, self.head_dim)
        k = k.view(b, n, self.kv_heads, self.head_dim)
        v = v.view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        if x.device.type == "cpu" and not torch.is_grad_enabled():
            # One norm and one rotation for q and k together: both act on each head's vector alone,
            # so on the CPU the results are the same bits as two separate calls, with half the
            # launches. (CUDA picks reductions by tensor size, so there they stay separate.)
            qk = torch.cat((q, k), dim=2)
            if self.qk_norm:
                qk = self._qk_weight() * rms_normalise(qk, self.q_norm.eps)
            qk = apply_rotary(qk.transpose(1, 2), cos, sin)
            return qk[:, : self.heads], qk[:, self.heads:], v
        if self.qk_norm:
            q, k = rms_norm(self.q_norm, q), rms_norm(self.k_norm, k)
        return apply_rotary(q.transpose(1, 2), cos, sin), apply_rotary(k.transpose(1, 2), cos, sin), v

    def _qk_weight(self) -> torch.Tensor:
        """q_norm's weight for each query head and k_norm's for each key head, (H + Hk, D): one multiply
        scales the jointly normalised q and k, each element by the same weight as two would."""
        qw, kw = self.q_norm.weight, self.k_norm.weight
        key = (qw.data_ptr(), _version(qw), kw.data_ptr(), _version(kw))
        if getattr(self, "_qk_key", None) != key:
            self._qk = torch.cat((qw.expand(self.heads, -1), kw.expand(self.kv_heads, -1)))
            self._qk_key = key
        return self._qk

    def attend(self, q, k, v, cache: KVCache, mask: Masked) -> torch.Tensor:
        """Write this step's keys, attend over all of them -> (B, L, H * D) before o_proj."""
        keys, values = cache.write(self.index, k, v)
        out = accel.attention(q, keys, values, site=self.site, mask=mask.dense, causal=mask.causal,
                              scale=self.scaling, enable_gqa=self.heads != self.kv_heads, mask_info=mask.info)
        return out.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)


class QwenMLP(nn.Module):
    def __init__(self, config: QwenConfig):
        super().__init__()
        self.gate_proj = Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.gate_up_proj = None  # set by fuse()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up_proj is not None:
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(F.silu(gate) * up)


class QwenLayer(nn.Module):
    """One decoder layer, split at its attention call: before -> attend -> after."""

    def __init__(self, config: QwenConfig, index: int, site: accel.Site = ATTN):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = QwenAttention(config, index, site)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = QwenMLP(config)

    def before(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]):
        """x (B, L, hidden) -> (q, k, v, residual)."""
        return (*self.self_attn.project(rms_norm(self.input_layernorm, x), *rope), x)

    def attend(self, q, k, v, step: AttentionStep) -> torch.Tensor:
        return self.self_attn.attend(q, k, v, step.cache, step.mask)

    def after(self, attended: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        x = residual + self.self_attn.o_proj(attended)
        return x + self.mlp(rms_norm(self.post_attention_layernorm, x))

    def forward(self, x, rope, step: AttentionStep) -> torch.Tensor:
        q, k, v, residual = self.before(x, rope)
        return self.after(self.attend(q, k, v, step), residual)


class QwenDecoder(nn.Module):
    """`site`: the attention call site of this decoder's layers (the shared `qwen.attn` by default; an
    engine with several decoders gives each its own, so reports and policies tell them apart)."""

    def __init__(self, config: QwenConfig, site: accel.Site = ATTN):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size) if config.vocab_size else None
        self.layers = nn.ModuleList(QwenLayer(config, i, site) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = Rotary(config.head_dim, config.rope_theta)
        self.fused_projections = False

    # -- the pieces a step is made of (runtime.graphs.DecoderSteps captures embed, before, after and
    # finish; attention stays eager) --------------------------------------------------------------------

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(ids)

    def rope(self, positions: torch.Tensor, dtype: torch.dtype):
        return self.rotary(positions, dtype)

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(self.norm, x)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: KVCache, mask: Masked) -> torch.Tensor:
        """x (B, L, hidden) embeddings at `positions` (B, L) -> final-normed hidden states (B, L, hidden).

        Keys are written to `cache` at [cache.length, cache.length + L), which then advances by L.
        """
        if cache.length + x.shape[1] > cache.capacity:  # before the rotary table is read past its end
            raise RuntimeError(f"KV cache holds {cache.capacity} positions; this step needs "
                               f"{cache.length + x.shape[1]}")
        rope = self.rope(positions, x.dtype)
        step = AttentionStep(cache, mask)
        for layer in self.layers:
            x = layer(x, rope, step)
        cache.advance(x.shape[1])
        return self.finish(x)

    def new_cache(self, batch: int, capacity: int, device=None, dtype=None) -> KVCache:
        weight = self.layers[0].input_layernorm.weight
        self.rotary.reserve(capacity)
        return KVCache(self.config, batch, capacity, device or weight.device, dtype or weight.dtype)

    def mask_for(self, keys: torch.Tensor | None, q_len: int, kv_len: int, padded: bool | None = None,
                 padding: str = "left", batch: int = 1) -> Masked:
        """The mask for `q_len` new queries against `kv_len` keys, the last `q_len` of them new.

        `keys` (B, kv_len) marks real keys (None: all real). transformers skips the mask (and uses
        SDPA's is_causal) when nothing is padded and there is one query or as many queries as keys;
        deciding "nothing is padded" reads the device once, which a caller that knows passes as
        `padded`. Padding is `left` (prompts aligned at the end, as generate() pads) or `right`.
        With `keys` None, `batch` gives the batch size.
        """
        if keys is None:
            padded = False
        elif padded is None:
            padded = not bool(keys.all())
        batch = batch if keys is None else keys.shape[0]
        device = self.norm.weight.device if keys is None else keys.device
        if not padded:
            info = MaskInfo.full(batch, kv_len, device=device, causal=True)
            if q_len == 1 or q_len == kv_len:
                return Masked(None, q_len > 1, info)
            return Masked(info.dense(q_len), False, info)
        info = MaskInfo(keys, causal=True, padding=padding)
        return Masked(info.dense(q_len), False, info)

    # -- inference-only projection fusion (engines.<id>.load_options.fused_projections) ----------------

    @torch.no_grad()
    def fuse(self) -> None:
        """Stack each layer's q/k/v and gate/up weights into one projection each.

        Fewer, wider matmuls; cuBLAS picks other kernels for wider matrices, so results are not
        bit-identical on CUDA. Inference only; reported as fused_projections.
        """
        for layer in self.layers:
            attn, mlp = layer.self_attn, layer.mlp
            attn.qkv_proj = _stacked(attn.q_proj, attn.k_proj, attn.v_proj)
            mlp.gate_up_proj = _stacked(mlp.gate_proj, mlp.up_proj)
            del attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj
        self.fused_projections = True


def _stacked(*linears: Linear) -> Linear:
    first = linears[0]
    out = sum(lin.out_features for lin in linears)
    stacked = Linear(first.in_features, out, bias=first.bias is not None, device=first.weight.device,
                     dtype=first.weight.dtype)
    stacked.weight.copy_(torch.cat([lin.weight for lin in linears]))
    if first.bias is not None:
        stacked.bias.copy_(torch.cat([lin.bias for lin in linears]))
    stacked.requires_grad_(False)
    return stacked
