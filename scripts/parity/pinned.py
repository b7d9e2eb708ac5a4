"""What the live parity scripts share: both sides at one CPU kernel level, and which clone is ours."""

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
