"""What the parity scripts share: both sides at one CPU kernel level, which clone is ours, and how
reference files are written and described."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

CAPABILITY = "avx2"  # every x86-64 test machine here has it; float results depend on the level


def reexec_with_pinned_kernels() -> None:
    """Restart this script with ATEN_CPU_CAPABILITY pinned: torch reads it once, when it loads."""
    if os.environ.get("ATEN_CPU_CAPABILITY") != CAPABILITY:
        env = dict(os.environ, ATEN_CPU_CAPABILITY=CAPABILITY)
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


def add_ours_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ours", type=Path, default=Path(__file__).resolve().parents[2],
                        help="the Mizuoto clone whose modules are compared (default: this one)")


def write_references(refs: dict, path) -> None:
    """Save the reference arrays (C-contiguous: safetensors' numpy writer scrambles other layouts,
    ENGINES.md §1) and read them back to check they are what was computed, and finite."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    refs = {k: np.ascontiguousarray(a) for k, a in refs.items()}
    save_file(refs, str(path))
    back = load_file(str(path))
    assert back.keys() == refs.keys() and all(np.array_equal(back[k], refs[k]) for k in refs)
    for key, a in refs.items():
        assert a.dtype.kind != "f" or np.isfinite(a).all(), key


def environment(packages) -> dict:
    """What the references' numbers depend on: torch, threads, CPU kernel level, package versions."""
    from importlib import metadata

    import torch

    def version(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {"torch": torch.__version__, "num_threads": torch.get_num_threads(),
            "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY"),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "versions": {name: version(name) for name in packages}, "python": sys.version.split()[0]}
