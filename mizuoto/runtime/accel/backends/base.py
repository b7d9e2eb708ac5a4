"""Backend: one attention kernel, what it can take, and how to call it without global state."""

from __future__ import annotations

from ..call import Args, Call


class Backend:
    """An attention kernel behind the dispatcher.

    Subclasses declare what the kernel supports (devices, backward, dropout, exactness) and implement
    `constraints(call)`, which rejects calls it cannot take (a short reason such as "head dim 80"),
    and `run(q, k, v, args)`, which takes the dispatcher's (batch, heads, length, dim) layout and
    does every layout change, GQA expansion and head-dim padding itself. `run` never mutates its
    inputs and returns a new tensor in the query's layout and dtype.

    Optional kernels import their package in `load()`, which the probe calls the first time a policy
    wants the backend on a device; nothing is imported at Mizuoto's import time.
    """

    name: str = ""
    package: str | None = None  # distribution name whose version metadata is checked (None: torch itself)
    devices: tuple[str, ...] = ("cuda",)  # device types it can run on
    exact: bool = True  # False for quantised kernels (SageAttention), refused by approx_ok=False sites
    backward: bool = True  # usable under autograd
    dropout: bool = False  # supports dropout_p > 0
    tolerance: float = 2e-3  # self-test: max |error| against fp32 math on 1 x 2 x 64 x D fp16 inputs
    self_test_head_dim: int = 64
    install: str | None = None  # the command doctor prints; {torch} is the installed torch version

    def version_problem(self, version: str | None) -> str | None:
        """Reject versions known to be broken; `version` is read from metadata (None: not installed)."""
        return None

    def load(self) -> None:
        """Import the kernel's package (raise ImportError or OSError when it cannot be used)."""

    def device_problem(self, device) -> str | None:
        """Reject a device the kernel cannot run on (compute capability, architecture)."""
        return None

    def constraints(self, call: Call) -> str | None:
        """Why this kind of call cannot run here, or None when it can."""
        return None

    def eligible(self, q, k, v, args: Args) -> str | None:
        """Torch's own eligibility check on the real tensors, where torch has one; None = eligible."""
        return None

    def run(self, q, k, v, args: Args):
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<backend {self.name}>"


def version_tuple(version: str) -> tuple[int, ...]:
    """'2.8.3.post2' -> (2, 8, 3): the numeric release part, for comparisons."""
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
        if not piece.isdigit():
            break
    return tuple(parts)
