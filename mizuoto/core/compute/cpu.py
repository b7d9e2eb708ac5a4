"""CPU thread, allocator and OpenMP settings, decided before torch is imported.

Standard library only: the host calls `apply()` before `import torch`, and `child_env()` gives the
processes we start (training stage, job processes) the same settings.

What this never does is change results. The one CPU knob that does is the number of intra-op threads
(reductions split differently; a tiny Qwen3-TTS waveform moves by ~4e-6 between 1 and 2 threads), so
the count torch picks for itself is left alone in this process, and a child is given exactly the
count its parent runs with, so that work moved into a child computes the same floats.

Everything here is a no-op off glibc Linux, and a variable the user already set always wins.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from typing import Mapping, MutableMapping

# glibc gives every thread that allocates its own malloc arena, up to 8 x cores. A long-running
# host with OpenMP workers, server threads and decode threads then holds freed memory in many
# arenas and its resident size creeps up; capping the arenas is the usual cure and costs nothing
# for our allocation pattern (tensors are allocated from one thread).
ARENA_MAX = 4
_M_ARENA_MAX = -8  # mallopt parameter number, from glibc's malloc.h

# Variables through which a user (or the launcher) has already chosen an allocator or its tuning.
_ALLOCATOR_CHOSEN = ("MALLOC_ARENA_MAX",)
# Variables through which OpenMP thread placement has already been chosen.
_PLACEMENT_CHOSEN = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY")
_THREADS_CHOSEN = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")

_applied: dict[str, str] | None = None


def supported() -> bool:
    """True on Linux with glibc, the only platform these settings are known to help."""
    return sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def _allocator_chosen(environ: Mapping[str, str]) -> bool:
    if any(name in environ for name in _ALLOCATOR_CHOSEN):
        return True
    if "glibc.malloc" in environ.get("GLIBC_TUNABLES", ""):
        return True
    # jemalloc or tcmalloc preloaded: glibc's malloc is not the one in use.
    return "malloc" in environ.get("LD_PRELOAD", "")


def apply(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Apply the settings to this process; returns what was set (empty when nothing was).

    Call it before torch is imported. Calling it again does nothing more.
    """
    global _applied
    if _applied is not None:
        return dict(_applied)
    environ = os.environ if environ is None else environ
    done: dict[str, str] = {}
    if supported() and not _allocator_chosen(environ):
        try:
            libc = ctypes.CDLL(None)
            ok = libc.mallopt(_M_ARENA_MAX, ARENA_MAX) == 1
        except (OSError, AttributeError):
            ok = False
        if ok:
            # Exported too, so processes started from here (they inherit the environment) match.
            environ["MALLOC_ARENA_MAX"] = str(ARENA_MAX)
            done["MALLOC_ARENA_MAX"] = str(ARENA_MAX)
    # Thread placement is deliberately not pinned here: binding (OMP_PROC_BIND) also binds the
    # initial thread, and every thread the host starts afterwards (ComfyUI's server, its prompt
    # worker) would inherit that single-core mask. Only compute-only children are bound.
    _applied = done
    return dict(done)


def torch_threads() -> int | None:
    """The intra-op thread count of the torch already imported in this process, if any."""
    torch = sys.modules.get("torch")
    get = getattr(torch, "get_num_threads", None)
    return int(get()) if get is not None else None


def child_env(base: Mapping[str, str] | None = None, compute_only: bool = False) -> dict[str, str]:
    """The environment for a process we start.

    The child runs with this process's intra-op thread count (so it computes the same floats),
    the same allocator setting, and, when it is `compute_only` (it does nothing but compute, e.g.
    a training stage), with its OpenMP threads bound one per core.
    """
    env = dict(os.environ if base is None else base)
    if not supported():
        return env
    threads = torch_threads()
    if threads is not None and not any(name in env for name in _THREADS_CHOSEN):
        env["OMP_NUM_THREADS"] = str(threads)
    if not _allocator_chosen(env):
        env["MALLOC_ARENA_MAX"] = str(ARENA_MAX)
    if compute_only and not any(name in env for name in _PLACEMENT_CHOSEN):
        env["OMP_PROC_BIND"] = "close"
        env["OMP_PLACES"] = "cores"
    return env
