"""CosyVoice's repetition-aware sampling (upstream's cosyvoice/utils/common.py ras_sampling, nucleus_sampling and
random_sampling, as cosyvoice2.yaml / cosyvoice3.yaml configure it: top_p 0.8, top_k 25, win_size 10, tau_r 0.1).

One step, on the log-probabilities of the speech vocabulary:
  1. nucleus: softmax, stable descending sort; keep the leading probabilities while their running float32 sum is
     below top_p and fewer than top_k are kept; draw one of them with torch.multinomial on that list as it is
     (not renormalised: multinomial normalises implicitly);
  2. repetition: if the drawn id occurs at least win_size * tau_r times (once, at the released settings) among the
     last win_size tokens, it is forbidden (-inf) and the id is drawn again from the softmax of the whole vocabulary.

The nucleus list has as many entries as the running sum allows, and multinomial draws one exponential per entry,
so the generator's consumption depends on that length: upstream's order is kept by reading the length (and the
repetition decision) on the host. On the CPU that read costs nothing; a CUDA decode pays it once per step, as
upstream does (its `.item()` calls), and the draws stay upstream's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from mizuoto.runtime.sampling import multinomial1


@dataclass(frozen=True)
class RasParams:
    top_p: float = 0.8
    top_k: int = 25
    win_size: int = 10
    tau_r: float = 0.1


RELEASED = RasParams()  # both released yamls


def nucleus(scores: torch.Tensor, params: RasParams, generator: torch.Generator | None) -> int:
    """nucleus_sampling: scores (V,) -> one id."""
    values, indices = scores.softmax(dim=0).sort(descending=True, stable=True)
    head = values[: params.top_k]
    # upstream sums 0-d float32 tensors one by one and compares the sum with top_p: float32 additions in order
    # (torch compares a float32 tensor with a Python float in float32: top_p is rounded to float32 first)
    leading, top_p = head.cpu().numpy(), np.float32(params.top_p)
    total, kept = np.float32(0.0), 0
    for value in leading:
        if not (total < top_p and kept < params.top_k):
            break
        total = np.float32(total + value)
        kept += 1
    choice, _ = multinomial1(head[:kept], generator)
    return int(indices[:kept][choice])


def ras(scores: torch.Tensor, decoded: Sequence[int], params: RasParams, generator: torch.Generator | None) -> int:
    """ras_sampling: scores (V,) log-probabilities (changed in place on a redraw, as upstream's) -> one id."""
    top = nucleus(scores, params, generator)
    repeats = sum(1 for t in decoded[-params.win_size:] if t == top)
    if repeats >= params.win_size * params.tau_r:
        scores[top] = -float("inf")
        choice, _ = multinomial1(scores.softmax(dim=0), generator)
        top = int(choice)
    return top
