"""Qwen3-TTS speed: Mizuoto vs upstream qwen-tts 0.1.1 on the same tiny CustomVoice model (the one the
parity tests use), same text, speaker and seed, in one run; the waveforms must be identical first. Then
frames per second (12.5 frames make a second of audio) and the real-time factor of each. Greedy talker
and predictor (the tiny random model stops early when it samples): the same forwards per frame, no draws.

Runs in a venv holding upstream (scripts/parity/qwen3tts_upstream_env.sh) with this clone on sys.path:
    .venv-qwen3tts-upstream/bin/python benchmarks/qwen3tts_vs_upstream.py [--frames 120] [--repeats 3]

Upstream's talker runs transformers' generate() and, inside every talker step, a nested generate() of
the code predictor: per-frame overhead is what this measures on a tiny model.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import torch  # noqa: E402

MODEL = REPO / "tests" / "parity" / "data" / "qwen3tts" / "custom_voice"
# The parity suite's greedy case: random tiny weights stop early when sampled, greedy runs to the limit.
TEXT = "Hi, 你好 in the hall."
SPEAKER, LANGUAGE = "vivian", "German"
GREEDY = {"do_sample": False, "subtalker_dosample": False}


def upstream(frames: int, seed: int):
    from qwen_tts import Qwen3TTSModel

    with contextlib.redirect_stdout(io.StringIO()):
        model = Qwen3TTSModel.from_pretrained(str(MODEL))

    def run():
        torch.manual_seed(seed)
        with contextlib.redirect_stdout(io.StringIO()):
            waves, rate = model.generate_custom_voice(text=TEXT, speaker=SPEAKER, language=LANGUAGE,
                                                      max_new_tokens=frames + 1, **GREEDY)
        return torch.from_numpy(np.asarray(waves[0], dtype=np.float32))

    return run


def ours(frames: int, seed: int):
    from mizuoto.host import load_model, speak

    loaded = load_model("qwen3tts", MODEL, device="cpu")

    def run():
        params = {"speaker": SPEAKER, "language": LANGUAGE, "max_new_tokens": frames + 1, **GREEDY}
        return speak(loaded, TEXT, seed=seed, params=params).waveform[0]

    return run


def timed(fn, repeats: int):
    best, out = None, None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        elapsed = time.perf_counter() - start
        best = elapsed if best is None else min(best, elapsed)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=120, help="frames to draw (the tiny model rarely stops)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    opts = parser.parse_args()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    theirs_fn, ours_fn = upstream(opts.frames, 9), ours(opts.frames, 9)
    theirs_fn(), ours_fn()  # warm-up: lazy tables, allocator
    t_theirs, wave_theirs = timed(theirs_fn, opts.repeats)
    t_ours, wave_ours = timed(ours_fn, opts.repeats)
    config = json.loads((MODEL / "speech_tokenizer" / "config.json").read_text())
    frames = wave_theirs.shape[-1] / config["decode_upsample_rate"]  # the tiny codec's samples per frame
    seconds = frames / 12.5  # what the frames would last at the released codec's 1920 samples per frame
    print(json.dumps({
        "model": "tiny CustomVoice (tests/parity/data/qwen3tts/custom_voice)", "threads": torch.get_num_threads(),
        "frames": round(frames, 1), "identical": bool(torch.equal(wave_ours, wave_theirs)),
        "frames_per_second": {"upstream": round(frames / t_theirs, 1), "mizuoto": round(frames / t_ours, 1)},
        "real_time_factor": {"upstream": round(t_theirs / seconds, 4), "mizuoto": round(t_ours / seconds, 4)},
        "speedup": round(t_theirs / t_ours, 2),
    }, indent=2))


if __name__ == "__main__":
    main()
