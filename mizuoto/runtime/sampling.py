"""Choosing the next token without waiting on the device.

`Sampler.process` applies transformers' logits processors in the order and under the conditions
`GenerationMixin._get_logits_processor` uses (repetition penalty, min new tokens, suppressed tokens, then,
when sampling, temperature, top-k, top-p) and gives bit-identical scores. `multinomial1` is
torch.multinomial's own single-sample algorithm, argmax(p / Exp(1)), without its validity checks: the
same ids and the same generator state as `torch.multinomial(p, 1, generator=g)` on CPU and CUDA.
`multinomial_draws` draws several without replacement the same way. `sample` is one step of transformers'
`_sample`.

Nothing here reads a value back from the device: no `.item()`, `.tolist()`, `nonzero`, boolean-mask
indexing, or tensors built from Python lists inside a step. Rows whose probabilities torch.multinomial
would reject are recorded in an `invalid` tensor instead; the caller reads it together with whatever else
it reads at the step's one wait, and `raise_if_invalid` raises torch.multinomial's error.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

import torch

from mizuoto.core.errors import InputError

# torch.multinomial's message for a probability tensor with inf, nan or a negative entry (torch >= 2.5).
INVALID_PROBS = "probability tensor contains either `inf`, `nan` or element < 0"

# Devices where torch.multinomial(p, 1) is exactly argmax(p / empty_like(p).exponential_(1)).
OWN_ALGORITHM_DEVICES = ("cpu", "cuda")

NEG_INF = -math.inf


@dataclass(frozen=True)
class SamplingParams:
    """transformers' GenerationConfig fields that choose the next token, with the same meaning.

    A processor is used only where transformers would add it: repetition_penalty != 1; min_new_tokens > 0
    with EOS ids; suppress_tokens non-empty; and, when do_sample, temperature != 1, top_k not None or 0
    (applied as max(top_k, min_tokens_to_keep)), top_p < 1. Unlike transformers 4.x, top_k defaults to
    None (off): an engine whose upstream relies on GenerationConfig's default must pass top_k=50.
    min_tokens_to_keep is 1 except in beam sampling, where transformers uses len(eos ids) + 1.
    """

    do_sample: bool = True
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    suppress_tokens: tuple[int, ...] = ()
    eos_token_ids: tuple[int, ...] = ()
    min_tokens_to_keep: int = 1

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        for name in ("suppress_tokens", "eos_token_ids"):
            value = getattr(self, name)
            put(name, (int(value),) if isinstance(value, int) else tuple(int(i) for i in value))
        for name in ("temperature", "top_p", "repetition_penalty"):
            put(name, float(getattr(self, name)))
        # Checked where transformers checks them: when the processor is used.
        if self.do_sample and self.temperature != 1.0 and not self.temperature > 0:
            raise InputError(f"temperature must be above 0 when sampling, got {self.temperature}")
        top_k = self.top_k
        whole = isinstance(top_k, numbers.Integral) and not isinstance(top_k, bool)
        if self.do_sample and top_k is not None and not (whole and top_k >= 0):
            raise InputError(f"top_k must be a positive integer, 0 or None, got {top_k!r}")
        if self.do_sample and not 0.0 <= self.top_p <= 1.0:
            raise InputError(f"top_p must be from 0 to 1, got {self.top_p}")
        if self.repetition_penalty != 1.0 and not self.repetition_penalty > 0:
            raise InputError(f"repetition_penalty must be above 0, got {self.repetition_penalty}")
        if self.min_new_tokens < 0:
            raise InputError(f"min_new_tokens must be 0 or more, got {self.min_new_tokens}")
        if self.min_tokens_to_keep < 1:
            raise InputError(f"min_tokens_to_keep must be 1 or more, got {self.min_tokens_to_keep}")


def check_race_sampling(top_p: float, temperature: float, repetition_penalty: float) -> None:
    """The values an upstream `logits_to_probs` sampler (gpt-fast's: top-p, temperature, repetition penalty, then
    the exponential race) accepts; anything else is a one-line InputError naming it."""
    if not 0.0 < top_p <= 1.0:
        raise InputError(f"top_p must be above 0 and at most 1, got {top_p}")
    if not temperature > 0:
        raise InputError(f"temperature must be above 0, got {temperature}")
    if not repetition_penalty > 0:
        raise InputError(f"repetition_penalty must be above 0, got {repetition_penalty}")


def _device(device) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


@functools.lru_cache(maxsize=64)
def _token_mask(ids: tuple[int, ...], vocab_size: int, device: torch.device) -> torch.Tensor:
    # Ids outside the vocabulary match nothing, as in transformers' isin over arange(vocab_size).
    inside = torch.tensor([i for i in ids if 0 <= i < vocab_size], dtype=torch.long)
    return torch.zeros(vocab_size, dtype=torch.bool).index_fill_(0, inside, True).to(device)


def token_mask(ids, vocab_size: int, device) -> torch.Tensor:
    """A (vocab_size,) bool mask of `ids` on `device`, built once per device and reused (do not modify it)."""
    return _token_mask(tuple(sorted(set(int(i) for i in ids))), int(vocab_size), _device(device))


# ---------------------------------------------------------------------------------------------------
# The processors, one function each.


def seen_mask(input_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The (B, vocab_size) bool mask of the ids in `input_ids` (B, T): the prompt, before the first step."""
    if input_ids.dim() == 1:
        input_ids = input_ids.unsqueeze(1)
    seen = torch.zeros(input_ids.shape[0], vocab_size, dtype=torch.bool, device=input_ids.device)
    return seen.scatter_(1, input_ids, True)


