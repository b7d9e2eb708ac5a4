"""CosyVoice's repetition-aware sampling (upstream's cosyvoice/utils/common.py ras_sampling, nucleus_sampling and
random_sampling, as cosyvoice2.yaml / cosyvoice3.yaml configure it: top_p 0.8, top_k 25, win_size 10, tau_r 0.1).

One step, on the log-probabilities of the speech vocabulary:
  1. nucleus: softmax, stable descending sort; keep the leading probabilities while their running float32 sum is
     below top_p and fewer than top_k are kept; draw one of them with torch.multinomial on that list as it is
     (not renormalised: multinomial normalises implicitly);
  2. repetition: if the drawn id occurs at least win_size * tau_r times (once, at the released settings) among the
     last win_size tokens, it is forbidden (-inf) and the id is drawn again from the softmax of the whole vocabulary.

The nucleus list has as many entries as the running sum allows, and multinomial draws one exponential per entry.
On the CPU the generator's consumption depends on that length (mt19937 gives one number per entry), so `ras` keeps
upstream's order by reading the length, then the drawn id, on the host: there that costs nothing.

On CUDA `DeviceRas` takes the step with one read, of the token: there torch's Philox draws give entry i the same
number whatever the tensor's length (thread i's first draw) and advance the generator by the same offset for any
length up to 256 per block, so an Exp(1) per top_k entry, with the entries past the nucleus given probability 0,
draws what upstream's shorter list draws and leaves the generator where upstream's leaves it. The running sum is
the same float32 additions in order, on the device. The repetition redraw is always computed, from a copy of the
generator, and taken (the copy's state with it) only where the one read says it was due: upstream's draws, with
no wait but the token's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
    # upstream sums 0-d tensors of the scores' dtype one by one and compares the sum with top_p (torch compares a
    # float32 tensor with a Python float in float32: top_p is rounded first): `kept`'s additions, on the host
    count = int(kept(head.cpu(), params.top_p).sum())
    choice, _ = multinomial1(head[:count], generator)
    return int(indices[:count][choice])


def ras(scores: torch.Tensor, decoded: Sequence[int], params: RasParams, generator: torch.Generator | None) -> int:
    """ras_sampling: scores (V,) log-probabilities (changed in place on a redraw, as upstream's) -> one id."""
    top = nucleus(scores, params, generator)
    repeats = sum(1 for t in decoded[-params.win_size:] if t == top)
    if repeats >= params.win_size * params.tau_r:
        scores[top] = -float("inf")
        choice, _ = multinomial1(scores.softmax(dim=0), generator)
        top = int(choice)
    return top


def kept(head: torch.Tensor, top_p: float) -> torch.Tensor:
    """Which of the leading probabilities (descending) nucleus_sampling keeps, as a bool mask, on their device:
    those whose preceding running sum (upstream's float32 additions, in its order) is below top_p."""
    total, before = torch.zeros((), dtype=head.dtype, device=head.device), []
    for value in head.unbind():
        before.append(total)
        total = total + value
    return torch.stack(before) < top_p  # a prefix: the sum only grows


class DeviceRas:
    """ras_sampling for one request without a host read but the token's (see the module's docstring): exact to
    upstream's draws on CUDA; on the CPU it draws top_k exponentials where upstream draws as many as it keeps, so
    the generator's state differs there unless every step keeps top_k (as with top_p above 1)."""

    def __init__(self, params: RasParams, device):
        self.params = params
        self.window = torch.full((params.win_size,), -1, dtype=torch.long, device=device)  # the last tokens, a ring
        self.count = 0

    def nucleus(self, scores: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """nucleus_sampling: scores (V,) -> the id (0-d long, on the device)."""
        params = self.params
        values, indices = scores.softmax(dim=0).sort(descending=True, stable=True)
        head = values[: params.top_k]
        ratio = torch.where(kept(head, params.top_p), head, 0) / torch.empty_like(head).exponential_(
            1, generator=generator)
        return indices[: params.top_k].gather(0, ratio.argmax().reshape(1)).squeeze(0)  # no host read

    def __call__(self, scores: torch.Tensor, generator: torch.Generator | None) -> int:
        """One step: scores (V,) log-probabilities -> the id."""
        params = self.params
        if generator is None:  # the device's default generator, as torch.multinomial's
            generator = torch.default_generator if scores.device.type == "cpu" else \
                torch.cuda.default_generators[scores.device.index or torch.cuda.current_device()]
        top = self.nucleus(scores, generator)
        repeated = (self.window == top).sum() >= params.win_size * params.tau_r
        spare = torch.Generator(scores.device)  # the redraw's, adopted only where it was due
        spare.set_state(generator.get_state())
        forbidden = scores.index_fill(0, top.reshape(1), -float("inf"))
        redraw = (forbidden.softmax(dim=0) / torch.empty_like(forbidden).exponential_(1, generator=spare)).argmax()
        chosen = torch.where(repeated, redraw, top)
        choice, redrawn = divmod(int(chosen * 2 + repeated), 2)  # the step's one wait: the id and the redraw
        if redrawn:
            generator.set_state(spare.get_state())
        self.window[self.count % params.win_size] = chosen
        self.count += 1
        return choice
