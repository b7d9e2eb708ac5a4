#!/usr/bin/env python
"""Writes mizuoto/audio/assets/resampy_kaiser_best.xz, the filter table of resampy's "kaiser_best" (ISC, Brian McFee),
from an installed resampy (0.4.3: resampy/data/kaiser_best.npz), for mizuoto/audio/resampy_kaiser.py.

    python scripts/resampy_kaiser_table.py        # in an environment with resampy (e.g. the GPT-SoVITS upstream venv)

The table is resampy.filters.get_filter("kaiser_best")'s half window cast to float32, as GPT-SoVITS v5's
TTS.resample(match_librosa=True) casts it (409,601 values, 8,192 per zero crossing). Stored as the differences of
consecutive float32 bit patterns (int32, little-endian), LZMA-compressed: 203 kB instead of 1.6 MB. The table cannot
be recomputed here: resampy's stored window was optimised once, and no Kaiser beta reproduces all of its float32
values from the formula (the closest leaves four of them one unit in the last place apart).
"""

from __future__ import annotations

import hashlib
import lzma
from pathlib import Path

import numpy as np
import resampy

OUT = Path(__file__).resolve().parents[1] / "mizuoto" / "audio" / "assets" / "resampy_kaiser_best.xz"

window, precision, rolloff = resampy.filters.get_filter("kaiser_best")
table = window.astype(np.float32)
bits = table.view(np.uint32).astype(np.int64)
deltas = np.diff(bits, prepend=0).astype("<i4")
OUT.write_bytes(lzma.compress(deltas.tobytes(), preset=9))
print(f"{OUT}: {OUT.stat().st_size} bytes; resampy {resampy.__version__}, {table.size} values, precision {precision}, "
      f"rolloff {float(rolloff)!r}, sha256 of the float32 table {hashlib.sha256(table.tobytes()).hexdigest()}")
