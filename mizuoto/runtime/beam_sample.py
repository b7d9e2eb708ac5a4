"""Beam-search multinomial sampling, as IndexTTS 2's GPT generates its mel codes.

IndexTTS 2 calls `GPT2InferenceModel.generate(do_sample=True, num_beams=3, top_p=0.8, top_k=30, temperature=0.8,
repetition_penalty=10.0, length_penalty=0.0, num_return_sequences=1, max_length=..., eos = pad = stop_mel_token)`.
That model's GenerationMixin is the copy upstream vendors (indextts/gpt/transformers_generation_utils.py), and its
`_beam_search` (beam sampling when do_sample) drives transformers 4.52.1's own BeamSearchScorer and BeamHypotheses
(transformers.generation.beam_search: the vendored transformers_beam_search.py is imported by nothing). `beam_sample`
gives the same tokens, bit for bit, from the same logits and the same generator. One step, per row of B * K (K beams):

  1. the float32 log_softmax of the row's logits;
  2. transformers' processors in its order (mizuoto.runtime.sampling.Sampler): the repetition penalty over every id
     the row holds, prompt included (IndexTTS's prompt is placeholder 1s and start_mel_token: both are penalised),
     temperature, top-k as max(top_k, 2), top-p keeping at least 2 (min_tokens_to_keep = 1 + one eos id);
  3. + the beam's score; per batch item the K * V scores, their softmax, and one torch.multinomial without
     replacement of 2K candidates (`multinomial_draws`: the same draws and generator state), their scores gathered
     and sorted descending (torch.sort, as upstream), split into beam (// V) and token (% V);
  4. the scorer: in rank order, an eos among the first K ranks ends its beam as a hypothesis (its score, a Python
     float upstream: float64 here, / generated_len ** length_penalty), an eos ranked lower is dropped, and the first
     K other candidates are the next beams. A hypothesis list keeps the K best: below K it takes every one; full, it
     takes one scoring above its worst, dropping the worst (the earliest added among equal worsts). A batch item is
     done when its list is full and (early_stopping False) its worst >= the step's best candidate score /
     (cur_len - prompt_len) ** length_penalty; done items then carry score 0, the pad token and row 0.
Beam scores start at 0 for beam 0 and -1e9 for the others. Generation stops when every item is done or the length
reaches max_length; `finalize` adds each unfinished item's K beams to its list, takes the best (the highest score,
the latest added among equals), appends eos where the hypothesis is shorter than the output, pads with `pad`.
num_beams 1 is transformers' `_sample` instead (processors on the raw logits, keeping 1; one token per row; rows
past eos get pad; stop when every row has ended).

What differs: nothing of upstream's waits. The hypothesis lists are tensors (scores, insertion order, lengths and
tokens per slot), each of the K possible additions of a step applied in turn with tensor ops, so a step reads one
value back from the device: whether every item is done (and whether torch.multinomial would have rejected the
probabilities: then its error is raised there). `finalize` reads once more, for the output's length.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import torch

from mizuoto.core.errors import InputError
from mizuoto.runtime.sampling import (
    INVALID_PROBS,
    Sampler,
    SamplingParams,
    mark_seen,
    multinomial1,
    multinomial_draws,
    seen_mask,
)

# `step(tokens (R,) long, rows (R,) long) -> logits (R, V)`: append tokens[i] to the sequence that row rows[i] held
# (reorder the cache by `rows` first), and return the next logits of every row.
Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

FIRST_STEP_OTHER_BEAMS = -1e9  # beams 1.. start here, so the first step draws from beam 0 alone
EARLY_STOPPING = (False, True, "never")


def beam_sample(step: Step, first_logits: torch.Tensor, prompt_ids: torch.Tensor, *, eos: int, pad: int,
                max_new_tokens: int, num_beams: int = 3, top_k: int | None = 30, top_p: float = 0.8,
                temperature: float = 0.8, repetition_penalty: float = 10.0, length_penalty: float = 0.0,
                early_stopping: bool | str = False, num_return_sequences: int = 1,
                generator: torch.Generator | None = None, lookahead: bool = False) -> torch.Tensor:
    """transformers' generate(do_sample=True, num_beams=...) from logits: the generated tokens (prompt excluded),
    (B * num_return_sequences, T) long on the logits' device, as upstream's `output[:, trunc_index:]`.

    `prompt_ids` (B, P) are the ids the repetition penalty sees before the first step (upstream's input_ids).
    `first_logits` are the logits after the prompt, (B * num_beams, V) as transformers computes them on the
    expanded prompt, or (B, V) (then repeated). `step` gives the logits after each chosen token (see `Step`); with
    num_beams 1 its rows argument is always arange(R). `generator` None is the device's default generator, as
    upstream's torch.multinomial takes. The defaults are IndexTTS 2's (infer_v2.py); max_length is
    prompt length + max_new_tokens. top_k None or 0 is off (transformers' GenerationConfig would default to 50).

    `lookahead` calls `step` for the next logits before the step's read, so the device has the next forward queued
    while the host waits: the same tokens, but `step` is also called after the last token (its logits unused)
    unless max_new_tokens was reached.
    """
    k = _check_int("num_beams", num_beams, 1)
    n = _check_int("num_return_sequences", num_return_sequences, 1)
    steps = _check_int("max_new_tokens", max_new_tokens, 1)
    if k > 1 and n > k:
        raise InputError(f"num_return_sequences must be at most num_beams ({k}), got {n}")
    if early_stopping not in EARLY_STOPPING or isinstance(early_stopping, numbers.Number) and \
            not isinstance(early_stopping, bool):
        raise InputError(f"early_stopping must be True, False or 'never', got {early_stopping!r}")
    if not isinstance(length_penalty, numbers.Real) or not math.isfinite(length_penalty):
        raise InputError(f"length_penalty must be a finite number, got {length_penalty!r}")
    if not isinstance(prompt_ids, torch.Tensor) or prompt_ids.dim() != 2 or prompt_ids.dtype != torch.long:
        raise InputError("prompt_ids must be a (batch, length) long tensor")
    if not isinstance(first_logits, torch.Tensor) or first_logits.dim() != 2 or \
            not first_logits.is_floating_point():
        raise InputError("first_logits must be a (rows, vocab) float tensor")
    batch, vocab = prompt_ids.shape[0], first_logits.shape[1]
    per_item = k if k > 1 else n
    if first_logits.shape[0] == batch and per_item > 1:
        first_logits = first_logits.repeat_interleave(per_item, dim=0)
    if first_logits.shape[0] != batch * per_item:
        raise InputError(f"first_logits must have {batch} or {batch * per_item} rows "
                         f"(batch x {'num_beams' if k > 1 else 'num_return_sequences'}), got {first_logits.shape[0]}")
    for name, value in (("eos", eos), ("pad", pad)):
        if not isinstance(value, numbers.Integral) or not 0 <= value < vocab:
            raise InputError(f"{name} must be a token id below the vocabulary size {vocab}, got {value!r}")
    if k > 1 and vocab < 2:
        raise InputError("beam sampling needs a vocabulary of 2 or more")
    params = SamplingParams(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p,
                            repetition_penalty=repetition_penalty, eos_token_ids=(int(eos),),
                            min_tokens_to_keep=2 if k > 1 else 1)
    sampler = Sampler(params, vocab, first_logits.device)
    seen = seen_mask(prompt_ids.to(first_logits.device), vocab).repeat_interleave(per_item, dim=0)
    if k == 1:
        return _sample(step, first_logits, seen, sampler, int(eos), int(pad), steps, generator, bool(lookahead))
    return _BeamSearch(batch, k, n, vocab, int(eos), int(pad), steps, float(length_penalty), early_stopping,
                       first_logits.device).run(step, first_logits, seen, sampler, generator, bool(lookahead))


def _check_int(name: str, value, least: int) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < least:
        raise InputError(f"{name} must be an integer of {least} or more, got {value!r}")
    return int(value)


def _raise_invalid() -> None:
    raise RuntimeError(INVALID_PROBS)


def _sample(step: Step, logits: torch.Tensor, seen: torch.Tensor, sampler: Sampler, eos: int, pad: int,
            steps: int, generator, lookahead: bool) -> torch.Tensor:
    """transformers' `_sample` with do_sample (num_beams 1): one token per row, pad once a row has ended."""
    rows, device = logits.shape[0], logits.device
    same_rows = torch.arange(rows, device=device)
    generated = torch.full((rows, steps), pad, dtype=torch.long, device=device)
    running = torch.ones(rows, dtype=torch.bool, device=device)
    taken = 0
    while True:
        scores = sampler.process(logits.to(torch.float32), taken, seen=seen)
        tokens, invalid = multinomial1(torch.softmax(scores, dim=-1), generator)
        tokens = torch.where(running, tokens.squeeze(-1), pad)
        generated[:, taken] = tokens
        mark_seen(seen, tokens)
        running = running & (tokens != eos)
        taken += 1
        ahead = step(tokens, same_rows) if lookahead and taken < steps else None
        flags = int(running.any().to(torch.int8) + 2 * invalid.any().to(torch.int8))  # the step's one read
        if flags & 2:
            _raise_invalid()
        if not flags & 1 or taken >= steps:
            return generated[:, :taken]
        logits = ahead if ahead is not None else step(tokens, same_rows)


class _BeamSearch:
    """The beams and every item's hypothesis list, as tensors on the device."""

    def __init__(self, batch: int, beams: int, keep: int, vocab: int, eos: int, pad: int, steps: int,
                 length_penalty: float, early_stopping, device):
        self.batch, self.beams, self.keep, self.vocab = batch, beams, keep, vocab
        self.eos, self.pad, self.steps = eos, pad, steps
        self.length_penalty, self.early_stopping = length_penalty, early_stopping
        b, k = batch, beams
        self.item_first_row = (torch.arange(b, device=device) * k)[:, None]  # (B, 1)
        self.slots = torch.arange(k, device=device)
        # the hypothesis lists: K slots per item; an empty slot scores +inf so it is never the worst
        self.hyp_score = torch.full((b, k), math.inf, dtype=torch.float64, device=device)
        self.hyp_order = torch.zeros((b, k), dtype=torch.long, device=device)  # when it was added (list order)
        self.hyp_len = torch.zeros((b, k), dtype=torch.long, device=device)
        self.hyp_tokens = torch.full((b, k, steps), pad, dtype=torch.long, device=device)
        self.count = torch.zeros(b, dtype=torch.long, device=device)
        self.worst = torch.full((b,), 1e9, dtype=torch.float64, device=device)
        self.done = torch.zeros(b, dtype=torch.bool, device=device)
        self.generated = torch.full((b * k, steps), pad, dtype=torch.long, device=device)
        scores = torch.zeros((b, k), dtype=torch.float32, device=device)
        scores[:, 1:] = FIRST_STEP_OTHER_BEAMS
        self.beam_scores = scores.view(-1)

    def denominator(self, length: int) -> float:
        return float(length ** self.length_penalty)  # Python's pow, as BeamHypotheses takes it

    def add(self, allowed: torch.Tensor, score: torch.Tensor, tokens: torch.Tensor, length: int, order: int) -> None:
        """BeamHypotheses.add for the items where `allowed`: score (B,) float64, tokens (B, steps) the
        hypothesis (its first `length` count), `order` its place in the list (it only grows)."""
        full = self.count >= self.beams
        accept = allowed & (~full | (score > self.worst))
        lowest = self.hyp_score.amin(dim=1, keepdim=True)
        earliest_worst = torch.where(self.hyp_score == lowest, self.hyp_order, torch.iinfo(torch.long).max).argmin(1)
        slot = torch.where(full, earliest_worst, self.count.clamp(max=self.beams - 1))
        put = (self.slots == slot[:, None]) & accept[:, None]  # (B, K)
        self.hyp_score = torch.where(put, score[:, None], self.hyp_score)
        self.hyp_order = torch.where(put, order, self.hyp_order)
        self.hyp_len = torch.where(put, length, self.hyp_len)
        self.hyp_tokens = torch.where(put[..., None], tokens[:, None, :], self.hyp_tokens)
        worst = torch.where(full, self.hyp_score.amin(dim=1), torch.minimum(score, self.worst))
        self.worst = torch.where(accept, worst, self.worst)
        self.count = torch.where(accept, (self.count + 1).clamp(max=self.beams), self.count)

    def choose(self, logits: torch.Tensor, seen: torch.Tensor, sampler: Sampler, taken: int, generator):
        """One step of `_beam_search` with do_sample: (tokens, rows) of the next beams, and `invalid`."""
        b, k, v = self.batch, self.beams, self.vocab
        scores = torch.log_softmax(logits.to(torch.float32), dim=-1)
        scores = sampler.process(scores, taken, seen=seen) + self.beam_scores[:, None]
        flat = scores.view(b, k * v)
        drawn, invalid = multinomial_draws(torch.softmax(flat, dim=-1), 2 * k, generator)
        ranked, order = torch.sort(flat.gather(1, drawn), descending=True, dim=1)
        drawn = drawn.gather(1, order)
        beam, token = torch.div(drawn, v, rounding_mode="floor"), drawn % v
        rows = self.item_first_row + beam  # (B, 2K)
        is_eos = token == self.eos

        # the first K ranks that are not eos continue (at most K of the 2K are eos: one per beam)
        rank = torch.arange(2 * k, device=logits.device)
        go_on = torch.topk(is_eos.long() * (2 * k) + rank, k, dim=1, largest=False, sorted=True).indices
        open_items = ~self.done
        # an eos among the first K ranks ends its beam, in rank order (BeamSearchScorer.process)
        length, denominator = taken + 1, self.denominator(taken + 1)
        history = self.generated.view(b, k, -1)
        for j in range(k):
            tokens = history.gather(1, beam[:, j, None, None].expand(b, 1, self.steps)).squeeze(1)
            self.add(open_items & is_eos[:, j], ranked[:, j].double() / denominator, tokens, taken,
                     order=taken * (k + 1) + j)
        best = ranked.amax(dim=1).double()
        if self.early_stopping is True:
            finished = self.count >= k
        else:
            if self.early_stopping == "never" and self.length_penalty > 0.0:
                length = self.steps
            finished = (self.count >= k) & (self.worst >= best / self.denominator(length))
        next_scores = torch.where(open_items[:, None], ranked.gather(1, go_on), 0.0)
        next_tokens = torch.where(open_items[:, None], token.gather(1, go_on), self.pad)
        next_rows = torch.where(open_items[:, None], rows.gather(1, go_on), 0)
        self.done = self.done | finished
        self.beam_scores = next_scores.view(-1)
        return next_tokens.view(-1), next_rows.view(-1), invalid

    def run(self, step: Step, logits: torch.Tensor, seen: torch.Tensor, sampler: Sampler, generator,
            lookahead: bool) -> torch.Tensor:
        taken = 0
        while True:
            tokens, rows, invalid = self.choose(logits, seen, sampler, taken, generator)
            self.generated = self.generated.index_select(0, rows)
            self.generated[:, taken] = tokens
            seen = mark_seen(seen.index_select(0, rows), tokens)
            taken += 1
            ahead = step(tokens, rows) if lookahead and taken < self.steps else None
            flags = int(self.done.all().to(torch.int8) + 2 * invalid.any().to(torch.int8))  # the step's one read
            if flags & 2:
                _raise_invalid()
            if flags & 1 or taken >= self.steps:
                return self.finalize(taken)
            logits = ahead if ahead is not None else step(tokens, rows)

    def finalize(self, taken: int) -> torch.Tensor:
        """BeamSearchScorer.finalize: the unfinished items' beams join their lists; the best of each list."""
        b, k, n = self.batch, self.beams, self.keep
        history = self.generated.view(b, k, -1)
        scores = self.beam_scores.view(b, k).double() / self.denominator(taken)
        for i in range(k):
            self.add(~self.done, scores[:, i], history[:, i], taken, order=(self.steps + 1) * (k + 1) + i)
        # sorted by score, the latest added last among equals, popped from the end
        by_order = self.hyp_order.argsort(dim=1, descending=True, stable=True)
        best = by_order.gather(1, self.hyp_score.gather(1, by_order).argsort(dim=1, descending=True, stable=True))
        best = best[:, :n]
        lengths = self.hyp_len.gather(1, best).reshape(-1)  # (B * n,)
        tokens = self.hyp_tokens.gather(1, best[..., None].expand(b, n, self.steps)).reshape(b * n, self.steps)
        width = min(int(lengths.max()) + 1, self.steps)  # finalize's one read
        out = tokens[:, :width]
        position = torch.arange(width, device=out.device)
        out = torch.where(position < lengths[:, None], out, self.pad)
        return torch.where(position == lengths[:, None], self.eos, out)
