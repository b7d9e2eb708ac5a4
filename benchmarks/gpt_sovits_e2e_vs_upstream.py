"""GPT-SoVITS end to end on the CPU: Mizuoto's host.speak vs upstream's TTS_infer_pack.TTS.TTS.run (api_v2's pipeline,
RVC-Boss/GPT-SoVITS at the checkout given) on the same model files, request and seed, in one process under the
parity pins at `--threads` threads; the int16 audio is compared first.

    VENV/bin/python benchmarks/gpt_sovits_e2e_vs_upstream.py --checkout PATH [--size tiny|full] [--model v2ProPlus]
        [--threads 1] [--repeats 3] [--tokens 200] [--json OUT]
(VENV: scripts/parity/gpt_sovits_upstream_env.sh with the e2e writer's extras, as for
scripts/parity/gpt_sovits_e2e_references.py; this clone goes on sys.path.)

Upstream runs from a staged copy of the checkout with the e2e writer's stand-ins (gpt_sovits_e2e_references.stage,
speaker=True: upstream's own sv.SV runs). The request: the e2e set's Chinese text of two fragments, its transcript
and reference recording, seed 1, api_v2's defaults (cut5, split_bucket, parallel_infer, batch_size 1). Upstream's
prompt cache is cleared before each of its runs, so every run is its first request with that reference (it extracts
the reference's prompt, CN-HuBERT's LayerDrop draws included, and reads the transcript again): what every request of
ours is, so the same work is timed and the audio must be identical. The sides alternate `--repeats` times after a
warm-up each; each side's best is reported as wall seconds and real-time factor (wall / audio seconds), and the
ratio upstream / ours (> 1: ours is faster).

Where the time goes: one more run of each side with its stages timed (front end without BERT, BERT, the reference's
spectrogram and prompt extraction without CN-HuBERT, CN-HuBERT, the speaker embedding, T2S, SoVITS decode, the rest),
and torch.profiler's busiest operators of ours. Load memory: each side loads the files in a fresh process; VmHWM
growth over its imports, against the files' size.

`tiny`: the e2e set's tiny models (gpt_sovits_e2e_models.py; the GPT's EOS lean as the set has it; with `--model
v2ProPlus`, the default, the speaker encoder is ERes2NetV2 at its released size, as in the set). `full`: the released
architectures with seeded random weights: the v2 GPT of s1longer-v2.yaml (t2s.RELEASED_V2) with data.max_sec =
`--tokens` / 50 (the released 54 s would be 2700 tokens a fragment) and EOS's output row zero (a logit of 0 never
reaches top_k 15 of 1025, so every fragment runs to the early stop), the v2ProPlus SoVITS (sovits.RELEASED_V2PRO_PLUS,
732 symbols, float16 with the b"06" tag), chinese-roberta-wwm-ext-large's size (1024 x 24 layers, 16 heads, 4096,
the zh_g2p set's vocabulary), chinese-hubert-base's size (768 x 12, 512-channel convolutions); G2PW and the language
detector stay the e2e set's tiny ones.
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts" / "parity"))
sys.path.insert(0, str(REPO))
from pinned import pin_process  # noqa: E402

pin_process()

import torch  # noqa: E402

SEED = 1
FULL_SEED = 7000


def say(what: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def quiet(fn):
    """Upstream prints a progress bar and lines per request: kept off the report."""
    def run():
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return fn()
    return run


# --- the full-size files ----------------------------------------------------------------------------------------------
def entries_of(make) -> list:
    """[(name, shape)] of a module built on the meta device (nothing allocated, nothing initialised)."""
    with torch.device("meta"):
        model = make()
    return [[k, list(v.shape)] for k, v in model.state_dict().items()]


def gpt_full_state(entries: list, eos: int) -> dict:
    """The released GPT's state, drawn as the e2e set draws its tiny GPT (one generator, sorted names), EOS's output
    row zero."""
    import gpt_sovits_e2e_models as tiny

    state = tiny.gpt_fill(entries, FULL_SEED)
    state["model.ar_predict_layer.weight"][eos] = 0
    return state


def write_full(root: Path, paths: dict, tokens: int) -> dict:
    """The released architectures (random weights) in root/full (SoVITS .pth and GPT .ckpt) and, over the tiny
    ones, the chinese-roberta and chinese-hubert folders in pretrained_models (the speaker encoder is already at its
    released size)."""
    import gpt_sovits_e2e_models as tiny
    import transformers
    from AR.models.t2s_lightning_module import Text2SemanticLightningModule
    from gpt_sovits_weights import sovits_file_bytes, sovits_state
    from module.models import SynthesizerTrn

    from mizuoto.engines.gpt_sovits import sovits, t2s

    folder = root / "full"
    folder.mkdir(parents=True, exist_ok=True)
    gpt_config = {"model": dict(t2s.RELEASED_V2), "data": {"max_sec": tokens / 50}}
    gpt_entries = entries_of(lambda: Text2SemanticLightningModule(gpt_config, "****", is_train=False))
    gpt = folder / "full_v2-e1.ckpt"
    torch.save({"weight": gpt_full_state(gpt_entries, gpt_config["model"]["EOS"]), "config": gpt_config,
                "info": "mizuoto benchmark: released v2 GPT, random"}, gpt)
    model = {**sovits.RELEASED_V2PRO_PLUS, "p_dropout": 0.0, "version": "v2ProPlus"}
    config = {**tiny.SOVITS_CONFIG, "model": model}
    data = config["data"]
    sovits_entries = entries_of(lambda: SynthesizerTrn(data["filter_length"] // 2 + 1,
                                                       config["train"]["segment_size"] // data["hop_length"],
                                                       n_speakers=data["n_speakers"], **model))
    pth = folder / "full_v2ProPlus.pth"
    pth.write_bytes(sovits_file_bytes(sovits_state(sovits_entries, FULL_SEED + 1), config, "v2ProPlus"))
    vocab = len((paths["bert"] / "vocab.txt").read_text(encoding="utf-8").splitlines())
    bert_config = transformers.BertConfig(**{**tiny.bert_config_kwargs(vocab), "num_hidden_layers": 24,
                                             "intermediate_size": 4096, "max_position_embeddings": 512})
    bert_entries = [e for e in entries_of(lambda: transformers.BertForMaskedLM(bert_config))
                    if e[0] not in tiny.BERT_TIED]
    tiny.write_hf_folder(paths["bert"], bert_config.to_dict(), bert_entries, FULL_SEED + 2,
                         {"tokenizer_config.json": tiny.BERT_TOKENIZER})
    hubert_config = transformers.HubertConfig(**{**tiny.HUBERT_KWARGS, "num_hidden_layers": 12, "conv_dim": [512] * 7,
                                                 "intermediate_size": 3072, "num_conv_pos_embeddings": 128})
    hubert_entries = entries_of(lambda: transformers.HubertModel(hubert_config))
    tiny.write_hf_folder(paths["hubert"], hubert_config.to_dict(), hubert_entries, FULL_SEED + 3,
                         {"preprocessor_config.json": tiny.FEATURE_EXTRACTOR})
    return {**paths, "v2ProPlus": pth, "gpt": gpt}


def weights_bytes(paths: dict, model: str) -> int:
    files = [paths["sovits" if model == "v2" else model], paths["gpt"], paths["bert"] / "model.safetensors",
             paths["hubert"] / "model.safetensors"] + ([paths["speaker"]] if model != "v2" else [])
    return sum(Path(f).stat().st_size for f in files)


# --- the stages -------------------------------------------------------------------------------------------------------
class Stages:
    """Wall time per stage: each wrapped callable's inclusive time less the wrapped calls inside it."""

    def __init__(self):
        self.exclusive, self.calls, self.stack, self.undo = {}, {}, [], []

    def wrap(self, owner, attribute: str, stage: str) -> None:
        original = getattr(owner, attribute)

        def timed(*args, **kwargs):
            self.stack.append(0.0)
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                inner = self.stack.pop()
                self.exclusive[stage] = self.exclusive.get(stage, 0.0) + elapsed - inner
                self.calls[stage] = self.calls.get(stage, 0) + 1
                if self.stack:
                    self.stack[-1] += elapsed
        had = attribute in getattr(owner, "__dict__", {})
        self.undo.append((owner, attribute, original if had else None))
        setattr(owner, attribute, timed)

    def release(self) -> None:
        for owner, attribute, original in reversed(self.undo):
            if original is None:
                delattr(owner, attribute)
            else:
                setattr(owner, attribute, original)
        self.undo.clear()

    def run(self, run) -> dict:
        """Time `run` with the wrapped stages, then unwrap them."""
        try:
            start = time.perf_counter()
            run()
            return self.report(time.perf_counter() - start)
        finally:
            self.release()

    def report(self, total: float) -> dict:
        stages = {k: round(v, 3) for k, v in sorted(self.exclusive.items())}
        stages["other"] = round(total - sum(self.exclusive.values()), 3)
        stages["total"] = round(total, 3)
        stages["calls"] = dict(sorted(self.calls.items()))
        return stages


