"""Transcription speed: Mizuoto's Whisper vs openai-whisper on the same random weights, same audio,
same options (greedy, no fallback), in one run; the results must be identical first.

    python benchmarks/whisper_vs_openai.py [--size tiny|base] [--seconds 30] [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import whisper

from mizuoto.engines.whisper import checkpoint
from mizuoto.engines.whisper.transcribe import transcribe

SIZES = {  # openai's tiny and base shapes
    "tiny": dict(n_audio_state=384, n_audio_head=6, n_audio_layer=4, n_text_state=384, n_text_head=6, n_text_layer=4),
    "base": dict(n_audio_state=512, n_audio_head=8, n_audio_layer=6, n_text_state=512, n_text_head=8, n_text_layer=6),
}
OPTIONS = dict(temperature=0.0, beam_size=None, best_of=None, condition_on_previous_text=True, fp16=False,
               language="en", compression_ratio_threshold=None, logprob_threshold=None, no_speech_threshold=None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    opts = parser.parse_args()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    dims = dict(n_mels=80, n_audio_ctx=1500, n_vocab=51865, n_text_ctx=448, **SIZES[opts.size])
    torch.manual_seed(0)
    upstream = whisper.model.Whisper(whisper.model.ModelDimensions(**dims)).eval()
    with torch.no_grad():
        upstream.decoder.positional_embedding.normal_(0, 0.02)  # left uninitialised by its constructor
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.pt"
        torch.save({"dims": dims, "model_state_dict": upstream.state_dict()}, path)
        ours = checkpoint.load(path)
    t = np.arange(int(opts.seconds * 16000)) / 16000
    audio = (0.3 * np.sin(2 * np.pi * 220 * t) * (1 + np.sin(2 * np.pi * 2 * t))).astype(np.float32)

    def theirs():
        return whisper.transcribe(upstream, audio, **OPTIONS)

    def mine():
        return transcribe(ours, torch.from_numpy(audio), **OPTIONS)

    with torch.inference_mode():
        want, got = theirs(), mine()
        assert got["text"] == want["text"] and got["segments"] == want["segments"], "outputs differ"
        times = {"openai-whisper": [], "mizuoto": []}
        for _ in range(opts.repeats):  # interleaved, so machine noise hits both
            for name, run in (("openai-whisper", theirs), ("mizuoto", mine)):
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
    speed = {name: opts.seconds / statistics.median(t) for name, t in times.items()}
    print(json.dumps({"size": opts.size, "audio_seconds": opts.seconds, "threads": torch.get_num_threads(),
                      "tokens": sum(len(s["tokens"]) for s in want["segments"]), "identical": True,
                      "audio_seconds_per_second": {k: round(v, 2) for k, v in speed.items()},
                      "speedup": round(speed["mizuoto"] / speed["openai-whisper"], 2)}, indent=2))


if __name__ == "__main__":
    main()
