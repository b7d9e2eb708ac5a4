"""Live parity of Mizuoto's F5-TTS reference trimming against f5-tts 1.1.22's pydub step (dev only).

Run it with the Python of an environment that has upstream installed (f5-tts 1.1.22, pydub 0.25.1,
soundfile); our module is imported from the clone given by --ours:

    .venv-f5tts-upstream/bin/python scripts/parity/f5tts_silence_live.py [--ours /path/to/clone] [--cases N] [--seed S]

Each case writes a random WAV (speech-like tone bursts with noise, separated by silences of random
length and level, some near the -40/-42/-50 dBFS thresholds; random rate, 1-3 channels, 16-bit or
sometimes 32-bit, 1-30 s, plus a few tiny, all-silent and pause-free clips), runs upstream's
`preprocess_ref_audio_text` on it (cache cleared, output silenced) and reads its temporary WAV back.
Everything must be identical: `preprocess_reference` on the file's ints against the WAV's ints and rate,
and, for 16-bit files, `trim_reference` on the file read as float32 against the WAV read as float32 (or
an InputError where nothing in it reaches -42 dBFS). Exit status 1 when anything differs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import sys
import tempfile
import warnings

from pinned import add_ours_argument  # beside this script


def _parse():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_ours_argument(parser)
    parser.add_argument("--cases", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


ARGS = _parse()
sys.path.insert(0, str(ARGS.ours.resolve()))
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import soundfile as sf  # noqa: E402
import torch  # noqa: E402
from f5_tts.infer import utils_infer as upstream  # noqa: E402

from mizuoto.core.errors import InputError  # noqa: E402
from mizuoto.engines.f5tts import silence as ours  # noqa: E402

RATES = [8000, 11025, 16000, 22050, 24000, 32000, 44100, 48000]


def _burst(rng: np.random.Generator, frames: int, rate: int, channels: int, level_db: float) -> np.ndarray:
    """A voiced-sounding stretch: a few harmonics under a syllable envelope, plus a little noise."""
    t = np.arange(frames) / rate
    f0 = rng.uniform(90, 260)
    tone = sum(rng.uniform(0.2, 1) * np.sin(2 * np.pi * f0 * h * t + rng.uniform(0, 6)) for h in range(1, 5))
    envelope = np.abs(np.sin(np.pi * t * rng.uniform(2, 6))) ** rng.uniform(0.5, 2)
    wave = tone * envelope / 2.5 + rng.normal(0, 0.02, frames)
    out = np.stack([wave * rng.uniform(0.6, 1) for _ in range(channels)])
    return out * 10 ** (level_db / 20)


def _quiet(rng: np.random.Generator, frames: int, channels: int) -> np.ndarray:
    """A pause: digital zero, or noise at a level around the thresholds (RMS of normal(0, s) is s)."""
    if rng.random() < 0.3:
        return np.zeros((channels, frames))
    return rng.normal(0, 10 ** (rng.uniform(-75, -36) / 20), (channels, frames))


def _signal(rng: np.random.Generator) -> tuple[np.ndarray, int]:
    rate = int(rng.choice(RATES)) if rng.random() < 0.9 else int(rng.integers(4000, 50000))
    channels = int(rng.choice([1, 1, 1, 2, 2, 3]))
    kind = rng.random()
    if kind < 0.03:
        return np.zeros((channels, int(rng.integers(0, rate * 3)))), rate
    if kind < 0.06:
        return _quiet(rng, int(rng.integers(0, rate * 2)), channels), rate
    if kind < 0.1:
        return _burst(rng, int(rng.integers(1, rate // 40)), rate, channels, -6), rate
    if kind < 0.16:  # no pause at all: only the hard cut can shorten it
        return _burst(rng, int(rng.uniform(1, 30) * rate), rate, channels, rng.uniform(-12, -1)) + 0.05, rate
    duration = rng.uniform(1, 30)
    parts, total = [], 0
    while total < duration * rate:
        n = int(rng.uniform(0.05, 2.5 if rng.random() < 0.3 else 0.6) * rate)
        parts.append(_quiet(rng, n, channels))
        n = int(rng.uniform(0.2, 4) * rate)
        parts.append(_burst(rng, n, rate, channels, rng.uniform(-30, -1)))
        total += parts[-1].shape[1] + parts[-2].shape[1]
    if rng.random() < 0.5:
        parts = parts[1:]
    if rng.random() < 0.5:
        parts.append(_quiet(rng, int(rng.uniform(0, 2) * rate), channels))
    return np.concatenate(parts, axis=1)[:, : int(duration * rate)], rate


def _upstream(path: str) -> tuple[list[str], np.ndarray, np.ndarray, int]:
    """Upstream's output WAV as ints and as float32, its rate, and which clipping steps it reported."""
    upstream._ref_audio_cache.clear()
    steps = []
    with contextlib.redirect_stdout(io.StringIO()):
        out_path, _ = upstream.preprocess_ref_audio_text(
            path, "text.", show_info=lambda msg: steps.append(msg[-2]) if "clipping" in msg else None)
    info = sf.info(out_path)
    dtype = "int32" if info.subtype == "PCM_32" else "int16"
    ints, rate = sf.read(out_path, dtype=dtype, always_2d=True)
    floats, _ = sf.read(out_path, dtype="float32", always_2d=True)
    os.unlink(out_path)
    return steps, ints.T, floats.T, rate


def main() -> int:
    rng = np.random.default_rng(ARGS.seed)
    random.seed(ARGS.seed)
    failures, counts = [], {"ints": 0, "floats": 0, "silent": 0, "resampled": 0, "1": 0, "2": 0, "3": 0}
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "ref.wav")
        for case in range(ARGS.cases):
            signal, rate = _signal(rng)
            subtype = "PCM_32" if rng.random() < 0.1 else "PCM_16"
            sf.write(path, np.clip(signal, -1, 1).T, rate, subtype=subtype)
            dtype = "int32" if subtype == "PCM_32" else "int16"
            file_ints, _ = sf.read(path, dtype=dtype, always_2d=True)
            file_floats, _ = sf.read(path, dtype="float32", always_2d=True)
            steps, up_ints, up_floats, up_rate = _upstream(path)
            label = f"case {case}: {rate} Hz, {signal.shape[0]} ch, {signal.shape[1]} frames, {subtype}"

            mine, my_rate = ours.preprocess_reference(file_ints.T, rate)
            counts["ints"] += 1
            if my_rate != up_rate or mine.dtype.name != up_ints.dtype.name or not np.array_equal(mine, up_ints):
                failures.append(f"{label}: ints differ ({mine.shape} {my_rate} vs {up_ints.shape} {up_rate})")
            for step in steps:
                counts[step] += 1
            counts["resampled"] += up_rate != rate
            if subtype != "PCM_16":
                continue
            counts["floats"] += 1
            try:
                trimmed = ours.trim_reference(torch.from_numpy(file_floats.T.copy()), rate)
            except InputError:
                counts["silent"] += 1
                # Upstream kept at most length-rounding leftovers (< 1 ms) before its 50 ms pad.
                if up_ints.shape[1] > up_rate * 0.051 + 1:
                    failures.append(f"{label}: trim_reference refused an audible reference")
                continue
            if ours.output_rate(rate) != up_rate or not torch.equal(trimmed, torch.from_numpy(up_floats)):
                failures.append(f"{label}: floats differ")
            if (case + 1) % 50 == 0:
                print(f"{case + 1} cases, {len(failures)} failures", flush=True)
    print("checked:", counts)
    for line in failures[:20]:
        print("DIFF", line)
    print("all identical" if not failures else f"{len(failures)} differences")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