def upstream_front_stages(tts) -> Stages:
    """Upstream's stages up to the GPT's tokens (front end, BERT, reference, CN-HuBERT, T2S), wrapped."""
    stages = Stages()
    pre = tts.text_preprocessor
    stages.wrap(pre, "preprocess", "front_end")
    stages.wrap(pre, "segment_and_extract_feature_for_text", "front_end")
    stages.wrap(tts.bert_model, "forward", "bert")
    stages.wrap(tts, "set_ref_audio", "reference")
    stages.wrap(tts.cnhuhbert_model.model, "forward", "hubert")
    stages.wrap(tts.t2s_model.model, "infer_panel_batch_infer", "t2s")
    stages.wrap(tts.t2s_model.model, "infer_panel_naive", "t2s")
    return stages


def our_front_stages(loaded) -> Stages:
    """Ours up to the GPT's tokens, wrapped as upstream_front_stages names them."""
    from mizuoto.engines.gpt_sovits import engine
    from mizuoto.engines.gpt_sovits import reference as ref
    from mizuoto.engines.gpt_sovits.text_frontend import TextFrontEnd

    state = loaded.state
    stages = Stages()
    stages.wrap(TextFrontEnd, "fragments", "front_end")
    stages.wrap(TextFrontEnd, "prompt", "front_end")
    stages.wrap(state.bert, "forward", "bert")
    stages.wrap(engine, "timbres", "reference")
    stages.wrap(ref, "prompt_tokens", "reference")
    stages.wrap(state.hubert, "forward", "hubert")
    stages.wrap(state.t2s, "generate", "t2s")
    return stages