def mark_seen(seen: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Adds the ids drawn this step ((B,) or (B, k)) to `seen` in place; its shape never changes."""
    return seen.scatter_(1, ids.reshape(seen.shape[0], -1), True)


def repetition_penalty_seen(scores: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """transformers' repetition penalty on the ids marked in `seen`: s < 0 ? s * penalty : s / penalty."""
    penalized = torch.where(scores < 0, scores * penalty, scores / penalty)
    return torch.where(seen, penalized, scores)


def apply_repetition_penalty(scores: torch.Tensor, input_ids: torch.Tensor, penalty: float) -> torch.Tensor:
    """The same from all previous ids (prompt included), as RepetitionPenaltyLogitsProcessor takes them."""
    return repetition_penalty_seen(scores, seen_mask(input_ids, scores.shape[-1]), penalty)


def top_k_filter(scores: torch.Tensor, top_k: int) -> torch.Tensor:
    """TopKLogitsWarper: -inf below the k-th largest score (ties with it are kept)."""
    kth = torch.topk(scores, min(top_k, scores.shape[-1])).values[..., -1:]
    return scores.masked_fill(scores < kth, NEG_INF)


def top_p_filter(scores: torch.Tensor, top_p: float, min_tokens_to_keep: int = 1) -> torch.Tensor:
    """TopPLogitsWarper: in ascending order, drop the scores whose cumulative probability is <= 1 - top_p,
    never the last min_tokens_to_keep."""
    droppable = scores.shape[-1] - min_tokens_to_keep
    if droppable <= 0:
        return scores
    ascending, order = torch.sort(scores, descending=False)
    cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
    drop_sorted = cumulative[..., :droppable] <= 1 - top_p
    drop = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, order[..., :droppable], drop_sorted)
    return scores.masked_fill(drop, NEG_INF)


