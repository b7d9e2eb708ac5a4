"""GPT2Decoder: the body of transformers' GPT2Model (4.52.1) for engines that feed their own input embeddings
(IndexTTS's UnifiedVoice deletes GPT-2's token and position tables and adds its own learned positions).

    x -> N x [x += attn(ln_1(x)); x += mlp(ln_2(x))] -> ln_f
    attn: c_attn (D -> 3D), heads of D / H, SDPA with transformers' mask, c_proj (D -> D)
    mlp:  c_fc (D -> 4D), "gelu_new" (the tanh approximation, written out as transformers writes it), c_proj

In eager float32 on the CPU it computes what GPT2Model with `attn_implementation="sdpa"` computes, bit for bit:

- transformers' Conv1D keeps its weight as (in, out) and multiplies with `addmm(bias, x, weight)`. `Conv1DLinear`
  is an ops.Linear whose (out, in) parameter is a transposed view of (in, out) storage, so the state dict has
  nn.Linear's shapes (a loader transposes a GPT-2 checkpoint's Conv1D weights once) while the matrix product is
  the very addmm transformers launches, on the same memory layout.
- the attention mask is transformers' (`_update_causal_mask`): without padding none (SDPA's is_causal for a
  prefill, nothing for one query); with padding an additive float mask, 0 where a query may look and finfo.min
  elsewhere, and on CUDA its fully masked rows (left padding's leading queries) zeroed as `_unmask_unattended`
  does. q, k and v are made contiguous before SDPA, as transformers' sdpa_attention_forward does.
- the position embeddings GPT2Model adds (UnifiedVoice's `null_position_embeddings`, zeros) are left out: adding
  zeros changes no value.

The KV cache (`GPT2Cache`) is preallocated, (layers, B, H, capacity, D) for keys and for values; a step writes at
[length, length + L) and attends over [0, length + L). `reorder(rows)` gathers the beams' rows in place (the
storage and its address stay: CUDA graphs and views keep working), as beam search's `_reorder_cache` does by
index_select. Each block is split at its attention call (`before`, `attend`, `after`) so runtime.graphs.LayerSteps
can capture everything but attention for a one-token step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from mizuoto.runtime import accel
from mizuoto.runtime.accel import MaskInfo, sdpa_reference
from mizuoto.runtime.graphs import Graphs, LayerSteps

from .ops import Linear

__all__ = ["AttentionStep", "Conv1DLinear", "GPT2Cache", "GPT2Config", "GPT2Decoder", "Masked", "gelu_new",
           "transformers_sdpa"]


def transformers_sdpa(q, k, v, mask, causal, scale, enable_gqa, dropout_p):
    """transformers 4.52.1's sdpa_attention_forward for GPT-2: contiguous q, k, v, then SDPA with the caller's
    mask, is_causal and scale (GPT-2 passes none: SDPA's own 1/sqrt(d))."""
    return sdpa_reference(q.contiguous(), k.contiguous(), v.contiguous(), mask, causal, scale, enable_gqa, dropout_p)


def gelu_new(x: torch.Tensor) -> torch.Tensor:
    """transformers' NewGELUActivation, the expression as it is written there (F.gelu(approximate="tanh") rounds
    differently)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


@dataclass(frozen=True)
class GPT2Config:
    hidden_size: int
    num_layers: int
    num_heads: int
    layer_norm_eps: float = 1e-5  # GPT2Config's layer_norm_epsilon
    inner_size: int | None = None  # GPT2Config's n_inner: None is 4 x hidden_size

    def __post_init__(self):
        if self.hidden_size % self.num_heads:
            raise ValueError(f"GPT-2 width {self.hidden_size} is not a multiple of its {self.num_heads} heads")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def inner(self) -> int:
        return self.inner_size or 4 * self.hidden_size


class Conv1DLinear(Linear):
    """transformers' Conv1D as a Linear: `weight` reads (out, in) like nn.Linear's, its storage is (in, out) like
    Conv1D's, and forward is Conv1D's `addmm(bias, x.view(-1, in), storage)`."""

    def __init__(self, in_features: int, out_features: int, device=None, dtype=None):
        super().__init__(in_features, out_features, bias=True, device=device, dtype=dtype)
        storage = torch.empty(in_features, out_features, device=device, dtype=dtype)
        self.weight = nn.Parameter(storage.t())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        if weight.device != x.device:
            weight, bias = weight.to(x.device, non_blocking=True), bias.to(x.device, non_blocking=True)
        out = torch.addmm(bias, x.reshape(-1, x.shape[-1]), weight.t())
        return out.view(*x.shape[:-1], out.shape[-1])


@dataclass(frozen=True)
class Masked:
    """A step's mask: the dense mask transformers would pass (None when it passes none), whether SDPA's
    is_causal is set, and the mask's structure for fused kernels."""

    dense: torch.Tensor | None
    causal: bool
    info: MaskInfo


class AttentionStep(NamedTuple):
    cache: "GPT2Cache | None"
    mask: Masked


class GPT2Cache:
    """Preallocated keys and values of every layer, (layers, B, H, capacity, head_dim) each; `length` (a host
    int) counts the positions written."""

    def __init__(self, config: GPT2Config, batch: int, capacity: int, device, dtype):
        shape = (config.num_layers, batch, config.num_heads, capacity, config.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.capacity = capacity
        self.length = 0

    @property
    def batch(self) -> int:
        return self.k.shape[1]

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

    def reorder(self, rows: torch.Tensor) -> None:
        """Row i takes what row rows[i] held (beam search's _reorder_cache), in place: the written positions of
        every layer are gathered into a temporary and copied back into the same storage."""
        if rows.shape != (self.batch,):
            raise ValueError(f"a beam reorder gives one source row per cache row ({self.batch}), got "
                             f"{tuple(rows.shape)}")
        rows = rows.to(self.k.device)
        for cache in (self.k, self.v):
            written = cache.narrow(3, 0, self.length)
            written.copy_(written.index_select(1, rows))


class GPT2Attention(nn.Module):
    def __init__(self, config: GPT2Config, index: int, site: accel.Site):
        super().__init__()
        self.index, self.site = index, site
        self.heads, self.head_dim = config.num_heads, config.head_dim
        self.c_attn = Conv1DLinear(config.hidden_size, 3 * config.hidden_size)
        self.c_proj = Conv1DLinear(config.hidden_size, config.hidden_size)

    def project(self, x: torch.Tensor):
        """x (B, L, D) -> q, k, v (B, H, L, head_dim), views of c_attn's output as transformers takes them."""
        b, n, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        return tuple(t.view(b, n, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v))

    def attend(self, q, k, v, step: AttentionStep) -> torch.Tensor:
        """Write k, v into the cache (when there is one), attend over every key -> (B, L, D) before c_proj."""
        if step.cache is not None:
            k, v = step.cache.write(self.index, k, v)
        mask = step.mask
        out = accel.attention(q, k, v, site=self.site, mask=mask.dense, causal=mask.causal, mask_info=mask.info)
        return out.transpose(1, 2).contiguous().reshape(q.shape[0], q.shape[2], -1).contiguous()


class GPT2MLP(nn.Module):
    def __init__(self, config: GPT2Config):
        super().__init__()
        self.c_fc = Conv1DLinear(config.hidden_size, config.inner)
        self.c_proj = Conv1DLinear(config.inner, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(gelu_new(self.c_fc(x)))


class GPT2Block(nn.Module):
    """One pre-LN block, split at its attention call: before -> attend -> after (runtime.graphs.LayerSteps)."""

    def __init__(self, config: GPT2Config, index: int, site: accel.Site):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attn = GPT2Attention(config, index, site)
        self.ln_2 = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = GPT2MLP(config)

    def before(self, x: torch.Tensor, pos=()):
        """x (B, L, D) -> (q, k, v, residual); `pos` is unused (GPT-2's positions are in its input)."""
        return (*self.attn.project(self.ln_1(x)), x)

    def attend(self, q, k, v, step: AttentionStep) -> torch.Tensor:
        return self.attn.attend(q, k, v, step)

    def after(self, attended: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        x = self.attn.c_proj(attended) + residual
        return x + self.mlp(self.ln_2(x))

    def forward(self, x: torch.Tensor, step: AttentionStep) -> torch.Tensor:
        q, k, v, residual = self.before(x)
        return self.after(self.attend(q, k, v, step), residual)


class GPT2Decoder(nn.Module):
    """GPT2Model's blocks (`h`) and final norm (`ln_f`), fed embeddings. `site` is the engine's attention call
    site (each engine declares its own, approx_ok=False for an autoregressive model)."""

    def __init__(self, config: GPT2Config, site: accel.Site):
        super().__init__()
        self.config = config
        self.h = nn.ModuleList(GPT2Block(config, i, site) for i in range(config.num_layers))
        self.ln_f = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor, cache: GPT2Cache | None = None, mask: Masked | None = None) -> torch.Tensor:
        """x (B, L, D) -> ln_f(hidden) (B, L, D). With a cache, x's keys are written at [cache.length, + L) and
        the cache advances by L. `mask` None: no padding (see mask_for)."""
        past = 0 if cache is None else cache.length
        if mask is None:
            mask = self.mask_for(None, x.shape[1], past + x.shape[1], batch=x.shape[0], device=x.device)
        step = AttentionStep(cache, mask)
        for block in self.h:
            x = block(x, step)
        if cache is not None:
            cache.advance(x.shape[1])
        return self.ln_f(x)

    def new_cache(self, batch: int, capacity: int, device=None, dtype=None) -> GPT2Cache:
        weight = self.ln_f.weight
        return GPT2Cache(self.config, batch, capacity, device or weight.device, dtype or weight.dtype)

    def mask_for(self, keys: torch.Tensor | None, q_len: int, kv_len: int, padded: bool | None = None,
                 batch: int = 1, device=None, dtype: torch.dtype | None = None) -> Masked:
        """transformers' mask for `q_len` new queries against `kv_len` keys, the last `q_len` of them new.

        `keys` (B, kv_len) bool marks real keys (the attention_mask; None: all real). transformers passes no mask
        when nothing is padded and there is one query or as many queries as keys (SDPA's is_causal then does the
        prefill); deciding "nothing is padded" reads the device once, which a caller that knows passes as
        `padded` (a decode keeps the prefill's answer: its mask only grows by ones). Padding is on the left, as
        UnifiedVoice's prepare_gpt_inputs pads.
        """
        device = device if keys is None else keys.device
        device = self.ln_f.weight.device if device is None else device
        dtype = dtype or self.ln_f.weight.dtype
        if keys is None:
            padded = False
        elif padded is None:
            padded = not bool(keys.all())
        batch = batch if keys is None else keys.shape[0]
        if not padded:
            info = MaskInfo.full(batch, kv_len, device=device, causal=True)
            if q_len == 1 or q_len == kv_len:
                return Masked(None, q_len > 1, info)
            return Masked(_additive(info.dense(q_len), dtype), False, info)
        info = MaskInfo(keys, causal=True, padding="left")
        return Masked(_additive(info.dense(q_len), dtype), False, info)

    def steps(self, head_in, head_out, graphs: Graphs | None = None) -> LayerSteps:
        """The one-token step as runtime.graphs.LayerSteps: `head_in(*inputs) -> x (B, 1, D)`, the blocks (CUDA
        graphs of everything but attention when `graphs` is given), then `head_out(ln_f(x))`. Its `index` is an
        AttentionStep (the cache and this step's mask); the caller advances the cache after each step."""
        return LayerSteps(self.h, head_in, lambda x: head_out(self.ln_f(x)), graphs)


def _additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """transformers' 4-D float mask from the boolean pattern: 0 where allowed, finfo.min elsewhere; on CUDA the
    rows that allow nothing become all zeros (`_unmask_unattended`, for SDPA's memory-efficient kernel)."""
    low = torch.finfo(dtype).min
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, low)
    if allowed.device.type == "cuda":
        mask = mask.mul(~torch.all(mask == low, dim=-1, keepdim=True))
    return mask
