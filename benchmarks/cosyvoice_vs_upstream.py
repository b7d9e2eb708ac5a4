"""CosyVoice 2 / 3 end to end on the CPU: Mizuoto's engine vs upstream's CosyVoice2 / CosyVoice3 classes
(FunAudioLLM/CosyVoice at the checkout given: the yaml through HyperPyYAML, CosyVoiceFrontEnd over onnxruntime) on
the same tiny release folder, request and seed, in one process under the parity pins at `--threads` threads.

    VENV/bin/python benchmarks/cosyvoice_vs_upstream.py --checkout PATH [--threads 1] [--repeats 3] [--json OUT]
(VENV: scripts/parity/cosyvoice_upstream_env.sh; this clone goes on sys.path.)

The release is cosyvoice_e2e's (scripts/parity/cosyvoice_e2e_references.py builds it, with its stand-ins): the tiny
LMs, flows and HiFTs of the CosyVoice sets, a CAM++ at 80 bins -> 192, the tiny S3 tokenizers. The request: a
zero-shot English sentence with the 24 kHz recording of that set and its transcript, seed 11.

First the outputs are asserted identical: our request with upstream's (ONNX Runtime's) speaker embedding gives
upstream's waveform bit for bit (the set's test shows the same). Then each side's whole request is timed, frontend
included (our S3 tokenizer and CAM++ in torch, upstream's in onnxruntime), alternating `--repeats` times after a
warm-up each; the best of each is reported as wall seconds and real-time factor, with the ratio upstream / ours
(> 1: ours is faster), and our time split into the frontend (text, mel, S3 tokens, CAM++) and the model.

--full-size: the same comparison at the released architectures with random weights
(benchmarks/cosyvoice_full_size.py: CosyVoice2-0.5B's and Fun-CosyVoice3-0.5B's LM, flow and HiFT, the S3 tokenizers
and CAM++ at their released sizes), one release folder per version, built once under `--folder` (about 3 and 4.5 GB;
kept and reused when given again) with real ONNX exports of the S3 tokenizer and CAM++ (torch.onnx.export, as the
parity writers export their tiny ones: upstream runs them in onnxruntime, we read their weights) and the random
Qwen2 CosyVoice-BlankEN/model.safetensors that upstream's Qwen2Encoder loads before llm.pt overwrites it.

    VENV/bin/python benchmarks/cosyvoice_vs_upstream.py --checkout PATH --full-size --folder DIR [--threads 1]
        [--repeats 2] [--versions cv2 cv3] [--json OUT]

The request: FULL_TEXT (a short English sentence: 25 text tokens), the 1.6 s recording of the tiny mode (40 prompt
speech tokens) and its transcript, FULL_SEED. The random LM's head is set so that a request is short and bounded:
CosyVoice 2's end row is raised, so it ends exactly at min_len (2 x 25 = 50 tokens, 2.0 s); CosyVoice 3's 200 stop
rows are as drawn, and seed 15 ends it after 41 tokens (1.64 s). Identical outputs are asserted first (that run is
each side's warm-up), with upstream's CAM++ embedding; the S3 tokens are compared as computed (onnxruntime vs our
torch) and reported. Then the whole request is timed on each side, alternating, `--repeats` times: wall seconds
(best) and process CPU seconds (time.process_time, best: what other processes on a shared machine move least), with
where each side's time went: the frontend (upstream: frontend_zero_shot, and `other`: text_normalize, the thread's
start and join; ours: the request minus the stages below, so build_request with the text), the LM (upstream:
llm_job; ours: model.speech_tokens), the flow (flow.inference) and HiFT (hift.inference). At one thread (the
default) a full-size request takes 25-30 CPU seconds a side for CosyVoice 2 and more for 3; the machine's load
average is recorded.

--memory: the peak resident set of loading each full-size release, each side in its own fresh process (this script
again, `--load-child`): VmHWM after the imports and after building the model from the folder; the growth is
reported over the size of llm.pt + flow.pt + hift.pt (and of every file of the folder), and ours over upstream's
(the goal: at most 1.1x).

    VENV/bin/python benchmarks/cosyvoice_vs_upstream.py --checkout PATH --memory --folder DIR [--json OUT]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts" / "parity"))
sys.path.insert(0, str(REPO))
import cosyvoice_e2e_references as e2e  # noqa: E402  (pins the process)
import torch  # noqa: E402

SEED = 11
TEXT = "Hello there, it is three o'clock, and the tiny model speaks a whole sentence for the benchmark."
PROMPT = {"cv2": "希望你以后能够做的比我还好呦。", "cv3": e2e.SYSTEM + "希望你以后能够做的比我还好呦。"}


def quiet(fn):
    def run():
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return fn()
    return run


def tiny(args) -> None:
    """The tiny release of the parity set (the default mode)."""
    torch.set_num_threads(args.threads)
    logging.disable(logging.INFO)
    e2e.stand_ins(args.checkout.resolve())
    import soundfile
    from cosyvoice.cli.cosyvoice import CosyVoice2, CosyVoice3

    from mizuoto.core.options import RuntimeOptions
    from mizuoto.engines.cosyvoice import engine
    from mizuoto.engines.cosyvoice.declaration import ENGINE
    from mizuoto.runtime.context import RequestContext

    report = {"threads": args.threads, "repeats": args.repeats, "text": TEXT, "versions": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rate = e2e.RECORDINGS["a"][0]
        samples = e2e.recording("a")
        wav = tmp / "a.wav"
        soundfile.write(str(wav), samples, rate, subtype="PCM_16")
        reference = (torch.from_numpy(samples.astype("float32") / 32768.0).T.mean(dim=0), rate)
        campplus = e2e.export_campplus(tmp / e2e.CAMPPLUS_FILE)
        for version, cls in (("cv2", CosyVoice2), ("cv3", CosyVoice3)):
            folder = e2e.release(tmp / version, version, campplus)
            theirs = quiet(lambda folder=folder, cls=cls: cls(str(folder)))()
            ours = engine.load(folder, torch.device("cpu"), torch.float32,
                               RuntimeOptions("cosyvoice", "auto", False, True, (), {}))
            params = ENGINE.speak_defaults()

            def upstream(theirs=theirs, version=version):
                torch.manual_seed(SEED)
                return torch.cat([o["tts_speech"] for o in theirs.inference_zero_shot(
                    TEXT, PROMPT[version], str(wav), stream=False)], dim=1)

            def mizuoto(ours=ours, params=params, version=version):
                return engine.speak(ours, TEXT, RequestContext(SEED), params, reference, PROMPT[version])[0]

            want = quiet(upstream)()
            embedding = quiet(lambda theirs=theirs: theirs.frontend._extract_spk_embedding(str(wav)))()
            request = replace(engine.build_request(ours, TEXT, params, reference, PROMPT[version]),
                              embedding=embedding)
            got, _ = engine.speak_request(ours, request, RequestContext(SEED))
            assert torch.equal(got, want), f"{version}: ours differs from upstream's by {(got - want).abs().max()}"
            times = {"upstream": [], "mizuoto": [], "frontend": []}
            quiet(upstream)()
            mizuoto()
            for _ in range(args.repeats):
                start = time.perf_counter()
                quiet(upstream)()
                times["upstream"].append(time.perf_counter() - start)
                start = time.perf_counter()
                mizuoto()
                times["mizuoto"].append(time.perf_counter() - start)
                start = time.perf_counter()
                engine.build_request(ours, TEXT, params, reference, PROMPT[version])
                times["frontend"].append(time.perf_counter() - start)
            seconds = want.shape[1] / 24000
            best = {k: min(v) for k, v in times.items()}
            report["versions"][version] = {
                "audio_seconds": round(seconds, 3), "identical": True,
                "upstream_s": round(best["upstream"], 4), "mizuoto_s": round(best["mizuoto"], 4),
                "mizuoto_frontend_s": round(best["frontend"], 4),
                "rtf_upstream": round(best["upstream"] / seconds, 4),
                "rtf_mizuoto": round(best["mizuoto"] / seconds, 4),
                "speedup": round(best["upstream"] / best["mizuoto"], 3)}
            print(version, json.dumps(report["versions"][version]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------------------
# --full-size: the released architectures with random weights (benchmarks/cosyvoice_full_size.py)

FULL_TEXT = "Hello there, it is three o'clock, and we walk home."
FULL_SEED = {"cv2": 11, "cv3": 15}  # CV3: the seed that ends its request after 41 tokens


def full_size_module():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import cosyvoice_full_size

    return cosyvoice_full_size


def export_s3(path: Path, version: str) -> Path:
    """A speech tokenizer at the released sizes as a real ONNX graph (onnxruntime runs it upstream), written as
    scripts/parity/s3tokenizer_references.py writes its tiny ones: s3tokenizer's model, randomised there (the FSQ
    projection spread over the encoder's output on this recording), exported with the TorchScript exporter and its
    initializers renamed as the released files name them."""
    import s3tokenizer
    import s3tokenizer_references as s3refs  # the oracle venv's onnx, onnxruntime and s3tokenizer

    kind = "v" + version[2]
    cls, config_cls, name, _, seed = s3refs.MODELS[kind]
    s3refs.MODELS[kind] = (cls, config_cls, name, {}, seed)  # s3tokenizer's defaults: the released sizes
    wave = full_size_module().speech(3.0, 16000)
    mel = s3tokenizer.log_mel_spectrogram(wave)
    model = s3refs.randomised(kind, mel)
    s3refs.export(kind, model, path, (mel[None], torch.tensor([mel.shape[1]], dtype=torch.int32)))
    return path


def export_campplus_full(path: Path) -> Path:
    """CosyVoice's CAM++ at its released sizes (80 -> 192, growth 32, bottleneck 4, 128 channels), exported as the
    tiny set's is (e2e.export_campplus, at those sizes)."""
    tiny_sizes, e2e.CAMPPLUS = e2e.CAMPPLUS, dict(full_size_module().CAMPPLUS)
    try:
        return e2e.export_campplus(path)
    finally:
        e2e.CAMPPLUS = tiny_sizes


