#!/usr/bin/env python
"""Write what `librosa.resample` (res_type "soxr_hq", librosa's default and what VoxCPM2's `librosa.load(sr=...)`
and Qwen3-TTS's reference preparation call) returns for a grid of rate pairs, lengths and dtypes, and what
`librosa.load(path, sr=..., mono=True)` returns for a few files, for mizuoto/audio/librosa_soxr.py's test.

Usage, in a venv holding librosa and soxr (the voxcpm oracle: scripts/parity/voxcpm_upstream_env.sh):
    python scripts/parity/librosa_resample_references.py tests/parity/data/audio/librosa_resample

Writes into OUTDIR:
    references.safetensors   inputs and outputs: resample/<case>/{input,output}, load/<file>/output
    references.json          the cases (rates, length, dtype, shape), the files, versions, pins
    *.wav, *.flac            the files librosa.load read (a 44.1 kHz stereo FLAC, a 24 kHz WAV, a 48 kHz WAV)
The inputs are built from integers (numpy's seeded RandomState), the same on every machine.
"""

import json
import os
import sys

from pinned import pin_process  # noqa: E402  (beside this script)

pin_process()  # re-executes under the parity pins (soxr itself does not read them; the writers all do)

import librosa  # noqa: E402
import numpy as np  # noqa: E402
import soundfile  # noqa: E402
from pinned import environment, write_references  # noqa: E402  (beside this script)

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/parity/data/audio/librosa_resample"
os.makedirs(OUT, exist_ok=True)
REFS, CASES, LOADS = {}, [], []

# every rate an engine meets, both ways: recordings at 8 to 96 kHz into 16 kHz (VoxCPM2) and 24 kHz (Qwen3-TTS)
PAIRS = [(8000, 16000), (11025, 16000), (22050, 16000), (24000, 16000), (32000, 16000), (44100, 16000),
         (48000, 16000), (96000, 16000), (8000, 24000), (16000, 24000), (22050, 24000), (44100, 24000),
         (48000, 24000), (16000, 44100), (44100, 48000)]
LENGTHS = (1, 2, 5, 31, 1201, 2999)  # one sample, a few, and lengths of no common factor with the rates


def signal(rng, shape):
    """Speech-like test audio: a few harmonics of a gliding tone plus noise, in [-0.9, 0.9]."""
    n = shape[-1]
    t = np.arange(n) / 16000.0
    x = 0.4 * np.sin(2 * np.pi * (180 + 60 * t) * t) + 0.2 * np.sin(2 * np.pi * 2500 * t) + 0.1 * rng.randn(*shape)
    return np.clip(x, -0.9, 0.9)


def main():
    rng = np.random.RandomState(20261202)
    for orig, target in PAIRS:
        for n in LENGTHS:
            for dtype in ("float32", "float64"):
                shape = (2, n) if n == 1201 and dtype == "float32" else (n,)  # one stereo case per pair
                x = signal(rng, shape).astype(dtype)
                y = librosa.resample(x, orig_sr=orig, target_sr=target, res_type="soxr_hq")
                name = f"resample/{orig}_{target}_{n}_{dtype}"
                REFS[f"{name}/input"], REFS[f"{name}/output"] = x, y
                CASES.append({"name": name, "orig": orig, "target": target, "dtype": dtype, "shape": list(shape),
                              "output_shape": list(y.shape)})
    files = [("stereo44.flac", 44100, 2, "PCM_24", 16000), ("mono24.wav", 24000, 1, "PCM_16", 16000),
             ("mono48.wav", 48000, 1, "FLOAT", 24000), ("stereo44.flac", 44100, 2, "PCM_24", 24000)]
    for name, rate, channels, subtype, sr in files:
        path = os.path.join(OUT, name)
        if not os.path.exists(path):
            soundfile.write(path, signal(rng, (channels, rate // 20)).T.astype("float32"), rate, subtype=subtype)
        y, got_rate = librosa.load(path, sr=sr, mono=True)
        key = f"load/{name}_{sr}/output"
        REFS[key] = y
        LOADS.append({"file": name, "sr": sr, "output": key, "rate": int(got_rate)})
    write_references({k: np.ascontiguousarray(v) for k, v in REFS.items()}, os.path.join(OUT, "references.safetensors"))
    meta = {"cases": CASES, "loads": LOADS, "environment": environment(["librosa", "soxr", "soundfile", "numpy"])}
    with open(os.path.join(OUT, "references.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"wrote {len(CASES)} resample cases and {len(LOADS)} loads to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
