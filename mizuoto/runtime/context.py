"""RequestContext, the one object a request runs on a model with, and the context variables the runtime reads.

An engine's speak or transcribe takes the request's RequestContext and wraps each step in `ctx.step()`;
the model side is the loaded state's runtime.handles.ModelHandle. A request carries three things through
every step of its generation: the attention policy of the
model it runs on (bound with `step()` around each step, so a stream suspended between steps never
leaks its policy into another thread or task), one random generator per device seeded from the
request's seed, and a cancel flag checked between steps.

Importing this module does not import torch: the host binds policies without loading it, and
`accel.attention()` reads the binding with a single `ContextVar.get()`.
"""

from __future__ import annotations

import secrets
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator

from mizuoto.core.errors import Cancelled, InputError

# The policy bound for the current step, or None (auto: every site runs its reference).
ACCEL: ContextVar[Any] = ContextVar("mizuoto.accel", default=None)

SEED_MAX = 2**64 - 1  # what torch.manual_seed accepts, and ComfyUI's seed widget range


def current_accel() -> Any:
    return ACCEL.get()


class RequestContext:
    """One request: its seed, its generators, its attention binding and its cancel flag."""

    def __init__(self, seed: int | None = None, accel: Any = None,
                 progress: Callable[[int, int], None] | None = None, interrupted: Callable[[], None] | None = None):
        if seed is None:
            seed = secrets.randbelow(2**63)
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX:
            raise InputError(f"seed must be an integer from 0 to {SEED_MAX}, got {seed!r}")
        self.seed = seed
        self.accel = accel
        self._generators: dict[Any, Any] = {}
        self._cancel = threading.Event()
        self._progress = progress  # (done, total): the host's progress bar
        self._interrupted = interrupted  # raises the host's own exception when the user cancelled

    def generator_for(self, device: Any):
        """The request's generator on `device`, seeded with the request's seed on first use.

        A request with seed N draws what upstream draws after `torch.manual_seed(N)`, but from its
        own generator: two requests never share random state, and the global one is never touched.
        """
        import torch

        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        generator = self._generators.get(device)
        if generator is None:
            generator = torch.Generator(device=device)
            generator.manual_seed(self.seed)
            self._generators[device] = generator
        return generator

    @contextmanager
    def step(self) -> Iterator[None]:
        """Bind this request's policy for one step; checks for cancellation first."""
        self.raise_if_cancelled()
        token = ACCEL.set(self.accel)
        try:
            yield
        finally:
            ACCEL.reset(token)

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def raise_if_cancelled(self) -> None:
        if self._cancel.is_set():
            raise Cancelled("generation was cancelled")
        if self._interrupted is not None:
            self._interrupted()

    def progress(self, done: int, total: int) -> None:
        """Report progress between two steps (also an interruption point in ComfyUI)."""
        self.raise_if_cancelled()
        if self._progress is not None:
            self._progress(done, total)