def upstream_stages(tts, run) -> dict:
    stages = upstream_front_stages(tts)
    if tts.sv_model is not None:
        stages.wrap(tts.sv_model, "compute_embedding3", "speaker")
    stages.wrap(tts.vits_model, "decode", "sovits")
    return stages.run(run)


def our_stages(loaded, run) -> dict:
    from mizuoto.engines.gpt_sovits import engine

    stages = our_front_stages(loaded)
    stages.wrap(engine, "speaker_embedding", "speaker")
    stages.wrap(loaded.state.sovits, "decode", "sovits")
    return stages.run(run)


def top_ops(run, rows: int = 12) -> list:
    """torch.profiler's busiest operators of one run: [name, self seconds, calls]."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    return [[e.key, round(e.self_cpu_time_total / 1e6, 3), e.count] for e in events[:rows]]


# --- load memory (a fresh process per side) -------------------------------------------------------------------------
def hwm_kib() -> int:
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))


def load_side(args) -> None:
    """A child: import the side, VmHWM, load the files, VmHWM; both printed."""
    if args.load_side == "ours":
        from mizuoto import host
        from mizuoto.engines.gpt_sovits import engine  # noqa: F401

        before = hwm_kib()
        loaded = host.load_model("gpt_sovits", str(args.sovits), device="cpu")
        modules = [m for m in (loaded.state.t2s, loaded.state.sovits, loaded.state.hubert, loaded.state.speaker,
                               loaded.state.bert) if m is not None]
    else:
        import gpt_sovits_e2e_references as e2e

        os.chdir(args.stage)
        sys.path[:0] = [str(args.stage / "GPT_SoVITS"), str(args.stage)]
        e2e.install_stubs(speaker=True)
        with contextlib.redirect_stdout(io.StringIO()):
            from TTS_infer_pack.TTS import TTS, TTS_Config
        before = hwm_kib()
        tts = quiet(lambda: TTS(TTS_Config(upstream_config(args.version, args.sovits, args.gpt, args.bert,
                                                            args.hubert))))()
        modules = [m for m in (tts.t2s_model, tts.vits_model, tts.cnhuhbert_model, tts.bert_model) if m is not None]
        if tts.sv_model is not None:
            modules.append(tts.sv_model.embedding_model)
    loaded_hwm = hwm_kib()
    with torch.no_grad():  # every weight read once (a memory-mapped file's pages then count too)
        sum(float(p.float().sum()) for m in modules for p in m.parameters())
    print(before, loaded_hwm, hwm_kib())


def load_growth(side: str, stage: Path, paths: dict, model: str) -> tuple[int, int]:
    sovits = paths["sovits" if model == "v2" else model]
    command = [sys.executable, __file__, "--load-side", side, "--stage", str(stage), "--sovits", str(sovits),
               "--gpt", str(paths["gpt"]), "--bert", str(paths["bert"]), "--hubert", str(paths["hubert"]),
               "--version", model, "--checkout", "."]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    before, after, touched = map(int, done.stdout.split()[-3:])
    return before, after, touched


# --- the two sides ----------------------------------------------------------------------------------------------------
def upstream_config(version: str, sovits, gpt, bert, hubert) -> dict:
    return {"custom": {"device": "cpu", "is_half": False, "version": version, "t2s_weights_path": str(gpt),
                       "vits_weights_path": str(sovits), "bert_base_path": str(bert),
                       "cnhuhbert_base_path": str(hubert)}}


def time_sides(report: dict, args, model: str, paths: dict, wav: Path) -> None:
    """Both sides loaded in this process, the audio compared, the timed runs, the stages and the profile."""
    import gpt_sovits_e2e_models as tiny
    import gpt_sovits_e2e_references as e2e
    import numpy as np

    sovits_path = paths["sovits" if model == "v2" else model]
    torch.set_num_threads(args.threads)
    torch.backends.mkldnn.enabled = args.onednn

    from TTS_infer_pack.TTS import TTS, TTS_Config

    from mizuoto import host
    from mizuoto.audio import files

    tts = quiet(lambda: TTS(TTS_Config(upstream_config(model, sovits_path, paths["gpt"], paths["bert"],
                                                      paths["hubert"]))))()
    loaded = host.load_model("gpt_sovits", str(sovits_path), device="cpu")
    inputs = {**e2e.DEFAULTS, "text": e2e.TEXT, "prompt_text": e2e.PROMPT_TEXT, "seed": SEED,
              "ref_audio_path": str(wav)}
    reference = files.read(wav, "reference audio")

    def upstream():
        # a first request with this reference: the cached prompt and transcript forgotten
        tts.prompt_cache.update(ref_audio_path=None, prompt_text=None)
        with torch.no_grad():
            (rate, audio), = list(tts.run(dict(inputs)))
        assert rate == 32000 and audio.dtype == np.int16
        return torch.from_numpy(audio.copy())

    def ours():
        speech = host.speak(loaded, e2e.TEXT, seed=SEED, params=tiny.speak_params(inputs), reference=reference,
                            reference_text=e2e.PROMPT_TEXT)
        return (speech.waveform[0] * 32768).round().to(torch.int16)

    upstream = quiet(upstream)
    say(f"built in {report['build_s']} s; warm-ups")
    theirs, mine = upstream(), ours()  # the warm-ups, compared
    same = theirs.shape == mine.shape
    report["identical"] = bool(same and torch.equal(theirs, mine))
    report["compared"] = ("int16 audio; upstream's prompt cache cleared before each run (its first request "
                          "with the reference, CN-HuBERT's LayerDrop draws included), ours plain host.speak")
    if not report["identical"]:
        report["samples"] = [int(theirs.numel()), int(mine.numel())]
        if same:
            report["max_abs_diff"] = int((theirs.int() - mine.int()).abs().max())
    times = [[], []]
    for _ in range(args.repeats):
        for side, fn in enumerate((upstream, ours)):
            start = time.perf_counter()
            out = fn()
            times[side].append(time.perf_counter() - start)
            say(f"{('upstream', 'ours')[side]}: {times[side][-1]:.1f} s")
            if report["identical"]:
                assert torch.equal(out, theirs), "a timed run's audio differs from the first"
    seconds = mine.numel() / 32000
    up_s, our_s = min(times[0]), min(times[1])
    report |= {"audio_s": round(seconds, 3), "upstream_s": round(up_s, 3), "ours_s": round(our_s, 3),
               "upstream_rtf": round(up_s / seconds, 4), "ours_rtf": round(our_s / seconds, 4),
               "speedup": round(up_s / our_s, 3),
               "all_times_s": {"upstream": [round(t, 3) for t in times[0]],
                               "ours": [round(t, 3) for t in times[1]]}}
    say("stages, profile")
    report["stages_upstream"] = upstream_stages(tts, upstream)
    report["stages_ours"] = our_stages(loaded, ours)
    report["top_ops_ours"] = top_ops(ours)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, required=True)
    parser.add_argument("--size", choices=("tiny", "full"), default="tiny")
    parser.add_argument("--model", choices=("v2", "v2ProPlus"), default="v2ProPlus",
                        help="the SoVITS (tiny only: full is always v2ProPlus)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=200, help="full: each fragment's early stop (max_sec * 50)")
    parser.add_argument("--onednn", action="store_true",
                        help="oneDNN on (the pins turn it off: convolutions then run on ATen's slow kernels)")
    parser.add_argument("--memory-only", action="store_true", help="build, measure load memory, no timing")
    parser.add_argument("--no-memory", action="store_true", help="skip the load-memory subprocesses")
    parser.add_argument("--json", type=Path, default=None)
    for hidden in ("load-side", "stage", "sovits", "gpt", "bert", "hubert", "version"):  # the memory child
        parser.add_argument(f"--{hidden}", type=str if hidden in ("load-side", "version") else Path,
                            help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load_side:
        return load_side(args)
    model = "v2ProPlus" if args.size == "full" else args.model
    checkout = args.checkout.resolve()
    commit = os.popen(f"git -C {checkout} rev-parse --short HEAD").read().strip()
    report = {"size": args.size, "model": model, "threads": args.threads, "onednn": args.onednn, "commit": commit,
              "repeats": args.repeats}

    import gpt_sovits_e2e_models as tiny
    import gpt_sovits_e2e_references as e2e  # (importing a writer pins one thread: first, then set)

    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        e2e.stage(checkout, tmp, speaker=True)
        try:
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                record = e2e.record_models(pro=model != "v2")
                paths = e2e.prepare(tmp, record)
            if args.size == "full":
                paths = write_full(tmp / "GPT_SoVITS", paths, args.tokens)
            wav = tiny.write_reference(tmp / "reference.wav")
            report["build_s"] = round(time.perf_counter() - start, 1)
            report["weights_gib"] = round(weights_bytes(paths, model) / 2**30, 3)
            if not args.memory_only:
                time_sides(report, args, model, paths, wav)
            if not args.no_memory:
                for side in ("upstream", "ours"):
                    before, after, touched = load_growth(side, tmp, paths, model)
                    report[f"touched_rss_growth_gib_{side}"] = round((touched - before) / 2**20, 3)
                    report[f"load_peak_rss_gib_{side}"] = round(after / 2**20, 3)
                    report[f"load_rss_growth_gib_{side}"] = round((after - before) / 2**20, 3)
                    report[f"load_growth_over_weights_{side}"] = round(
                        (after - before) * 1024 / weights_bytes(paths, model), 3)
                report["load_growth_ratio"] = round(report["load_rss_growth_gib_ours"]
                                                    / report["load_rss_growth_gib_upstream"], 3)
        finally:
            os.chdir(here)
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    if not report.get("identical", True):
        raise SystemExit("the audio differs: the speeds above are not of the same work")


if __name__ == "__main__":
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    main()
