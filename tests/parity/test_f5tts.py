"""F5-TTS + Vocos parity: Mizuoto's outputs against upstream's own (f5-tts 1.1.22, vocos 0.1.0), sample
by sample, on tiny random models in the published layouts.

The references in data/f5tts were written by scripts/parity/f5tts_references.py, which builds the models
with upstream's classes (re-randomising every layer upstream zero-initialises), loads them back through
upstream's loaders and runs upstream's code: the DiT (F5TTS_v1_Base's and F5TTS_Base's structure), the
UNetT (E2TTS_Base's), the flow sampler (EPSS and uniform grids, sway,
guidance on and off), the vocoder, the resampler, `infer_batch_process` (chunks, durations, fixed
duration, loudness, cross-fades) and the API path from a 16 kHz stereo file (pydub's trimming
included, and again from upstream's trimmed file). Both sides
run at one thread with ATEN_CPU_CAPABILITY=avx2 (recorded in references.json), so the comparison runs
in its own process where that level can be set before torch loads.
"""

import json
from pathlib import Path

import pytest
from helpers import reference_dir, run_pinned

HERE = Path(__file__).parent
DATA = HERE / "data" / "f5tts"

pytest.importorskip("pypinyin")
pytest.importorskip("rjieba")


@pytest.fixture(scope="module")
def results():
    info = json.loads((DATA / "references.json").read_text())
    assert info["num_threads"] == 1 and info["ATEN_CPU_CAPABILITY"] == "avx2"
    return run_pinned(HERE / "f5tts_compare.py", reference_dir("f5tts"))


def expected_outputs() -> list[str]:
    info = json.loads((DATA / "references.json").read_text())
    names = ["unit/cond_mel", "unit/vocos", "unit/resample"]
    names += [f"unit/dit_{m}_{kind}" for m in ("v1", "base", "e2") for kind in ("guided", "plain", "dropped")]
    for case in info["cases"]:
        if case["kind"] == "CFM.sample":
            names += [f"{case['name']}/mel", f"{case['name']}/wave"]
        elif case["kind"] == "infer_batch_process":
            names += [f"{case['name']}/wave"]
        else:  # the API path: from the original file, and from upstream's preprocessed one
            names += [f"{case['name']}/wave", f"{case['name']}/wave_from_preprocessed"]
    return names


@pytest.mark.parametrize("output", expected_outputs())
def test_identical_to_upstream(results, output):
    got = results[output]
    assert got["max_abs"] is not None, f"shape {got['shape'][0]} vs upstream's {got['shape'][1]}"
    assert got["max_abs"] == 0.0
