"""compute.fast: process-wide GPU switches, applied once at host start and by training.

This is the one module allowed to change `torch.backends` (an architecture test enforces it):
every switch here changes results for every model in the process, so the host applies them once,
before any model loads, and every output lists them as `params.fast`.
"""

from __future__ import annotations

from mizuoto.core.settings import FAST_SWITCHES

_applied: tuple[str, ...] = ()


def apply(switches) -> tuple[str, ...]:
    """Turn on `switches` (names from FAST_SWITCHES); returns those that took effect here."""
    import torch

    global _applied
    done = []
    for name in switches:
        if name not in FAST_SWITCHES:
            raise ValueError(f"unknown compute.fast switch '{name}'; known: {', '.join(FAST_SWITCHES)}")
        if name == "tf32":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        elif name == "fp16_accumulation":
            if not hasattr(torch.backends.cuda.matmul, "allow_fp16_accumulation"):
                continue  # torch < 2.7 has no such switch
            torch.backends.cuda.matmul.allow_fp16_accumulation = True
        elif name == "math_sdp_reduction":
            if not hasattr(torch.backends.cuda, "allow_fp16_bf16_reduction_math_sdp"):
                continue  # torch < 2.5
            torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
        elif name == "cudnn_benchmark":
            torch.backends.cudnn.benchmark = True
        done.append(name)
    _applied = tuple(sorted(set(_applied) | set(done), key=FAST_SWITCHES.index))
    return tuple(done)


def applied() -> tuple[str, ...]:
    """The switches in force in this process, for `params.fast` in every output."""
    return _applied