def full_release(folder: Path, version: str) -> Path:
    """The full-size release of `version` under `folder`, built once (kept when `folder` is given again): real ONNX
    exports for upstream's onnxruntime, CosyVoice-BlankEN/model.safetensors for its Qwen2Encoder."""
    full = full_size_module()
    target = folder / version
    if (target / "mizuoto_random_release.json").is_file():
        return target
    exports = folder / "exports"
    exports.mkdir(parents=True, exist_ok=True)
    campplus = exports / "campplus.onnx"
    if not campplus.is_file():
        quiet(lambda: export_campplus_full(campplus))()
    s3 = exports / full.cosyvoice_release.TOKENIZER_ONNX[version]
    if not s3.is_file():
        quiet(lambda: export_s3(s3, version))()
    return full.write_release(target, version, speech_tokenizer=s3, campplus=campplus, blank_en_model=True)


def upstream_split(theirs) -> dict:
    """Wall and process CPU seconds of upstream's stages on one CosyVoice2 / CosyVoice3 object: frontend_zero_shot,
    llm_job (its thread, joined before token2wav), flow.inference and hift.inference; and the LM's tokens.
    -> {"wall": {stage: s}, "cpu": {stage: s}, "tokens": n}, reset with `reset_split`."""
    split = {"wall": {}, "cpu": {}, "tokens": 0}
    reset_split(split)
    model = theirs.model

    def wrap(owner, attr, stage):
        original = getattr(owner, attr)

        def timed(*args, **kwargs):
            start, cpu = time.perf_counter(), time.process_time()
            out = original(*args, **kwargs)
            split["wall"][stage] += time.perf_counter() - start
            split["cpu"][stage] += time.process_time() - cpu
            if stage == "lm":
                split["tokens"] += len(model.tts_speech_token_dict[args[-1]])
            return out

        setattr(owner, attr, timed)

    wrap(theirs.frontend, "frontend_zero_shot", "frontend")
    wrap(model, "llm_job", "lm")
    wrap(model.flow, "inference", "flow")
    wrap(model.hift, "inference", "hift")
    return split


