"""GPT-SoVITS v3 / v4 end to end on the CPU: Mizuoto's host.speak vs upstream's TTS_infer_pack.TTS.TTS.run (api_v2's
pipeline, RVC-Boss/GPT-SoVITS at the checkout given) on the same files, request and seed, in one process under the
parity pins at `--threads` threads; the int16 audio is compared first.

    VENV/bin/python benchmarks/gpt_sovits_v3v4_vs_upstream.py --checkout PATH [--model v3|v4] [--size tiny|full]
        [--sample-steps 32] [--threads 1] [--repeats 3] [--tokens 100] [--json OUT]
(VENV: scripts/parity/gpt_sovits_upstream_env.sh, as for scripts/parity/gpt_sovits_e2e_v3v4_references.py.)

What runs and how it is timed is gpt_sovits_e2e_vs_upstream.py's (the e2e set's request: two Chinese fragments, its
transcript and recording, seed 1, api_v2's defaults with parallel_infer: each fragment's features go through the CFM
as one batch of chunks; upstream's prompt cache cleared before each run, so both sides do a first request's work),
with the stages of v3/v4: front end, BERT, reference, CN-HuBERT, T2S, the SoVITS features (decode_encp), the CFM and
the vocoder.

`tiny`: the gpt_sovits_e2e_v3v4 set's files (a v3 file with BigVGAN, a v4 LoRA voice over its base with the HiFi-GAN
vocoder; DiT dim 128, depth 2). `full` (v4): the released architectures with seeded random weights: the v2 GPT of
gpt_sovits_e2e_vs_upstream.py (every fragment runs to `--tokens`), chinese-roberta-large and chinese-hubert-base's
sizes, the v4 SoVITS of s2.json with the released CFM (DiT dim 1024, depth 22, 16 heads, four ConvNeXt layers) as a
rank-4 LoRA voice over its base, and the released v4 vocoder (HiFi-GAN 512 wide, 480x). A full request's CFM costs
about a teraflop per Euler step on this machine's single core: `--sample-steps` (api_v2: 32) sets how many are timed,
the same on both sides.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import gpt_sovits_e2e_vs_upstream as v2bench  # noqa: E402  (pins the process first)
import torch  # noqa: E402

say, quiet, top_ops = v2bench.say, v2bench.quiet, v2bench.top_ops
SEED = 1
RATES = {"v3": 24000, "v4": 48000}
V4_VOCODER = {"initial_channel": 100, "resblock": "1", "resblock_kernel_sizes": [3, 7, 11],
              "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "upsample_rates": [10, 6, 2, 2, 2],
              "upsample_initial_channel": 512, "upsample_kernel_sizes": [20, 12, 4, 4, 4], "gin_channels": 0,
              "is_bias": True}  # TTS.init_vocoder's v4 Generator


def build(tmp: Path, checkout: Path, size: str, tokens: int) -> tuple[dict, Path]:
    """Upstream staged in tmp (the working directory from now on), the files written; -> their paths, the recording."""
    import gpt_sovits_e2e_models as tiny
    import gpt_sovits_e2e_references as e2e
    import gpt_sovits_e2e_v3v4_references as v3v4

    from mizuoto.engines.gpt_sovits import sovits

    e2e.stage(checkout, tmp, speaker=True)
    v3v4.unstub()
    if size == "tiny":
        v3v4.narrow_upstream()
    else:  # the released SoVITS sizes around the (unnarrowed) released CFM and vocoder
        tiny.v3_config = lambda version: {**tiny.SOVITS_CONFIG, "model": {**sovits.RELEASED_V2, "version": version}}
    with contextlib.redirect_stdout(io.StringIO()):
        record = v3v4.record_models()
        if size == "full":
            from module.models import Generator

            def vocoder():
                generator = Generator(**V4_VOCODER)
                generator.remove_weight_norm()
                return generator

            record["vocoders"]["v4"] = {"args": V4_VOCODER, "seed": record["vocoders"]["v4"]["seed"], "scale": {},
                                        "entries": v2bench.entries_of(vocoder)}
        paths = e2e.prepare(tmp, record)
        paths.update(tiny.write_v3v4(tmp / "GPT_SoVITS", record, v3v4.vocoder_set()[1]))
        if size == "full":
            paths = v2bench.write_full(tmp / "GPT_SoVITS", paths, tokens)
    return paths, tiny.write_reference(tmp / "reference.wav")


def upstream_stages(tts, run) -> dict:
    stages = v2bench.upstream_front_stages(tts)
    stages.wrap(tts.vits_model, "decode_encp", "features")
    stages.wrap(tts.vits_model.cfm, "inference", "cfm")
    stages.wrap(tts.vocoder, "forward", "vocoder")
    return stages.run(run)


def our_stages(loaded, run) -> dict:
    stages = v2bench.our_front_stages(loaded)
    stages.wrap(loaded.state.sovits, "features", "features")
    stages.wrap(loaded.state.sovits.cfm, "inference", "cfm")
    stages.wrap(loaded.state.vocoder, "forward", "vocoder")
    return stages.run(run)


def time_sides(report: dict, args, paths: dict, wav: Path) -> None:
    import gpt_sovits_e2e_models as tiny
    import gpt_sovits_e2e_references as e2e
    import numpy as np

    from mizuoto import host
    from mizuoto.audio import files

    torch.set_num_threads(args.threads)
    model = args.model
    tts = quiet(lambda: e2e.tts_for({**paths, model: paths[model]}, model))()
    # the GPT upstream's TTS_Config names (full: write_full's, not the tiny one beside the voice)
    loaded = host.load_model("gpt_sovits", str(paths[model]), device="cpu",
                             overrides={"engines.gpt_sovits.load_options.gpt_weights": str(paths["gpt"])})
    inputs = {**e2e.DEFAULTS, "text": e2e.TEXT, "prompt_text": e2e.PROMPT_TEXT, "seed": SEED,
              "sample_steps": args.sample_steps, "ref_audio_path": str(wav)}
    reference = files.read(wav, "reference audio")

    def upstream():
        tts.prompt_cache.update(ref_audio_path=None, prompt_text=None)  # a first request with this reference
        with torch.no_grad():
            (rate, audio), = list(tts.run(dict(inputs)))
        assert rate == RATES[model] and audio.dtype == np.int16
        return torch.from_numpy(audio.copy())

    def ours():
        speech = host.speak(loaded, e2e.TEXT, seed=SEED, params=tiny.speak_params(inputs), reference=reference,
                            reference_text=e2e.PROMPT_TEXT)
        return (speech.waveform[0] * 32768).round().to(torch.int16)

    upstream = quiet(upstream)
    say(f"built in {report['build_s']} s; warm-ups")
    theirs, mine = upstream(), ours()
    report["identical"] = bool(theirs.shape == mine.shape and torch.equal(theirs, mine))
    if not report["identical"]:
        report["samples"] = [int(theirs.numel()), int(mine.numel())]
    times = [[], []]
    for _ in range(args.repeats):
        for side, fn in enumerate((upstream, ours)):
            start = time.perf_counter()
            fn()
            times[side].append(time.perf_counter() - start)
            say(f"{('upstream', 'ours')[side]}: {times[side][-1]:.1f} s")
    seconds = mine.numel() / RATES[model]
    up_s, our_s = min(times[0]), min(times[1])
    report |= {"audio_s": round(seconds, 3), "upstream_s": round(up_s, 3), "ours_s": round(our_s, 3),
               "upstream_rtf": round(up_s / seconds, 4), "ours_rtf": round(our_s / seconds, 4),
               "speedup": round(up_s / our_s, 3),
               "all_times_s": {"upstream": [round(t, 3) for t in times[0]], "ours": [round(t, 3) for t in times[1]]}}
    say("stages, profile")
    report["stages_upstream"] = upstream_stages(tts, upstream)
    report["stages_ours"] = our_stages(loaded, ours)
    report["top_ops_ours"] = top_ops(ours)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, required=True)
    parser.add_argument("--model", choices=("v3", "v4"), default="v4")
    parser.add_argument("--size", choices=("tiny", "full"), default="tiny")
    parser.add_argument("--sample-steps", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=100, help="full: each fragment's early stop (max_sec * 50)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.size == "full" and args.model != "v4":
        parser.error("--size full builds v4 (the issue's full architecture); v3 is timed tiny")
    checkout = args.checkout.resolve()
    commit = os.popen(f"git -C {checkout} rev-parse --short HEAD").read().strip()
    report = {"size": args.size, "model": args.model, "threads": args.threads, "sample_steps": args.sample_steps,
              "commit": commit, "repeats": args.repeats}
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            start = time.perf_counter()
            paths, wav = build(Path(tmp), checkout, args.size, args.tokens)
            report["build_s"] = round(time.perf_counter() - start, 1)
            time_sides(report, args, paths, wav)
        finally:
            os.chdir(here)
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    if not report["identical"]:
        raise SystemExit("the audio differs: the speeds above are not of the same work")


if __name__ == "__main__":
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    main()
