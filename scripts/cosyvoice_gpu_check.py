"""CosyVoice 2 and CosyVoice 3 on a GPU at the released architectures (random weights): the real-time factor of a
whole request (`speak`) and the first chunk of a streamed one (`speak_stream`), the LM's tokens per second, and the
peak memory, with CUDA graphs off and on (bit for bit the same tokens and audio, the same seed) and with
compute.compile on (HiFT's decode), in float32, bfloat16 and float16.

    python scripts/cosyvoice_gpu_check.py [--json OUT.json] [--versions cv2 cv3] [--repeats 3] [--folder DIR]
    python scripts/cosyvoice_gpu_check.py --device cpu --tiny --threads 1 --repeats 1    # the smoke test (~30 s)

The issue's GPU goal, on an H200 (or H100) at exact settings (attention `auto`, no compute.fast, compile off) with
CUDA graphs on: CosyVoice 3 (Fun-CosyVoice3-0.5B) real-time factor <= 0.08 and first chunk <= 200 ms. Upstream's
fastest path (the LM in TensorRT-LLM, runtime/triton_trtllm) reports RTF 0.109 on an L20 and a first chunk of
190-220 ms. The report's `goal` says, per precision, whether CosyVoice 3 with graphs on (compile off) meets it.

The release folders are written with Mizuoto's own modules only (benchmarks/cosyvoice_full_size.py: no upstream
package, no onnx, no onnxruntime, no download): the LM (Qwen2 0.5B: 896 x 24, 14 heads over 2), the flows (CV2: the
Conformer 512 x (6 + 4) and the Matcha U-Net (256), 4 blocks, 12 mid blocks, 8 x 64 heads; CV3: the DiT 1024 x 22,
16 x 64, ff_mult 2), the HiFTs (512 base channels, rates [8, 5, 3]; CV3's causal), and weights-only ONNX files of
the S3 tokenizers (1280 x 6 / x 12) and CAM++ (80 -> 192) in the released files' naming, which our loaders read
(onnxruntime could not run them; nothing here needs it). The LM's stop rows are lowered (`NEVER`), so every request
runs to max_len = 20 x its text tokens: TEXT's 17 tokens give 340 speech tokens, 13.6 s of audio, for any weights
and precision; the reference is a 3 s synthetic voice (75 prompt tokens).

Per version and precision the model is loaded once (the host reuses its weights across the graph and compile
settings) and for each setting: a warm-up `speak` and `speak_stream` (captures, compiles), then `--repeats` timed
requests of each: the best wall seconds, the real-time factor (wall / audio seconds), the stream's first chunk
(from the call to its first audio on the host) and its chunks, the LM's tokens per second (model.speech_tokens,
timed with a device wait at each stage's ends), and torch.cuda.max_memory_allocated over the load and over the
requests. Graphs on must equal graphs off (tokens, audio, stream chunks); compile's distance is reported. A
failure in float32 (the engine's exact default) fails the check (exit 1); a lower precision the engine cannot run
is listed under `unsupported` (both run on the CPU since RAS sums its nucleus in the scores' dtype and the flow
casts the speaker embedding to its weights' dtype); such a precision is reported once, its other settings skipped.

`--device cpu` runs the same code without graphs (they are a no-op there) and without compile unless --compile;
with --tiny (the parity sets' tiny sizes, TINY_TEXT: 100 speech tokens) it checks the script itself. Its numbers
mean nothing (`goal_applies` is false off CUDA or with --tiny).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import cosyvoice_full_size as full  # noqa: E402  (benchmarks/: the release writer)

from mizuoto.host import load_model, speak  # noqa: E402
from mizuoto.runtime.context import RequestContext  # noqa: E402

TEXT = "Hello there, it is three o'clock."  # 17 text tokens: max_len 340 speech tokens
TINY_TEXT = "Hello there."  # --tiny: 5 text tokens, 100 speech tokens
PROMPT_TEXT = "希望你以后能够做的比我还好呦。"  # the engine adds CosyVoice 3's system prompt and <|endofprompt|>
SEED = 11
PRECISIONS = ("float32", "bfloat16", "float16")
SETTINGS = ((False, False), (True, False), (True, True))  # (cuda_graphs, compile)
GOAL_RTF, GOAL_FIRST_CHUNK_S = 0.08, 0.200


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def peak_bytes(device: str) -> int | None:
    return torch.cuda.max_memory_allocated() if device == "cuda" else None


def reset_peak(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def stream(loaded, text: str, reference, device: str) -> tuple[float, float, list[torch.Tensor]]:
    """One speak_stream request through the engine's own stream, bound as host.speak binds a request (the model's
    attention policy, the seed): -> (first chunk seconds, whole stream seconds, the chunks)."""
    implementation = loaded.spec.implementation_module()
    values = loaded.spec.check_speak_params({})
    ctx = RequestContext(SEED, accel=loaded.policy.start())
    sync(device)
    start = time.perf_counter()
    chunks, first = [], None
    for chunk in implementation.speak_stream(loaded.state, text, ctx, values, reference, PROMPT_TEXT):
        chunks.append(chunk)  # on the host: the chunk's audio is there
        if first is None:
            first = time.perf_counter() - start
    return first, time.perf_counter() - start, chunks


def measure(folder: Path, version: str, device: str, precision: str, graphs: bool, compile_: bool, repeats: int,
            text: str, reference, kept: list) -> tuple[dict, dict]:
    """One setting; `kept` holds the precision's loaded models, so the next setting reuses their weights (the
    host rebinds them: only the first load of a precision reads the folder)."""
    reset_peak(device)
    start = time.perf_counter()
    loaded = load_model("cosyvoice", str(folder), device=device, dtype=precision,
                        overrides={"compute.cuda_graphs": graphs, "compute.compile": compile_})
    sync(device)
    load_s, load_peak = time.perf_counter() - start, peak_bytes(device)
    speak(loaded, text, seed=SEED, reference=reference, reference_text=PROMPT_TEXT)  # warm-up: captures, compiles
    stream(loaded, text, reference, device)
    kept.append(loaded)
    split = full.Split(loaded.state, sync=lambda: sync(device))
    reset_peak(device)
    best, out, stages = float("inf"), None, None
    try:
        for _ in range(repeats):
            split.reset()
            start = time.perf_counter()
            out = speak(loaded, text, seed=SEED, reference=reference, reference_text=PROMPT_TEXT)
            wall = time.perf_counter() - start
            if wall < best:
                best, stages = wall, (dict(split.seconds), split.tokens, split.speech)
        firsts, walls = [], []
        for _ in range(repeats):
            first, whole, chunks = stream(loaded, text, reference, device)
            firsts.append(first)
            walls.append(whole)
    finally:
        split.remove()
    seconds = out.waveform.shape[-1] / out.sample_rate
    stage_s, count, speech_tokens = stages
    row = {"version": version, "precision": precision, "cuda_graphs": graphs, "compile": compile_,
           "graphs_used": loaded.info.graphs, "load_s": round(load_s, 2),
           "audio_seconds": round(seconds, 3), "speech_tokens": count, "speak_s": round(best, 4),
           "rtf": round(best / seconds, 4), "stages_s": {k: round(v, 4) for k, v in stage_s.items()},
           "lm_tokens_per_s": round(count / stage_s["lm"], 1) if stage_s["lm"] else None,
           "first_chunk_ms": round(min(firsts) * 1000, 1), "stream_s": round(min(walls), 4),
           "stream_chunks": len(chunks), "stream_rtf": round(min(walls) / seconds, 4),
           "peak_load_gib": None if load_peak is None else round(load_peak / 2**30, 3),
           "peak_request_gib": None if peak_bytes(device) is None else round(peak_bytes(device) / 2**30, 3),
           "report_rtf": out.report["real_time_factor"]}
    return row, {"wave": out.waveform, "tokens": speech_tokens, "stream": torch.cat(chunks, dim=-1)}


def compare(a: dict, b: dict) -> dict:
    same_length = a["wave"].shape == b["wave"].shape
    return {"tokens_equal": a["tokens"] == b["tokens"], "audio_equal": torch.equal(a["wave"], b["wave"]),
            "stream_equal": torch.equal(a["stream"], b["stream"]),
            "audio_max_diff": float((a["wave"] - b["wave"]).abs().max()) if same_length else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="the parity sets' tiny sizes (a smoke test)")
    parser.add_argument("--versions", nargs="+", default=["cv2", "cv3"], choices=["cv2", "cv3"])
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--compile", action="store_true", help="on the CPU too (always on a GPU)")
    parser.add_argument("--folder", type=Path, help="where the release folders are written (reused when there)")
    parser.add_argument("--text", help=f"what to speak (default {TEXT!r}; --tiny: {TINY_TEXT!r})")
    parser.add_argument("--threads", type=int, help="torch's CPU threads (default: as torch starts)")
    args = parser.parse_args()
    device = args.device
    text = args.text or (TINY_TEXT if args.tiny else TEXT)
    if args.threads:
        torch.set_num_threads(args.threads)
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing to measure (the smoke test: --device cpu --tiny)")
        return 0
    settings = [s for s in SETTINGS if not s[1] or device == "cuda" or args.compile]
    rows, comparisons, failures, unsupported = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.folder or tmp)
        reference = (full.speech(3.0), 24000)
        for version in args.versions:
            folder = root / (f"{version}_tiny" if args.tiny else version)
            if not (folder / "mizuoto_random_release.json").is_file():
                start = time.perf_counter()
                full.write_release(folder, version, tiny=args.tiny, stop=full.NEVER)
                print(json.dumps({"wrote": str(folder), "seconds": round(time.perf_counter() - start, 1),
                                  "bytes": full.checkpoint_bytes(folder)}), flush=True)
            for precision in args.precisions:
                outputs, kept = {}, []
                for graphs, compile_ in settings:
                    if outputs == {} and (graphs, compile_) != settings[0]:  # the precision failed: said once
                        continue
                    try:
                        row, outputs[(graphs, compile_)] = measure(folder, version, device, precision, graphs,
                                                                   compile_, args.repeats, text, reference, kept)
                    except Exception as error:  # said, and the rest goes on
                        row = {"version": version, "precision": precision, "cuda_graphs": graphs,
                               "compile": compile_, "error": f"{type(error).__name__}: {error}"[:400]}
                        where = f"{version} {precision} graphs={graphs} compile={compile_}: {row['error']}"
                        # float32 is the engine's exact default: its failure fails the check; a lower precision
                        # the engine cannot run yet is reported as unsupported
                        (failures if precision == "float32" else unsupported).append(where)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                if (False, False) in outputs and (True, False) in outputs:
                    same = compare(outputs[(False, False)], outputs[(True, False)])
                    comparisons.append({"version": version, "precision": precision, "graphs_on_vs_off": same})
                    if not (same["tokens_equal"] and same["audio_equal"] and same["stream_equal"]):
                        failures.append(f"{version} {precision}: CUDA graphs changed the output ({same})")
                if (True, False) in outputs and (True, True) in outputs:
                    comparisons.append({"version": version, "precision": precision,
                                        "compile_vs_eager": compare(outputs[(True, False)], outputs[(True, True)])})
                print(json.dumps([c for c in comparisons if (c["version"], c["precision"]) == (version, precision)]),
                      flush=True)
                del kept
                gc.collect()
                if device == "cuda":
                    torch.cuda.empty_cache()
    goal = {}
    for row in rows:
        if row["version"] == "cv3" and row.get("cuda_graphs") and not row.get("compile") and "rtf" in row:
            goal[row["precision"]] = {"rtf": row["rtf"], "first_chunk_ms": row["first_chunk_ms"],
                                      "met": row["rtf"] <= GOAL_RTF and row["first_chunk_ms"] <= 1000 *
                                      GOAL_FIRST_CHUNK_S}
    report = {"device": torch.cuda.get_device_name() if device == "cuda" else device, "torch": torch.__version__,
              "tiny": args.tiny, "text": text, "seed": SEED, "repeats": args.repeats,
              "threads": torch.get_num_threads(),
              "goal_cv3_rtf_0.08_first_chunk_200ms": goal, "goal_applies": device == "cuda" and not args.tiny,
              "rows": rows, "comparisons": comparisons,
              "unsupported": unsupported, "failures": failures}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({"goal": goal, "unsupported": unsupported, "failures": failures}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
