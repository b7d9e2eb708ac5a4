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
        recorded = (helpers.reference_sets().recorded_fingerprint(folder) or {}).get("id")
        here_id = helpers.machine_fingerprint()["id"]
        if recorded == here_id and not helpers.PARITY_FOREIGN:
            comparison = cls(name, True, f"fingerprint {here_id} is the writer's")
        elif recorded == here_id:
            comparison = cls(name, False, "MIZUOTO_PARITY_FOREIGN=1: acting as a machine with other floats")
        else:
            comparison = cls(name, False, f"written at fingerprint {recorded}, this machine measures {here_id}")
        return comparison

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
