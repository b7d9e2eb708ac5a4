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
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
