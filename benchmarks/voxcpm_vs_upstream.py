"""VoxCPM speed and load memory: Mizuoto vs upstream voxcpm 2.0.3 on the same random weights, text and seed,
in one run (each side timed in a fresh process of its own); the waveforms are compared.

Runs in a venv holding upstream (scripts/parity/voxcpm_upstream_env.sh) with this clone on sys.path:
    .venv-voxcpm-upstream/bin/python benchmarks/voxcpm_vs_upstream.py [--size tiny|full] [--patches 40]
        [--repeats 3] [--threads N] [--memory]

`tiny` is the parity references' VoxCPM2 configuration (float32); `full` is the released VoxCPM2's
architecture (2B parameters, saved and run in bfloat16 as its config.json says, the AudioVAE in float32).
Every run generates exactly `--patches` patches (the stop head is held off with min_len, retries are off),
so both sides do the same work. Speed is generated audio seconds per wall second (higher is faster).
`--memory` also loads the folder in two fresh processes (ours, upstream's `VoxCPM`) and reports each one's
peak resident memory against the size of the weight files.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts" / "parity"))

import torch  # noqa: E402

TEXT = "the quick brown fox. hello world, the end!"


def build(size: str, folder: Path) -> None:
    from voxcpm_models import build_model, voxcpm2_full

    if size == "tiny":
        build_model("v2", str(folder))
    else:
        build_model("v2", str(folder), voxcpm2_full(), dtype=torch.bfloat16)


def upstream_pipeline(folder: Path):
    import voxcpm

    with contextlib.redirect_stderr(io.StringIO()):
        return voxcpm.VoxCPM(str(folder), zipenhancer_model_path=None, enable_denoiser=False, optimize=False,
                             device="cpu")


def run_upstream(pipeline, patches: int, seed: int):
    torch.manual_seed(seed)
    with contextlib.redirect_stderr(io.StringIO()):
        wave = pipeline.generate(text=TEXT, max_len=patches, min_len=patches, retry_badcase=False)
    return torch.from_numpy(wave)


def run_ours(loaded, patches: int, seed: int):
    from mizuoto import host

    speech = host.speak(loaded, TEXT, seed=seed, params={"max_len": patches, "min_len": patches,
                                                         "retry_badcase": False})
    return speech.waveform[0]


def timed(fn, repeats: int):
    fn()  # warm-up: first-call allocations, lazy initialisation
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def run_side(args) -> None:
    """One side in this process (the parent runs each side in a fresh one, so neither inherits the other's
    thread pools, caches or imports): its best time and wave into --out."""
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.side == "ours":
        from mizuoto import host

        loaded = host.load_model("voxcpm", args.folder, device="cpu", dtype=args.dtype)
        best, wave = timed(lambda: run_ours(loaded, args.patches, args.seed), args.repeats)
        rate = loaded.state.sample_rate
    else:
        pipeline = upstream_pipeline(args.folder)
        best, wave = timed(lambda: run_upstream(pipeline, args.patches, args.seed), args.repeats)
        rate = pipeline.tts_model.sample_rate
    torch.save({"seconds": best, "wave": wave.contiguous(), "threads": torch.get_num_threads(), "rate": rate}, args.out)


def measure(side: str, folder: Path, dtype: str, args, out: Path) -> dict:
    command = [sys.executable, __file__, "--side", side, "--folder", str(folder), "--dtype", dtype, "--out", str(out),
               "--patches", str(args.patches), "--repeats", str(args.repeats), "--seed", str(args.seed)]
    if args.threads:
        command += ["--threads", str(args.threads)]
    subprocess.run(command, check=True)
    return torch.load(out)


LOAD_SNIPPET = {
    "ours": "from mizuoto import host; host.load_model('voxcpm', {folder!r}, device='cpu', dtype={dtype!r})",
    "upstream": ("import contextlib, io, voxcpm\nwith contextlib.redirect_stderr(io.StringIO()):\n"
                 "    voxcpm.VoxCPM({folder!r}, zipenhancer_model_path=None, enable_denoiser=False, optimize=False, "
                 "device='cpu')"),
}


def peak_load_rss(side: str, folder: Path, dtype: str) -> tuple[float, float]:
    """(peak resident memory of a fresh process that imports its side and loads the folder, how much of
    it the load added over the imports), in GiB. Read from /proc's VmHWM: unlike ru_maxrss it starts
    afresh at exec, so the parent's size does not leak into the child's peak."""
    code = ("import sys; sys.path.insert(0, {repo!r}); import torch\n"
            "import mizuoto.host, voxcpm\n"
            "def hwm():\n"
            "    return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM'))\n"
            "before = hwm()\n"
            + LOAD_SNIPPET[side] + "\n"
            "print(before, hwm())")
    code = code.format(repo=str(REPO), folder=str(folder), dtype=dtype)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = map(int, done.stdout.split()[-2:])
    return after / 2**20, (after - before) / 2**20


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=("tiny", "full"), default="tiny")
    parser.add_argument("--patches", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--folder", type=Path, default=None, help="reuse a folder this script built before")
    parser.add_argument("--side", choices=("ours", "upstream"), help=argparse.SUPPRESS)  # a child process
    parser.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--build", choices=("tiny", "full"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        return run_side(args)
    if args.build:
        return build(args.build, args.folder)

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.folder or Path(tmp) / args.size
        if not (folder / "config.json").is_file():  # built in a process of its own, which then frees it all
            start = time.perf_counter()
            subprocess.run([sys.executable, __file__, "--build", args.size, "--folder", str(folder)], check=True)
            print(f"built {args.size} in {time.perf_counter() - start:.0f} s", file=sys.stderr)
        dtype = "bfloat16" if args.size == "full" else "float32"
        weights = sum((folder / name).stat().st_size for name in ("model.safetensors", "audiovae.safetensors"))
        result = {"size": args.size, "dtype": dtype, "patches": args.patches, "weights_gib": round(weights / 2**30, 3)}
        if args.memory:
            for side in ("ours", "upstream"):
                peak, grown = peak_load_rss(side, folder, dtype)
                result[f"load_peak_rss_gib_{side}"] = round(peak, 3)
                result[f"load_rss_growth_gib_{side}"] = round(grown, 3)
                result[f"load_growth_over_weights_{side}"] = round(grown * 2**30 / weights, 3)
        up = measure("upstream", folder, dtype, args, Path(tmp) / "upstream.pt")
        ours = measure("ours", folder, dtype, args, Path(tmp) / "ours.pt")
        rate = ours["rate"]
        (t_up, wave_up), (t_ours, wave_ours) = (up["seconds"], up["wave"]), (ours["seconds"], ours["wave"])
        result["threads"] = ours["threads"]
        same_shape = wave_up.shape == wave_ours.shape
        seconds = wave_ours.numel() / rate
        result.update({
            "identical": bool(same_shape and torch.equal(wave_up, wave_ours)),
            "max_abs_diff": float((wave_up - wave_ours).abs().max()) if same_shape else None,
            "audio_seconds": round(seconds, 3),
            "upstream_s": round(t_up, 3), "ours_s": round(t_ours, 3),
            "upstream_audio_s_per_s": round(seconds / t_up, 3), "ours_audio_s_per_s": round(seconds / t_ours, 3),
            "speedup": round(t_up / t_ours, 2),
        })
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    main()