class Sampler:
    """transformers' logits processors for one request on one device, masks built once per device."""

    def __init__(self, params: SamplingParams, vocab_size: int, device):
        self.params = p = params
        self.vocab_size = vocab_size
        self.device = _device(device)
        self.penalty = p.repetition_penalty if p.repetition_penalty != 1.0 else None
        self.min_new_tokens = p.min_new_tokens if p.eos_token_ids else 0
        self.eos_mask = token_mask(p.eos_token_ids, vocab_size, self.device) if self.min_new_tokens else None
        self.suppress_mask = token_mask(p.suppress_tokens, vocab_size, self.device) if p.suppress_tokens else None
        self.temperature = p.temperature if p.do_sample and p.temperature != 1.0 else None
        self.top_k = max(p.top_k, p.min_tokens_to_keep) if p.do_sample and p.top_k else None
        self.top_p = p.top_p if p.do_sample and p.top_p < 1.0 else None

    @property
    def needs_history(self) -> bool:
        """Whether `process` needs `seen` or `input_ids` (only the repetition penalty does)."""
        return self.penalty is not None

    def process(self, scores: torch.Tensor, new_tokens: int = 0, *, seen: torch.Tensor | None = None,
                input_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The processed (B, V) float32 scores. `new_tokens` is the number of tokens generated before this
        step, a host int; the repetition penalty reads `seen` ((B, V) bool) or else `input_ids` (B, T)."""
        if isinstance(new_tokens, torch.Tensor):
            raise TypeError("new_tokens must be a host int: comparing a tensor would wait on the device")
        if self.penalty is not None:
            if seen is not None:
                scores = repetition_penalty_seen(scores, seen, self.penalty)
            elif input_ids is not None:
                scores = apply_repetition_penalty(scores, input_ids, self.penalty)
            else:
                raise ValueError("the repetition penalty needs `seen` or `input_ids`")
        if new_tokens < self.min_new_tokens:
            scores = scores.masked_fill(self.eos_mask, NEG_INF)
        if self.suppress_mask is not None:
            scores = scores.masked_fill(self.suppress_mask, NEG_INF)
        if self.temperature is not None:
            scores = scores / self.temperature
        if self.top_k is not None:
            scores = top_k_filter(scores, self.top_k)
        if self.top_p is not None:
            scores = top_p_filter(scores, self.top_p, self.params.min_tokens_to_keep)
        return scores


# ---------------------------------------------------------------------------------------------------
# Drawing.


def invalid_rows(probs: torch.Tensor) -> torch.Tensor:
    """Per row, whether torch.multinomial would reject it: a nan, inf or negative entry, or a zero sum."""
    low, high = torch.aminmax(probs, dim=-1)
    # With no negative entry, the sum is 0 exactly when the largest entry is; nan fails every comparison.
    return ~((low >= 0) & (high < math.inf) & (high > 0))


def _exponential_ratio(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    # torch.multinomial's own draw: one Exp(1) per entry, in p's dtype and layout.
    return probs / torch.empty_like(probs).exponential_(1, generator=generator)


def multinomial1(probs: torch.Tensor, generator: torch.Generator | None = None):
    """`(ids, invalid)`: ids as torch.multinomial(probs, 1, generator=generator) draws them, (B, 1) long, and
    the generator left in the same state; invalid is (B,) bool, True for rows torch.multinomial rejects.

    `probs` need not be normalised. On devices other than CPU and CUDA this calls torch.multinomial (which
    checks, and may wait) and invalid is all False.
    """
    if probs.device.type not in OWN_ALGORITHM_DEVICES:
        return torch.multinomial(probs, 1, generator=generator), _none_invalid(probs)
    return _exponential_ratio(probs, generator).argmax(dim=-1, keepdim=True), invalid_rows(probs)


def multinomial_draws(probs: torch.Tensor, n: int, generator: torch.Generator | None = None):
    """`(ids, invalid)`: n ids per row drawn without replacement, as torch.multinomial(probs, n,
    replacement=False, generator=generator) draws them (the same ids, in the same order, and the same
    generator state); ids is (B, n) long."""
    if n <= 0:
        raise ValueError(f"cannot draw {n} samples")
    if n > probs.shape[-1]:
        raise ValueError(f"cannot draw {n} samples without replacement from {probs.shape[-1]} categories")
    if n == 1:  # torch.multinomial takes argmax here, which settles ties as topk may not
        return multinomial1(probs, generator)
    if probs.device.type not in OWN_ALGORITHM_DEVICES:
        return torch.multinomial(probs, n, replacement=False, generator=generator), _none_invalid(probs)
    return torch.topk(_exponential_ratio(probs, generator), n).indices, invalid_rows(probs)


def _none_invalid(probs: torch.Tensor) -> torch.Tensor:
    return torch.zeros(probs.shape[:-1], dtype=torch.bool, device=probs.device)


def raise_if_invalid(invalid) -> None:
    """At the step's one wait: raise torch.multinomial's RuntimeError if any row was invalid.

    `invalid` is the tensor from `multinomial1` (read here, which waits) or a host bool the caller already
    read. A row whose probabilities are all zero, which softmax never gives, gets this message too, where
    torch.multinomial says "invalid multinomial distribution (sum of probabilities <= 0)".
    """
    if isinstance(invalid, torch.Tensor):
        invalid = bool(invalid.any())
    if invalid:
        raise RuntimeError(INVALID_PROBS)


def sample(logits: torch.Tensor, sampler: Sampler, new_tokens: int = 0, generator: torch.Generator | None = None,
           *, seen: torch.Tensor | None = None, input_ids: torch.Tensor | None = None):
    """One step of transformers' `_sample`: `(next_tokens (B,) long, invalid (B,) bool)`.

    `logits` is (B, V) or (B, T, V) (its last position is used), taken as float32. The caller substitutes
    padding for finished rows, marks the ids in `seen` (mark_seen) and calls raise_if_invalid at its wait.
    """
    if logits.dim() == 3:
        logits = logits[:, -1, :]
    scores = sampler.process(logits.to(torch.float32), new_tokens, seen=seen, input_ids=input_ids)
    if sampler.params.do_sample:
        probs = torch.softmax(scores, dim=-1)
        if probs.device.type not in OWN_ALGORITHM_DEVICES:
            ids, invalid = multinomial1(probs, generator)
            return ids.squeeze(-1), invalid
        # A softmax row is either free of nan or all nan (a nan or an all -inf row of scores), and has
        # no inf, negative or zero-sum case: its first entry tells whether torch.multinomial would
        # reject it, for one launch instead of invalid_rows' seven.
        return _exponential_ratio(probs, generator).argmax(dim=-1), probs[..., 0].isnan()
    return scores.argmax(dim=-1), _none_invalid(scores)
