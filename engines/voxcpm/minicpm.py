"""MiniCPM-4: the transformer under all four of VoxCPM's stacks, exact to voxcpm 2.0.3.

One layer stack serves as the text-semantic LM (`base_lm`, causal, token embeddings), the residual
acoustic LM (`residual_lm`, causal, no embeddings, v2 without RoPE), the local encoder and the local
DiT (bidirectional, a handful of positions); module and parameter names are upstream's
(`modules/minicpm4/model.py`), so each `base_lm.*`, `residual_lm.*`, `feat_encoder.encoder.*` and
`feat_decoder.estimator.decoder.*` sub-dict loads as it is.

What upstream computes, and therefore what this file reproduces:
  - RMSNorm upcast to float32, weight applied in the input dtype; SwiGLU MLP; no biases anywhere.
  - LongRoPE: cos/sin tables of `max_position_embeddings` rows built once on the CPU in float32 (long
    factors when that exceeds `original_max_position_embeddings`, else short ones: a property of the
    config, never of a sequence's length), scaled by sqrt(1 + ln(max/orig) / ln(orig)), cast with the
    model's dtype like any buffer; q and k rotated in float32.
  - muP (`use_mup`): each residual branch times scale_depth / sqrt(num_layers). `scale_emb` is *not*
    applied here: upstream's model files multiply the base LM's token embeddings by it
    (`MiniCPM.embed` does that); `forward` and `step` take embeddings as they are.
  - Attention is torch's SDPA with `enable_gqa=True` always: causal (`is_causal`) or bidirectional
    over a prefill, and at decode one query over the WHOLE static cache with the boolean mask
    `arange(capacity) <= position` (upstream's `forward_step`). On the CPU SDPA takes its flash
    kernel for all of these, and its results depend on the cache capacity (see `KVCache`).

The decode step never waits on the device: its position is a device tensor, keys are written in place
with `index_copy_`, and every shape is fixed by the cache, so the step (or each segment between two
attention calls, `DecodeSteps`) can be replayed as a CUDA graph.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from dataclasses import replace as _replace
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import CheckpointError
from mizuoto.nn.norms import RMSNorm
from mizuoto.nn.ops import Linear
from mizuoto.nn.qwen import rms_norm
from mizuoto.nn.rotary import rotate_half
from mizuoto.runtime import accel
from mizuoto.runtime.accel import MaskInfo
from mizuoto.runtime.graphs import Graphs, LayerSteps

# The base and residual LMs, prefill and decode: autoregressive, so exact kernels only.
LM_SITE = accel.Site("voxcpm.lm", approx_ok=False)
# The local encoder and the local DiT: bidirectional over a few positions.
LOCAL_SITE = accel.Site("voxcpm.local")


# ---------------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class RopeScaling:
    """`lm_config.rope_scaling`. Upstream reads `type` but never acts on it: LongRoPE always."""

    type: str
    long_factor: tuple[float, ...]
    short_factor: tuple[float, ...]
    original_max_position_embeddings: int


@dataclass(frozen=True)
class MiniCPMConfig:
    """upstream's MiniCPM4Config (pydantic) field for field; `from_dict` reads `lm_config`.

    The stacks other than the base LM are derived from it as upstream derives them (`residual`,
    `local`, or `replace` for anything else). `source` names the config.json section in errors."""

    bos_token_id: int
    eos_token_id: int
    hidden_size: int
    intermediate_size: int
    max_position_embeddings: int
    num_attention_heads: int
    num_hidden_layers: int
    num_key_value_heads: int
    rms_norm_eps: float
    rope_scaling: RopeScaling
    vocab_size: int  # 0: no embedding table (upstream's nn.Identity)
    scale_emb: float
    dim_model_base: int  # read, unused at inference (upstream's too)
    scale_depth: float
    rope_theta: float
    use_mup: bool = True
    kv_channels: int | None = None  # the head dim; None: hidden_size // num_attention_heads
    no_rope: bool = False
    source: str = field(default="lm_config", compare=False, repr=False)

    def __post_init__(self):
        for name in ("rms_norm_eps", "scale_emb", "scale_depth", "rope_theta"):  # floats, as pydantic makes them
            object.__setattr__(self, name, float(getattr(self, name)))
        self._check()

    # -- what the modules use --------------------------------------------------------------------------

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads if self.kv_channels is None else self.kv_channels

    @property
    def embedding_scale(self) -> float:
        """What upstream multiplies the base LM's token embeddings by: scale_emb with muP, else 1.0."""
        return float(self.scale_emb) if self.use_mup else 1.0

    @property
    def residual_scale(self) -> float | None:
        """The muP factor on every residual branch (None without muP), as upstream computes it."""
        return self.scale_depth / math.sqrt(self.num_hidden_layers) if self.use_mup else None

    @property
    def rope_factors(self) -> tuple[float, ...]:
        """LongRoPE's factors: the long ones when the table is longer than the original context."""
        scaling = self.rope_scaling
        long = self.max_position_embeddings > scaling.original_max_position_embeddings
        return scaling.long_factor if long else scaling.short_factor

    @property
    def rope_scale(self) -> float:
        """LongRoPE's magnitude factor sqrt(1 + ln(max / orig) / ln(orig)), in Python floats as upstream."""
        original = self.rope_scaling.original_max_position_embeddings
        scale = self.max_position_embeddings / original
        return math.sqrt(1 + math.log(scale) / math.log(original))

    # -- derivations -----------------------------------------------------------------------------------

    def replace(self, **changes) -> "MiniCPMConfig":
        """This config with `changes` (upstream deep-copies lm_config and assigns fields), checked again."""
        return _replace(self, **changes)

    def residual(self, num_layers: int, no_rope: bool | None = None) -> "MiniCPMConfig":
        """The residual LM's config: `residual_lm_num_layers` layers, no embedding table, and (VoxCPM2
        only: `residual_lm_no_rope`) no RoPE; v1 passes no_rope=None and keeps lm_config's."""
        changes = {"num_hidden_layers": num_layers, "vocab_size": 0, "source": "residual_lm"}
        if no_rope is not None:
            changes["no_rope"] = bool(no_rope)
        return self.replace(**changes)

    def local(self, hidden_dim: int, ffn_dim: int, num_heads: int, num_layers: int, kv_channels: int | None = None,
              source: str = "encoder_config") -> "MiniCPMConfig":
        """The local encoder's or DiT's config from `encoder_config` / `dit_config`. As upstream, the
        key/value heads, RoPE, muP and norm settings stay lm_config's (VoxCPM2's local stacks are GQA
        16/2 with head dim 128, rotated by the LM's LongRoPE factors)."""
        return self.replace(hidden_size=hidden_dim, intermediate_size=ffn_dim, num_attention_heads=num_heads,
                            num_hidden_layers=num_layers, kv_channels=kv_channels, vocab_size=0, source=source)

    # -- reading -----------------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data, source: str = "lm_config") -> "MiniCPMConfig":
        """From config.json's `lm_config`; a missing or unusable entry is a one-line CheckpointError.
        What upstream's pydantic model requires is required here too; unknown entries are ignored."""
        if not isinstance(data, dict):
            raise CheckpointError(f"{source} must be a JSON object, got {type(data).__name__}")
        rope = data.get("rope_scaling")
        where = f"{source}.rope_scaling"
        if not isinstance(rope, dict):
            raise CheckpointError(f"{where} is missing or not an object; VoxCPM configs hold type, long_factor, "
                                  f"short_factor and original_max_position_embeddings there")
        scaling = RopeScaling(_read(rope, "type", str, where), _factors(rope, "long_factor", where),
                              _factors(rope, "short_factor", where),
                              _read(rope, "original_max_position_embeddings", int, where))
        values = {name: _read(data, name, kind, source) for name, kind in _FIELDS.items()
                  if name not in _DEFAULTS or data.get(name) is not None}
        return cls(rope_scaling=scaling, source=source, **values)

    def _check(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise CheckpointError(f"{self.source}: {message}")

        for name in ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers",
                     "num_key_value_heads", "max_position_embeddings"):
            need(getattr(self, name) >= 1, f"{name} must be at least 1, got {getattr(self, name)}")
        need(self.vocab_size >= 0, f"vocab_size must be 0 (no embedding) or more, got {self.vocab_size}")
        need(self.kv_channels is None or self.kv_channels >= 1,
             f"kv_channels must be at least 1 or null, got {self.kv_channels}")
        need(self.num_attention_heads % self.num_key_value_heads == 0,
             f"{self.num_attention_heads} attention heads cannot share {self.num_key_value_heads} key/value heads; "
             f"num_attention_heads must be a multiple of num_key_value_heads")
        need(self.rms_norm_eps >= 0, f"rms_norm_eps must not be negative, got {self.rms_norm_eps}")
        if self.no_rope:
            return
        dim, scaling = self.head_dim, self.rope_scaling
        need(dim % 2 == 0, f"the head dim {dim} must be even for RoPE (set kv_channels, or no_rope)")
        need(scaling.original_max_position_embeddings >= 2, "rope_scaling.original_max_position_embeddings must be "
             f"at least 2, got {scaling.original_max_position_embeddings}")
        for name in ("long_factor", "short_factor"):
            n = len(getattr(scaling, name))
            need(n in (1, dim // 2), f"rope_scaling.{name} has {n} entries; the head dim {dim} needs {dim // 2} "
                 f"(or a single one)")


# config.json's lm_config entries besides rope_scaling, with their kinds; the ones in _DEFAULTS may be left out
_FIELDS = {"bos_token_id": int, "eos_token_id": int, "hidden_size": int, "intermediate_size": int,
           "max_position_embeddings": int, "num_attention_heads": int, "num_hidden_layers": int,
           "num_key_value_heads": int, "rms_norm_eps": float, "vocab_size": int, "scale_emb": float,
           "dim_model_base": int, "scale_depth": float, "rope_theta": float, "use_mup": bool, "kv_channels": int,
           "no_rope": bool}
_DEFAULTS = ("use_mup", "kv_channels", "no_rope")
_KIND_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _read(data: dict, key: str, kind: type, where: str):
    if data.get(key) is None:
        raise CheckpointError(f"{where} lacks {key}")
    value = data[key]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = {int: number and float(value).is_integer(), float: number, str: isinstance(value, str),
          bool: isinstance(value, bool) or (number and value in (0, 1))}[kind]
    if not ok:
        raise CheckpointError(f"{where}.{key} must be {_KIND_NAMES[kind]}, got {value!r}")
    return kind(value)


def _factors(data: dict, key: str, where: str) -> tuple[float, ...]:
    values = data.get(key)
    if not isinstance(values, list) or not values or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise CheckpointError(f"{where}.{key} must be a non-empty list of numbers")
    return tuple(float(v) for v in values)


# ---------------------------------------------------------------------------------------------------
# LongRoPE


def rope_tables(config: MiniCPMConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each (max_position_embeddings, head_dim) float32, computed on the CPU exactly as
    upstream's MiniCPMLongRoPE builds them at construction (its tables then move with the model).
    The whole table is computed even when fewer rows are kept, so that every row comes out of the
    same kernel calls as upstream's (no row was seen to depend on the table's size: vectorised and
    scalar cos/sin agreed on 20 000 values at avx2 and avx512; the full 32768 x 128 table costs
    about 80 ms, once per load)."""
    dim, base, cpu = config.head_dim, config.rope_theta, torch.device("cpu")  # (cpu even under a meta context)
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, device=cpu).float() / dim))
    t = torch.arange(config.max_position_embeddings, device=cpu, dtype=inv_freq.dtype)
    factors = torch.tensor(config.rope_factors, device=cpu, dtype=torch.float32)
    freqs = torch.mul(torch.outer(t, 1.0 / factors), inv_freq.to(torch.float32))
    emb = torch.cat((freqs, freqs), dim=-1)
    scale = config.rope_scale
    return emb.cos().to(torch.float32) * scale, emb.sin().to(torch.float32) * scale


class LongRoPE(nn.Module):
    """The tables as non-persistent buffers (not in checkpoints; cast by `.to(dtype)` as upstream's
    are). `positions` rows are kept (default: all, upstream's); a decode cache never needs more than
    its capacity, a local stack only its few positions."""

    def __init__(self, config: MiniCPMConfig, positions: int | None = None):
        super().__init__()
        self.config = config
        self.positions = config.max_position_embeddings if positions is None else positions
        if not 1 <= self.positions <= config.max_position_embeddings:
            raise ValueError(f"rope positions must be in [1, {config.max_position_embeddings}], got {positions}")
        self.register_buffer("cos", torch.empty(0), persistent=False)
        self.register_buffer("sin", torch.empty(0), persistent=False)
        self.reset_buffers()

    @torch.no_grad()
    def reset_buffers(self, device=None, dtype: torch.dtype | None = None) -> None:
        """Recompute the tables (on the CPU, as upstream does) and place them on `device` in `dtype`
        (default: where and what they are now); needed after building on the meta device."""
        device = self.cos.device if device is None else torch.device(device)
        dtype = self.cos.dtype if dtype is None else dtype
        n = self.positions
        if device.type == "meta":  # built on the meta device: filled by the call after to_empty
            self.cos = torch.empty(n, self.config.head_dim, device=device, dtype=dtype)
            self.sin = torch.empty_like(self.cos)
            return
        cos, sin = rope_tables(self.config)
        self.cos = cos[:n].clone().to(device, dtype)
        self.sin = sin[:n].clone().to(device, dtype)

    def at(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows for `positions` (a device tensor; upstream indexes its table the same way)."""
        return self.cos[positions], self.sin[positions]

    def first(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows 0..n-1 (a prefill's positions), without an index tensor."""
        if n > self.positions:
            raise RuntimeError(f"a sequence of {n} positions exceeds the {self.positions} the RoPE table holds")
        return self.cos[:n], self.sin[:n]


def rotate(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """upstream's apply_rotary_pos_emb: q and k in float32, back to their dtype."""
    dtype = q.dtype
    q, k = q.to(torch.float32), k.to(torch.float32)
    q = (q * cos) + (rotate_half(q) * sin)
    k = (k * cos) + (rotate_half(k) * sin)
    return q.to(dtype), k.to(dtype)


# ---------------------------------------------------------------------------------------------------
# The static KV cache


class KVCache:
    """Keys and values of every layer, (layers, batch, kv heads, capacity, head dim) each, owned by
    the caller (one per request; the model holds none). The decode step attends over all `capacity`
    positions, the unwritten ones masked, as upstream's StaticKVCache does with max_length.

    Capacity and exactness (CPU, float32, one thread): SDPA's flash kernel reduces over the whole
    capacity, vectorised with a scalar tail, so a capacity that is a multiple of the vector width
    (8 floats at avx2, 16 at avx512) gives the same bits as upstream's 4096 / 8192, and any other can
    differ in the last bit. `capacity_for` rounds up to a multiple of 64.

    `length` (a host int) counts the positions written; `position()` is the next one as a device
    tensor, sliced from a device arange so that no step copies from the host."""

    def __init__(self, layers: int, batch: int, kv_heads: int, head_dim: int, capacity: int, device=None,
                 dtype: torch.dtype = torch.float32):
        if capacity < 1:
            raise ValueError(f"a KV cache needs a capacity of at least 1, got {capacity}")
        shape = (layers, batch, kv_heads, capacity, head_dim)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.capacity = capacity
        self.length = 0
        self.steps = torch.arange(capacity, device=self.keys.device)

    def fill(self, keys_values) -> None:
        """Load a prefill's per-layer (keys, values) (what `MiniCPM.forward` returns), as upstream's
        fill_caches: everything else zeroed, `length` set to the prefill's length."""
        n = keys_values[0][0].shape[2]
        if len(keys_values) != self.keys.shape[0]:
            raise ValueError(f"the cache holds {self.keys.shape[0]} layers, the prefill has {len(keys_values)}")
        if n > self.capacity:
            raise RuntimeError(f"a prefill of {n} positions does not fit a KV cache of {self.capacity}")
        self.keys.zero_()
        self.values.zero_()
        for i, (k, v) in enumerate(keys_values):
            self.keys[i, :, :, :n].copy_(k)
            self.values[i, :, :, :n].copy_(v)
        self.length = n

    def position(self) -> torch.Tensor:
        """The next position to write, (1,) long on the cache's device (upstream's kv_cache.step())."""
        if self.length >= self.capacity:
            raise RuntimeError(f"the KV cache is full ({self.capacity} positions); allocate a larger capacity")
        return self.steps[self.length: self.length + 1]

    def advance(self, n: int = 1) -> None:
        self.length += n


def capacity_for(positions: int, multiple: int = 64) -> int:
    """A capacity holding `positions`, rounded up to `multiple` (see KVCache on why it matters)."""
    return -(-max(positions, 1) // multiple) * multiple


class StepContext(NamedTuple):
    """What a decode step's attention calls read besides q, k, v: the cache, where to write, and the
    mask over the whole cache (computed once per step; upstream builds the same one in each layer)."""

    cache: KVCache
    position: torch.Tensor
    mask: torch.Tensor  # (1, 1, 1, capacity) bool: position j attended when j <= position
    info: MaskInfo


# ---------------------------------------------------------------------------------------------------
# The layer stack


class MiniCPMAttention(nn.Module):
    def __init__(self, config: MiniCPMConfig, index: int, site: accel.Site):
        super().__init__()
        self.index, self.site = index, site
        self.heads, self.kv_heads, self.head_dim = config.num_attention_heads, config.num_key_value_heads, \
            config.head_dim
        hidden, inner, kv = config.hidden_size, self.heads * self.head_dim, self.kv_heads * self.head_dim
        self.q_proj = Linear(hidden, inner, bias=False)
        self.k_proj = Linear(hidden, kv, bias=False)
        self.v_proj = Linear(hidden, kv, bias=False)
        self.o_proj = Linear(inner, hidden, bias=False)

    def project(self, x: torch.Tensor, rope: tuple):
        """x (B, L, hidden), or (B, hidden) for a step -> q (B, H, L, D), k, v (B, Hk, L, D), rotated
        when `rope` holds (cos, sin), contiguous (upstream's .contiguous() before SDPA)."""
        b, n = x.shape[0], 1 if x.dim() == 2 else x.shape[1]
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        if rope:
            q, k = rotate(q, k, *rope)
        return q.contiguous(), k.contiguous(), v.contiguous()

    def attend(self, q, k, v, causal: bool) -> torch.Tensor:
        """A prefill: SDPA over the sequence itself -> (B, L, H * D) before o_proj."""
        b, n = q.shape[0], q.shape[2]
        info = MaskInfo.full(b, n, device=q.device, causal=True) if causal else None
        out = accel.attention(q, k, v, site=self.site, causal=causal, enable_gqa=True, mask_info=info)
        return out.transpose(1, 2).contiguous().reshape(b, n, self.heads * self.head_dim)

    def attend_cached(self, q, k, v, ctx: StepContext) -> torch.Tensor:
        """A step: write k, v at the position, attend over the whole cache -> (B, H * D) before o_proj."""
        keys, values = ctx.cache.keys[self.index], ctx.cache.values[self.index]
        keys.index_copy_(2, ctx.position, k)
        values.index_copy_(2, ctx.position, v)
        out = accel.attention(q, keys, values, site=self.site, mask=ctx.mask, enable_gqa=True, mask_info=ctx.info)
        return out.transpose(1, 2).contiguous().reshape(q.shape[0], self.heads * self.head_dim)


class MiniCPMMLP(nn.Module):
    def __init__(self, config: MiniCPMConfig):
        super().__init__()
        self.gate_proj = Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MiniCPMLayer(nn.Module):
    """One layer, split at its attention call (before -> attend -> after) for runtime.graphs.LayerSteps."""

    def __init__(self, config: MiniCPMConfig, index: int, site: accel.Site):
        super().__init__()
        self.self_attn = MiniCPMAttention(config, index, site)
        self.mlp = MiniCPMMLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.residual_scale = config.residual_scale

    def _add(self, residual: torch.Tensor, branch: torch.Tensor) -> torch.Tensor:
        # upstream: residual + branch * (scale_depth / sqrt(layers)) with muP, else a plain sum
        return residual + (branch if self.residual_scale is None else branch * self.residual_scale)

    def before(self, x: torch.Tensor, rope: tuple):
        """x -> (q, k, v, residual); `rope` is (cos, sin) or () without RoPE."""
        return (*self.self_attn.project(rms_norm(self.input_layernorm, x), rope), x)

    def attend(self, q, k, v, ctx: StepContext) -> torch.Tensor:
        return self.self_attn.attend_cached(q, k, v, ctx)

    def after(self, attended: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        x = self._add(residual, self.self_attn.o_proj(attended))
        return self._add(x, self.mlp(rms_norm(self.post_attention_layernorm, x)))


class MiniCPM(nn.Module):
    """The stack: `embed_tokens` (vocab_size > 0 only), `layers`, `norm`, LongRoPE unless no_rope.

    `site`: LM_SITE for the base and residual LMs, LOCAL_SITE for the local encoder and DiT.
    `rope_positions`: RoPE rows kept (default all max_position_embeddings, as upstream; a decode
    needs its cache capacity, a local stack its few positions)."""

    def __init__(self, config: MiniCPMConfig, site: accel.Site = LM_SITE, rope_positions: int | None = None):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size) if config.vocab_size > 0 else None
        self.layers = nn.ModuleList(MiniCPMLayer(config, i, site) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rope = None if config.no_rope else LongRoPE(config, rope_positions)

    def reset_buffers(self) -> None:
        """Recompute the RoPE tables on the weights' device and dtype (after building on meta)."""
        if self.rope is not None:
            weight = self.norm.weight
            self.rope.reset_buffers(weight.device, weight.dtype)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings as upstream's model files feed them to the base LM: times scale_emb with
        muP, times 1.0 without (a multiplication that changes no bits, skipped)."""
        if self.embed_tokens is None:
            raise RuntimeError("this MiniCPM stack has no token embeddings (vocab_size 0)")
        x = self.embed_tokens(ids)
        return x * self.config.embedding_scale if self.config.use_mup else x

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(self.norm, x)

    def forward(self, x: torch.Tensor, causal: bool = True):
        """A prefill over embeddings x (B, L, hidden) at positions 0..L-1 -> (final-normed hidden
        (B, L, hidden), [(keys, values) per layer, (B, Hk, L, D) each, rotated]): upstream's forward."""
        rope = () if self.rope is None else self.rope.first(x.shape[1])
        keys_values = []
        for layer in self.layers:
            q, k, v, residual = layer.before(x, rope)
            keys_values.append((k, v))
            x = layer.after(layer.self_attn.attend(q, k, v, causal), residual)
        return self.finish(x), keys_values

    # -- decoding ------------------------------------------------------------------------------------

    def new_cache(self, batch: int, capacity: int, device=None, dtype: torch.dtype | None = None) -> KVCache:
        """A zeroed cache on the weights' device and dtype (default). Check `capacity` against the
        RoPE table here, on the host: a step cannot (its position is on the device)."""
        config, weight = self.config, self.norm.weight
        if self.rope is not None and capacity > self.rope.positions:
            raise ValueError(f"a KV cache of {capacity} positions exceeds the {self.rope.positions} RoPE positions "
                             f"this stack holds")
        return KVCache(config.num_hidden_layers, batch, config.num_key_value_heads, config.head_dim, capacity,
                       device or weight.device, dtype or weight.dtype)

    def rope_at(self, position: torch.Tensor) -> tuple:
        """(cos, sin) rows (1, D) for a step at `position`, () without RoPE."""
        return () if self.rope is None else self.rope.at(position)

    def step_context(self, position: torch.Tensor, cache: KVCache) -> StepContext:
        """The cache mask for a step at `position`: upstream's `arange(max_length) <= position`."""
        allowed = cache.steps <= position
        info = MaskInfo(allowed[None].expand(cache.keys.shape[1], -1), padding="right")
        return StepContext(cache, position, allowed.view(1, 1, 1, -1), info)

    def step(self, x: torch.Tensor, position: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """One decode position: x (B, hidden) at `position` ((1,) long, on the device; usually
        `cache.position()`) -> final-normed hidden (B, hidden); writes this position's keys into
        `cache` in place. Upstream's forward_step bit for bit. Does not advance the cache (the caller
        does, `cache.advance()`, as upstream calls kv_cache.step()). Static shapes, no host reads:
        capturable as one CUDA graph as long as the same cache object is replayed with it."""
        rope, ctx = self.rope_at(position), self.step_context(position, cache)
        for layer in self.layers:
            q, k, v, residual = layer.before(x, rope)
            x = layer.after(layer.attend(q, k, v, ctx), residual)
        return self.finish(x)


class DecodeSteps:
    """`MiniCPM.step` as runtime.graphs.LayerSteps segments: with `graphs`, everything between two
    attention calls replays as a CUDA graph, and attention (cache write + SDPA over the cache) runs
    eagerly, so one set of graphs serves every request's own cache. Without graphs (CPU) the same
    segments run eagerly: the same bits as `step`.

    `embed(*inputs) -> x (B, hidden)` opens the first segment (default: the input is x itself);
    `head(hidden) -> out` closes the last one after the final norm (e.g. the stop head, FSQ), so
    they are captured too; `state`: tensors they change in place (LayerSteps restores them after a
    capture's warm-up run). Keep one per loaded model and Graphs."""

    def __init__(self, model: MiniCPM, graphs: Graphs | None = None, embed=None, head=None, state=()):
        self.model = model
        finish = model.finish if head is None else (lambda x: head(model.finish(x)))
        self.layers = LayerSteps(model.layers, embed or _identity, finish, graphs, state)

    def __call__(self, inputs, position: torch.Tensor, cache: KVCache):
        """`inputs` (a tensor or tuple for `embed`) at `position` -> head's output (graph outputs are
        static buffers rewritten by the next call: clone what must outlive it). Does not advance."""
        model = self.model
        return self.layers(inputs, model.rope_at(position), model.step_context(position, cache))


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x