def reset_split(split: dict) -> None:
    for clock in ("wall", "cpu"):
        split[clock] = dict.fromkeys(("frontend", "lm", "flow", "hift"), 0.0)
    split["tokens"] = 0


def timed(fn) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of fn()."""
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


def full_size(args) -> None:
    full = full_size_module()
    logging.disable(logging.INFO)
    e2e.stand_ins(args.checkout.resolve())
    import soundfile
    from cosyvoice.cli.cosyvoice import CosyVoice2, CosyVoice3

    from mizuoto.core.options import RuntimeOptions
    from mizuoto.engines.cosyvoice import engine
    from mizuoto.engines.cosyvoice.declaration import ENGINE
    from mizuoto.runtime.context import RequestContext

    repeats = args.repeats or 2
    report = {"mode": "full-size", "threads": args.threads, "repeats": repeats, "text": FULL_TEXT,
              "machine_load_average": list(os.getloadavg()), "versions": {}}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.folder or tmp)
        releases = {v: full_release(folder, v) for v in args.versions}  # before the threads are set: exports pin 1
        torch.set_num_threads(args.threads)
        rate = e2e.RECORDINGS["a"][0]
        samples = e2e.recording("a")
        wav = folder / "a.wav"
        soundfile.write(str(wav), samples, rate, subtype="PCM_16")
        reference = (torch.from_numpy(samples.astype("float32") / 32768.0).T.mean(dim=0), rate)
        for version in args.versions:
            release, seed = releases[version], FULL_SEED[version]
            cls = CosyVoice2 if version == "cv2" else CosyVoice3
            start = time.perf_counter()
            theirs = quiet(lambda release=release, cls=cls: cls(str(release)))()
            load_upstream = time.perf_counter() - start
            start = time.perf_counter()
            ours = engine.load(release, torch.device("cpu"), torch.float32,
                               RuntimeOptions("cosyvoice", "auto", False, True, (), {}))
            load_ours = time.perf_counter() - start
            params = ENGINE.speak_defaults()
            their_split, our_split = upstream_split(theirs), full.Split(ours)

            def upstream(theirs=theirs, version=version, seed=seed):
                torch.manual_seed(seed)
                return torch.cat([o["tts_speech"] for o in theirs.inference_zero_shot(
                    FULL_TEXT, PROMPT[version], str(wav), stream=False)], dim=1)

            def mizuoto(ours=ours, params=params, version=version, seed=seed):
                return engine.speak(ours, FULL_TEXT, RequestContext(seed), params, reference, PROMPT[version])[0]

            # identical first (this run is each side's warm-up too): our request with upstream's CAM++ embedding
            # (onnxruntime's arithmetic) gives upstream's waveform; the S3 tokens are compared as they come
            want = quiet(upstream)()
            embedding = quiet(lambda theirs=theirs: theirs.frontend._extract_spk_embedding(str(wav)))()
            their_tokens, _ = quiet(lambda theirs=theirs: theirs.frontend._extract_speech_token(str(wav)))()
            request = engine.build_request(ours, FULL_TEXT, params, reference, PROMPT[version])
            tokens_equal = torch.equal(request.llm_prompt_tokens, their_tokens.to(torch.int32))
            request = replace(request, embedding=embedding)
            if not tokens_equal:  # onnxruntime rounded an FSQ digit the other way: take its tokens, and say so
                their_tokens = their_tokens.to(torch.int32)
                request = replace(request, llm_prompt_tokens=their_tokens, flow_prompt_tokens=their_tokens)
            got, _ = engine.speak_request(ours, request, RequestContext(seed))
            assert torch.equal(got, want), f"{version}: ours differs from upstream's by {(got - want).abs().max()}"
            walls, cpus = {"upstream": [], "mizuoto": []}, {"upstream": [], "mizuoto": []}
            splits = {"upstream": [], "mizuoto": []}
            for _ in range(repeats):
                reset_split(their_split)
                wall, cpu = timed(quiet(upstream))
                walls["upstream"].append(wall)
                cpus["upstream"].append(cpu)
                stages = {clock: dict(their_split[clock]) for clock in ("wall", "cpu")}
                for clock, total in (("wall", wall), ("cpu", cpu)):  # text_normalize, tqdm, the joins
                    stages[clock]["other"] = total - sum(stages[clock].values())
                splits["upstream"].append(stages)
                our_split.reset()
                wall, cpu = timed(mizuoto)
                walls["mizuoto"].append(wall)
                cpus["mizuoto"].append(cpu)
                stages = {"wall": dict(our_split.seconds), "cpu": dict(our_split.cpu)}
                for clock, total in (("wall", wall), ("cpu", cpu)):  # build_request and the rest
                    stages[clock]["frontend"] = total - sum(stages[clock].values())
                splits["mizuoto"].append(stages)
            seconds = want.shape[1] / 24000
            row = {"audio_seconds": round(seconds, 3), "identical": True, "s3_tokens_equal": tokens_equal,
                   "speech_tokens": our_split.tokens, "upstream_tokens": their_split["tokens"], "seed": seed,
                   "load_upstream_s": round(load_upstream, 2), "load_mizuoto_s": round(load_ours, 2)}
            for side in ("upstream", "mizuoto"):
                best = min(range(repeats), key=walls[side].__getitem__)
                row[f"{side}_s"] = round(walls[side][best], 3)
                row[f"rtf_{side}"] = round(walls[side][best] / seconds, 4)
                row[f"{side}_cpu_s"] = round(min(cpus[side]), 3)
                row[f"{side}_all_s"] = [round(t, 3) for t in walls[side]]
                row[f"{side}_split_s"] = {k: round(v, 3) for k, v in splits[side][best]["wall"].items()}
                row[f"{side}_split_cpu_s"] = {k: round(min(s["cpu"][k] for s in splits[side]), 3)
                                              for k in splits[side][best]["cpu"]}
            row["speedup"] = round(row["upstream_s"] / row["mizuoto_s"], 3)
            row["speedup_cpu"] = round(row["upstream_cpu_s"] / row["mizuoto_cpu_s"], 3)
            row["stage_speedup_cpu"] = {k: round(row["upstream_split_cpu_s"][k] / row["mizuoto_split_cpu_s"][k], 3)
                                        for k in ("frontend", "lm", "flow", "hift")
                                        if row["mizuoto_split_cpu_s"][k] > 0}
            report["versions"][version] = row
            print(version, json.dumps(row), flush=True)
            del theirs, ours, upstream, mizuoto, their_split, our_split
            gc.collect()
    report["sizes"] = {v: full.sizes(v) for v in args.versions}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------------------
# --memory: the peak resident set while loading, each side in a fresh process


def load_child(args) -> None:
    """In a fresh process: VmHWM before and after loading the release (its imports done first), as one JSON line."""
    full = full_size_module()
    logging.disable(logging.INFO)
    release = Path(args.folder) / args.version
    if args.load_child == "upstream":
        e2e.stand_ins(args.checkout.resolve())
        import importlib

        from cosyvoice.cli.cosyvoice import CosyVoice2, CosyVoice3

        # what the yaml's tags import while loading, imported before the first reading (imports are not loading)
        for name in ("cosyvoice.llm.llm", "cosyvoice.flow.flow", "cosyvoice.flow.flow_matching",
                     "cosyvoice.flow.decoder", "cosyvoice.flow.DiT.dit", "cosyvoice.transformer.upsample_encoder",
                     "cosyvoice.hifigan.generator", "cosyvoice.hifigan.f0_predictor", "cosyvoice.utils.common",
                     "transformers.models.qwen2.modeling_qwen2", "onnxruntime", "whisper"):
            importlib.import_module(name)

        def load():
            return (CosyVoice2 if args.version == "cv2" else CosyVoice3)(str(release))
    else:
        from mizuoto.core.options import RuntimeOptions
        from mizuoto.engines.cosyvoice import engine
        from mizuoto.nn import campplus_onnx, s3_tokenizer_weights  # noqa: F401  (imported while loading)

        def load():
            return engine.load(release, torch.device("cpu"), torch.float32,
                               RuntimeOptions("cosyvoice", "auto", False, True, (), {}))
    gc.collect()
    before, rss_before = full.vm_kib("VmHWM"), full.vm_kib("VmRSS")
    start = time.perf_counter()
    model = quiet(load)()
    seconds = time.perf_counter() - start
    gc.collect()
    after, rss_after = full.vm_kib("VmHWM"), full.vm_kib("VmRSS")
    print(json.dumps({"side": args.load_child, "version": args.version, "hwm_before_kib": before,
                      "hwm_after_kib": after, "rss_before_kib": rss_before, "rss_after_kib": rss_after,
                      "load_s": round(seconds, 2), "loaded": type(model).__name__}))


def memory(args) -> None:
    full = full_size_module()
    report = {"mode": "memory", "versions": {}}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.folder or tmp)
        e2e.stand_ins(args.checkout.resolve())  # the exports import the checkout's matcha stand-ins
        for version in args.versions:
            full_release(folder, version)
        for version in args.versions:
            sizes = full.checkpoint_bytes(folder / version)
            row = {"bytes": sizes}
            for side in ("upstream", "mizuoto"):
                out = subprocess.run([sys.executable, __file__, "--checkout", str(args.checkout), "--folder",
                                      str(folder), "--load-child", side, "--version", version],
                                     capture_output=True, text=True, check=True)
                child = json.loads(out.stdout.strip().splitlines()[-1])
                growth = (child["hwm_after_kib"] - child["hwm_before_kib"]) * 1024
                row[side] = {**child, "growth_bytes": growth,
                             "growth_over_checkpoints": round(growth / sizes["checkpoints"], 3),
                             "growth_over_all_files": round(growth / sizes["all"], 3)}
            row["ratio_mizuoto_over_upstream"] = round(row["mizuoto"]["growth_bytes"] /
                                                       row["upstream"]["growth_bytes"], 3)
            report["versions"][version] = row
            print(version, json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per side (default 3; --full-size 2)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--full-size", action="store_true", help="the released architectures, random weights")
    parser.add_argument("--memory", action="store_true", help="peak memory at load, each side in its own process")
    parser.add_argument("--folder", type=Path, help="where the full-size releases are built (kept: reused later)")
    parser.add_argument("--versions", nargs="+", default=["cv2", "cv3"], choices=["cv2", "cv3"])
    parser.add_argument("--load-child", choices=["upstream", "mizuoto"], help=argparse.SUPPRESS)
    parser.add_argument("--version", choices=["cv2", "cv3"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load_child:
        load_child(args)
    elif args.memory:
        memory(args)
    elif args.full_size:
        full_size(args)
    else:
        args.repeats = args.repeats or 3
        tiny(args)


if __name__ == "__main__":
    main()
