#!/usr/bin/env python
"""Reference chunks of CosyVoice 2 and CosyVoice 3 streaming (stream=True), written by upstream's own CosyVoice2 /
CosyVoice3 classes on cosyvoice_e2e's tiny release folder, in one defined thread schedule.

    python scripts/parity/cosyvoice_stream_references.py OUTDIR --checkout PATH

The interpreter, the release, the recordings and the stand-ins are cosyvoice_e2e_references'. Upstream's
model.tts(stream=True) runs the LM in a thread (llm_job) while the main thread polls the tokens every 0.1 s and
vocodes each chunk once enough tokens are there; CosyVoice 2's HiFT draws from the same global generator as the LM,
so upstream's chunks depend on timing. Here the two threads run in lockstep: each of the main loop's sleeps lets the
LM draw exactly one token (a semaphore before each step of llm.inference, another once llm_job has stored it), so
after every token the main thread checks for a chunk, as if the LM thread waited for it. That is one of the
schedules upstream's own code can take, and it is the order Mizuoto's engine defines (engines/cosyvoice/stream.py).
Upstream keeps its grown token_hop_len on the model for the next request; it is set back to 25 before each request
(a freshly loaded model's value), as Mizuoto starts every request.

Recorded per case, after torch.manual_seed(seed): every fragment's LM tokens and each chunk's waveform.
"""

from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cosyvoice_e2e_references as e2e  # noqa: E402  (pins the process, as that writer does)
import torch  # noqa: E402
from pinned import checkout_writer_main, write_checkout_tensors  # noqa: E402

LONG_EN = ("Streaming speech arrives in pieces: the first one early, the later ones longer, until the whole text "
           "has been spoken aloud, one chunk after another.")
SEED_TRIES = 40
# name -> (version, method, arguments, first seed)
CASES = {
    "cv2/stream_zero_shot": ("cv2", "zero_shot", {"tts_text": LONG_EN, "prompt_text": "希望你以后能够做的比我还好呦。",
                                                  "recording": "a"}, 31),
    "cv2/stream_cross_lingual": ("cv2", "cross_lingual", {"tts_text": e2e.LONG_ZH, "recording": "c"}, 32),
    "cv3/stream_zero_shot": ("cv3", "zero_shot", {"tts_text": LONG_EN,
                                                  "prompt_text": e2e.SYSTEM + "The weather is nice today.",
                                                  "recording": "b"}, 41),
    "cv3/stream_cross_lingual": ("cv3", "cross_lingual", {"tts_text": e2e.SYSTEM + LONG_EN, "recording": "a"}, 42),
}


def lockstep(model, cli_model) -> tuple:
    """Make model.tts(stream=True)'s two threads take turns: one LM token per main-loop sleep."""
    go, done = threading.Semaphore(0), threading.Semaphore(0)
    state = {"finished": True}
    inference, job, tts = model.llm.inference, model.llm_job, model.tts

    def stepped(*args, **kwargs):
        steps = inference(*args, **kwargs)
        while True:
            go.acquire()
            try:
                token = next(steps)
            except StopIteration:
                return
            yield token
            done.release()  # llm_job has stored the token (or dropped a silence)

    def job_in_step(*args):
        try:
            job(*args)
        finally:
            state["finished"] = True
            done.release()

    def sleep(_seconds):
        if not state["finished"]:
            go.release()
            done.acquire()

    def fresh_tts(*args, **kwargs):
        model.token_hop_len = 25
        state["finished"] = False
        yield from tts(*args, **kwargs)

    model.llm.inference, model.llm_job, model.tts = stepped, job_in_step, fresh_tts
    original_sleep = cli_model.time.sleep
    cli_model.time.sleep = sleep
    return lambda: setattr(cli_model.time, "sleep", original_sleep)


def run_case(voice, cli_model, method: str, args: dict, wavs: dict, seed: int) -> tuple[list, list]:
    """One case after torch.manual_seed(seed), in lockstep: -> (each fragment's LM tokens, each fragment's chunks)."""
    model, fragments, per_request = voice.model, [], []
    llm_job, inference, tts = model.llm_job, model.llm.inference, model.tts

    def recording_job(*a):
        llm_job(*a)
        fragments.append(list(model.tts_speech_token_dict[a[-1]]))

    model.llm_job = recording_job
    restore = lockstep(model, cli_model)
    streamed = model.tts

    def counted(*a, **k):  # one model.tts call per fragment
        per_request.append([])
        for out in streamed(*a, **k):
            per_request[-1].append(out["tts_speech"])
            yield out

    model.tts = counted
    torch.manual_seed(seed)
    wav = str(wavs[args["recording"]])
    try:
        if method == "zero_shot":
            run = voice.inference_zero_shot(args["tts_text"], args["prompt_text"], wav, stream=True)
        else:
            run = voice.inference_cross_lingual(args["tts_text"], wav, stream=True)
        for _ in run:
            pass
    finally:
        restore()
        model.llm.inference, model.llm_job, model.tts = inference, llm_job, tts
    return fragments, per_request


def outputs(checkout: Path) -> tuple[dict, dict]:
    import soundfile

    e2e.stand_ins(checkout)
    import cosyvoice.cli.model as cli_model
    from cosyvoice.cli.cosyvoice import CosyVoice2, CosyVoice3

    refs, cases = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        wavs = {}
        for name, (rate, *_rest) in e2e.RECORDINGS.items():
            wavs[name] = tmp / f"{name}.wav"
            soundfile.write(str(wavs[name]), e2e.recording(name), rate, subtype="PCM_16")
        campplus_file = e2e.export_campplus(tmp / e2e.CAMPPLUS_FILE)
        voices = {v: cls(str(e2e.release(tmp / v, v, campplus_file)))
                  for v, cls in (("cv2", CosyVoice2), ("cv3", CosyVoice3))}
        for name, (version, method, args, seed) in CASES.items():
            for tried in range(SEED_TRIES):  # the first seed from `seed` on whose every fragment streams a chunk
                fragments, per_fragment = run_case(voices[version], cli_model, method, args, wavs, seed + tried)
                if all(len(waves) >= 2 for waves in per_fragment):
                    break
            else:
                raise RuntimeError(f"{name}: no seed in {SEED_TRIES} from {seed} streams a chunk before the last")
            for i, (fragment, waves) in enumerate(zip(fragments, per_fragment, strict=True)):
                refs[f"{name}/{i}/tokens"] = torch.tensor(fragment, dtype=torch.int64)
                for j, wave in enumerate(waves):
                    refs[f"{name}/{i}/chunk{j}"] = wave.contiguous()
            cases[name] = {"version": version, "method": method, "args": args, "seed": seed + tried,
                           "chunks": [len(w) for w in per_fragment]}
    return {k: v.contiguous().clone() for k, v in refs.items()}, {"cases": cases}


def write(out: Path, checkout: Path) -> None:
    refs, info = outputs(checkout)
    write_checkout_tensors(out, refs, info, checkout,
                           "cosyvoice/cli/cosyvoice.py CosyVoice2/CosyVoice3 inference_zero_shot and "
                           "inference_cross_lingual with stream=True; cli/model.py tts(stream=True), token2wav, "
                           "llm_job, in lockstep", ["torch", "transformers", "diffusers", "x-transformers",
                                                     "onnxruntime", "HyperPyYAML"], repository="FunAudioLLM/CosyVoice")


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, lambda out, checkout: None, outputs)
