"""Comparisons against a reference set whose upstream cannot run where the tests run (GitHub-only upstreams:
CosyVoice, IndexTTS, GPT-SoVITS, Fish Speech S2), so it cannot be rewritten on a machine with other floats.

Where the set's recorded fingerprint is this machine's (scripts/parity/fingerprint.py), every comparison is
exact, as for every other set. Elsewhere it falls back to a comparison that cannot flake:
- a deterministic stage (no feedback: an encoder, a vocoder, a prefill) is within a tolerance stated by the
  test and justified by a measured spread (how far the stage moves on this machine when the pins are lifted;
  each writer's --spread mode measures it);
- an autoregressive stage is teacher-forced: upstream's recorded tokens are fed in, so one rounding cannot
  change the path; its logits are within tolerance, and the greedy choice is upstream's wherever upstream's
  top-2 gap exceeds the tolerance (a measured spread is several times below it, so only a closer pair can
  swap without an error);
- what only follows from free running (sampled tokens, the waveform they make) is compared in exact mode
  alone, and reported as not compared in the fallback.
The fingerprint's battery cannot hold every op at every size: a set whose free-running waveform is that sensitive
stores a probe (its decoder on upstream's recorded tokens and seed), checked first; a probe that moved within its
tolerance where the fingerprint is the writer's turns the rest of the set to the fallback (`probe`).
Every call records what it checked; the mode is printed at the end of the test run (conftest.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import helpers
import torch


@dataclass
class Comparison:
    """How one reference set is compared on this machine."""

    name: str
    exact: bool
    why: str
    checked: list[str] = field(default_factory=list)

    @classmethod
    def for_folder(cls, name: str, folder: Path) -> "Comparison":
        """Exact where the set in `folder` was written at this machine's fingerprint, else the fallback."""
        same, why = helpers.writers_floats(name, folder)
        if same and helpers.PARITY_FOREIGN:
            return cls(name, False, "MIZUOTO_PARITY_FOREIGN=1: acting as a machine with other floats")
        return cls(name, same, why)

    @classmethod
    def for_set(cls, name: str) -> "Comparison":
        """The comparison of committed set `name`, reported at the end of the run (conftest.py)."""
        comparison = cls.for_folder(name, helpers.reference_sets().SETS[name].committed)
        helpers.PARITY_MODES[name] = (("exact" if comparison.exact else "tolerance fallback") +
                                      f", committed references ({comparison.why})")
        return comparison

    @property
    def mode(self) -> str:
        return "exact" if self.exact else "tolerance"

    def deterministic(self, what: str, ours: torch.Tensor, theirs: torch.Tensor, tol: float) -> None:
        """A stage without feedback: identical bits, or (fallback) every element within `tol`."""
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, \
            f"{what}: {tuple(ours.shape)} {ours.dtype} vs upstream's {tuple(theirs.shape)} {theirs.dtype}"
        worst = (ours.double() - theirs.double()).abs().max().item() if ours.numel() else 0.0
        if self.exact:
            assert torch.equal(ours, theirs), f"{what}: max |diff| {worst:.3e} where the floats are the writer's"
        else:
            assert worst <= tol, f"{what}: max |diff| {worst:.3e} over the tolerance {tol:.1e}"
        self.checked.append(f"{what}: {self.mode}, max |diff| {worst:.3e}")

    def probe(self, what: str, ours: torch.Tensor, theirs: torch.Tensor, tol: float) -> None:
        """A deterministic stage that runs the arithmetic of the free-running outputs that follow it (a decoder
        on upstream's recorded tokens and seed): the fingerprint's battery cannot hold every op at every size, so
        where it names the writer's floats but this stage differs within `tol`, this machine's floats differ in
        an op the battery lacks and the rest of the set is compared as on another machine (the fallback). Over
        `tol` is an error in either mode."""
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, \
            f"{what}: {tuple(ours.shape)} {ours.dtype} vs upstream's {tuple(theirs.shape)} {theirs.dtype}"
        worst = (ours.double() - theirs.double()).abs().max().item() if ours.numel() else 0.0
        assert worst <= tol, f"{what}: max |diff| {worst:.3e} over the tolerance {tol:.1e}"
        if self.exact and not torch.equal(ours, theirs):
            self.exact = False
            self.why += f"; but {what} moved by {worst:.1e}: floats differ in an op the battery lacks"
            if self.name in helpers.PARITY_MODES:  # a committed set's (for_set), reported at the end of the run
                helpers.PARITY_MODES[self.name] = f"tolerance fallback, committed references ({self.why})"
        self.checked.append(f"{what}: {self.mode}, max |diff| {worst:.3e}")

    def teacher_forced(self, what: str, ours_logits: torch.Tensor, theirs_logits: torch.Tensor, tol: float) -> None:
        """Logits of an autoregressive stage run on upstream's tokens, (steps, vocab): identical, or (fallback)
        within `tol` with upstream's argmax wherever its top-2 gap exceeds `tol`."""
        self.deterministic(f"{what} (teacher-forced)", ours_logits, theirs_logits, tol)
        if self.exact:
            return
        top2 = theirs_logits.double().topk(2, dim=-1).values
        decided = (top2[..., 0] - top2[..., 1]) > tol
        agree = ours_logits.argmax(-1) == theirs_logits.argmax(-1)
        assert bool(agree[decided].all()), f"{what}: a greedy choice differs where upstream's top-2 gap > {tol:.1e}"
        self.checked.append(f"{what}: greedy argmax upstream's on {int(decided.sum())} of {decided.numel()} steps "
                            f"(the rest closer than the tolerance)")

    def free_running(self, what: str, ours: torch.Tensor, theirs: torch.Tensor) -> bool:
        """What free running makes (tokens, their waveform): identical in exact mode; not compared in the
        fallback, where one rounding may change a later choice. Returns whether it was compared."""
        if not self.exact:
            self.checked.append(f"{what}: not compared (free running, tolerance fallback)")
            return False
        assert ours.shape == theirs.shape and torch.equal(ours, theirs), f"{what}: differs from upstream's"
        self.checked.append(f"{what}: exact")
        return True
