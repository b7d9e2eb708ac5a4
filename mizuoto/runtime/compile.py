"""torch.compile for hot modules, with a way back to eager.

    self.compiled = compile_module(self.decoder, options.compile, "qwen3tts.decoder", device, policy)
    out = (self.compiled or self.decoder)(x)

`Compiled` wraps a module in `torch.compile(dynamic=True)` (no shape buckets: a new length does not
recompile). It is a plain object, never a submodule, so state dicts and handles are unchanged. Any
error while compiling or running the compiled code logs one warning and turns that wrapper eager for
good; out-of-memory, cancellation and interrupts still raise. Results are not bit-identical to eager
(fused kernels reorder float operations): on CPU in fp32 a small MLP stays within 1e-5.
"""

from __future__ import annotations

import logging
import threading
from contextlib import nullcontext

import torch

from mizuoto.runtime.accel.policies import is_cancellation, is_out_of_memory
from mizuoto.runtime.context import ACCEL

log = logging.getLogger("mizuoto.compile")

# Devices where compiled code is not worth its risk: Inductor's MPS backend is incomplete.
EAGER_DEVICES = ("mps",)


class Compiled:
    """`module` compiled on first call; eager after the first failure.

    A compiled graph cannot read context variables, so each call binds the policy's own run (`trace_run`,
    None for auto) as the attention binding while it traces and runs; with a non-auto policy the
    run's counters are shared, so calls take turns.
    """

    def __init__(self, module: torch.nn.Module, name: str, policy=None):
        self.module = module
        self.name = name
        self.trace_run = policy.start() if policy is not None else None
        self._lock = threading.Lock() if self.trace_run is not None else nullcontext()
        self._compiled = None
        self.eager = False

    def __call__(self, *args, **kwargs):
        if self.eager:
            return self.module(*args, **kwargs)
        try:
            with self._lock:
                if self._compiled is None:
                    self._compiled = torch.compile(self.module, dynamic=True)
                token = ACCEL.set(self.trace_run)
                try:
                    return self._compiled(*args, **kwargs)
                finally:
                    ACCEL.reset(token)
        except Exception as exc:
            if is_out_of_memory(exc) or is_cancellation(exc):
                raise
            failure = exc
        # Eager on the same arguments. If that raises too, the call itself was wrong, not the
        # compiler: the error propagates and the wrapper stays compiled.
        out = self.module(*args, **kwargs)
        if not self.eager:
            self.eager = True
            reason = f"{type(failure).__name__}: {' '.join(str(failure).split())[:200]}"
            log.warning("torch.compile of %s failed (%s); it runs eagerly from now on", self.name, reason)
        return out


def compile_module(module: torch.nn.Module, option: bool, name: str, device=None, policy=None) -> Compiled | None:
    """A Compiled for `module`, or None (eager) when the option is off or the device is in
    EAGER_DEVICES; `device` defaults to the module's first parameter's."""
    if not option:
        return None
    if device is None:
        first = next(module.parameters(), None)
        device = first.device if first is not None else "cpu"
    if torch.device(device).type in EAGER_DEVICES:
        return None
    return Compiled(module, name, policy)
