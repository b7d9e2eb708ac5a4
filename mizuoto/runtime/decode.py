"""A token-by-token decode loop that waits on the device once per step.

It is transformers' `_sample` loop (draw, pad finished rows, stop on EOS or length) written so that
each step reads exactly one value back: "are all rows finished, or is a row invalid?". Everything
else (the ids, the finished flags, the repetition-penalty history) stays on the device.
"""

from __future__ import annotations

from typing import Callable

import torch

from .sampling import Sampler, mark_seen, raise_if_invalid, sample, token_mask

# forward(ids (B, 1) long, step) -> logits (B, V) for the token drawn at `step`
Forward = Callable[[torch.Tensor, int], torch.Tensor]


def generate_tokens(forward: Forward, logits: torch.Tensor, sampler: Sampler, generator: torch.Generator | None,
                    max_new_tokens: int, eos_token_ids=(), pad_token_id: int | None = None,
                    seen: torch.Tensor | None = None, before_step: Callable[[int], None] | None = None):
    """Draw up to `max_new_tokens` tokens, starting from the prompt's last `logits` (B, V).

    Returns `(tokens (B, n) long, n)`. Finished rows get `pad_token_id` (as transformers pads them),
    and the loop ends when every row has drawn an EOS id or at the length limit. `seen` (B, V) bool is
    the repetition-penalty history (the prompt's ids marked), updated in place. `before_step(step)`
    runs on the host before each step (progress, cancellation), and reads nothing from the device.
    """
    batch, device = logits.shape[0], logits.device
    tokens = torch.full((batch, max_new_tokens), pad_token_id if pad_token_id is not None else 0,
                        dtype=torch.long, device=device)
    eos = token_mask(tuple(eos_token_ids), logits.shape[-1], device) if eos_token_ids else None
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    for step in range(max_new_tokens):
        if before_step is not None:
            before_step(step)
        ids, invalid = sample(logits, sampler, step, generator, seen=seen)
        if pad_token_id is not None:
            ids = ids.masked_fill(finished, pad_token_id)
        tokens[:, step] = ids
        if seen is not None:
            mark_seen(seen, ids)
        stop = invalid.any()
        if eos is not None:
            finished |= eos[ids]
            stop = stop | finished.all()
        if bool(stop):  # the step's one wait
            raise_if_invalid(invalid)
            return tokens[:, : step + 1], step + 1
        if step + 1 < max_new_tokens:
            logits = forward(ids[:, None], step)
    return tokens, max_new_tokens
