"""IndexTTS 2 end to end on the CPU: Mizuoto's engine vs upstream's IndexTTS2 class (index-tts/index-tts at the
checkout given: indextts/infer_v2.py, `infer`) on the same release folder, request and seed, in one process under
the parity pins at `--threads` threads.

    VENV/bin/python benchmarks/indextts_vs_upstream.py --checkout PATH [--threads 1] [--repeats 3] [--json OUT]
(VENV: scripts/parity/indextts_upstream_env.sh; this clone goes on sys.path.)

The release is the indextts/e2e set's (scripts/parity/indextts_release.py writes it from the recipe the set records,
with the set's bpe.model), and upstream's IndexTTS2 is built and called on it as the set's writer does
(scripts/parity/indextts_e2e_references.py: its stand-ins for modelscope, matplotlib, the dac quantizer and 2.5's
tokenizer, and the identity text normaliser on both sides). The request: the set's `speaker` case (its text, the
speaker's own emotion, max_mel_tokens 24, seed 11) with the set's speaker.wav.

First the outputs are asserted identical: our int16 waveform (the segments' PCM joined, as the set's test compares
it) is upstream's bit for bit. Then each side's whole request is timed, alternating, `--repeats` times after a
warm-up each: upstream's `infer` with its reference caches cleared first (it keeps the speaker's features between
calls with the same file; our `speak` computes them per request, so both time the same work), ours `speak`. The
best of each is reported as wall seconds, process CPU seconds (time.process_time) and real-time factor, with the
ratio upstream / ours (> 1: ours is faster), and where each side's time went (Split): the reference models
(w2v-BERT's passes, the codec's quantize, the reference mel, CAM++; ours also as one `reference` stage: voice and
the emotion pass, their resampling and features included), the emotion vector (merge_emovec: the emotion
Conformer and Perceiver), the GPT decode (upstream: inference_speech, the
conditioning encoders included; ours: the speaker latents, the prompt and the beam-search decode), the GPT's
latent pass, the s2mel CFM solve (25 steps), BigVGAN, and `other` (the rest of the request: text, resampling,
SeamlessM4T features, the length regulator, the joins).

--full-size: the same comparison at the released architecture (IndexTeam/IndexTTS-2's config.yaml, version 2.0)
with random weights: the GPT 1280 wide, 24 layers, 20 heads (text vocabulary 12000, 8194 mel codes), its
Conformer conditioning 512 / 2048 / 8 heads / 6 blocks and the emotion one 512 / 1024 / 4 / 4, the semantic codec
(8192 x 8, vocos 384 / 2048 / 12), the s2mel DiT 512 / 8 heads / 13 layers with its WaveNet 512 / 8 / kernel 5 and
the length regulator 512 over 1024, emo_num [3, 17, 2, 8, 4, 5, 10, 24], BigVGAN v2 22 kHz 80 bands 256x (the
checkout's vendored config.json), w2v-BERT 2.0 at its full 24 layers x 1024 and CAM++ as released. The recipe is
the set writer's (every tensor's name and shape from upstream's own modules built at those sizes, values from
cosyvoice_weights.state), written once into `--folder` (about 6 GB; kept and reused when given again).

    VENV/bin/python benchmarks/indextts_vs_upstream.py --checkout PATH --full-size --folder DIR [--threads 1]
        [--repeats 1] [--json OUT]

The request is bounded: the random GPT's stop row is lowered (FULL_STOP_BIAS added to mel_head's bias at the stop
token), so the decode never ends on its own and every request runs to max_mel_tokens = FULL_CODES codes for any
seed (both sides: upstream warns that generation stopped at max_mel_tokens and keeps all codes, as ours does). The
text is FULL_TEXT, the reference the set's 1.3 s speaker.wav. Identical outputs are asserted first (that run is
each side's warm-up); then the request is timed on each side, alternating, `--repeats` times: wall seconds (best)
and process CPU seconds (best: what other processes on a shared machine move least), with the same split as the
tiny mode. At one thread a full-size request takes minutes a side; the machine's load average is recorded.

--memory: the peak resident set of loading the full-size release, each side in its own fresh process (this script
again, `--load-child`): VmHWM after the imports and after building the model from the folder; the growth is
reported over the size of the checkpoint files (gpt.pth, s2mel.pth, the w2v-BERT, codec, CAM++ and BigVGAN files)
and ours over upstream's (the goal: at most 1.1x).

    VENV/bin/python benchmarks/indextts_vs_upstream.py --checkout PATH --memory --folder DIR [--json OUT]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import logging
import os
import random
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts" / "parity"))
sys.path.insert(0, str(REPO))
if "--load-child" not in sys.argv:
    import indextts_e2e_references as e2e  # noqa: E402  (pins the process)
else:  # a memory child: the same pins, without the writer's imports before the first reading
    import pinned  # noqa: E402

    pinned.pin_process()
    e2e = None
import indextts_release as release  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(REPO / "scripts"))
import indextts_gpu_check as gpu_check  # noqa: E402  (the released sizes, defined once)

SET = REPO / "tests" / "parity" / "data" / "indextts" / "e2e"
CASE = "speaker"  # the set's case: its text, seed and keywords
OPTIONS = {"text_normaliser": "none"}  # our normaliser is replaced by the writer's identity stand-in below


def quiet(fn):
    def run():
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn()
    return run


def timed(fn) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of fn()."""
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


class Split:
    """Wall and process CPU seconds of named stages, taken by wrapping the functions that run them (instance
    attributes, so nothing is changed for other objects). Stages of one level do not nest: a wrapped call inside
    another of the same level counts in the outer one only. `top` stages and `other` (the request minus them) sum
    to the request; `reference` stages are the reference models alone, a part of the top stages and of `other`."""

    LEVELS = {"top": ("reference", "emotion", "gpt_decode", "gpt_latent", "s2mel_cfm", "bigvgan"),
              "models": ("w2v_bert", "codec", "mel", "campplus")}

    def __init__(self):
        self.active = dict.fromkeys(self.LEVELS, False)
        self.reset()

    def reset(self) -> None:
        self.wall = {s: 0.0 for stages in self.LEVELS.values() for s in stages}
        self.cpu = dict(self.wall)
        self.calls = dict.fromkeys(self.wall, 0)

    def wrap(self, owner, attr: str, stage: str) -> None:
        level = next(name for name, stages in self.LEVELS.items() if stage in stages)
        original = getattr(owner, attr)

        def run(*args, **kwargs):
            if self.active[level]:
                return original(*args, **kwargs)
            self.active[level] = True
            start, cpu = time.perf_counter(), time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                self.wall[stage] += time.perf_counter() - start
                self.cpu[stage] += time.process_time() - cpu
                self.calls[stage] += 1
                self.active[level] = False

        object.__setattr__(owner, attr, run) if not isinstance(owner, type(sys)) else setattr(owner, attr, run)

    def wrap_made(self, owner, attr: str, methods: tuple, stage: str) -> None:
        """owner.attr makes an object whose `methods` run a stage (the GPT's decode: prefill and step)."""
        original = getattr(owner, attr)

        def make(*args, **kwargs):
            made = original(*args, **kwargs)
            for method in methods:
                self.wrap(made, method, stage)
            return made

        object.__setattr__(owner, attr, make)

    def stages(self, wall: float, cpu: float) -> dict:
        top = self.LEVELS["top"]
        out = {"wall": {s: self.wall[s] for s in top}, "cpu": {s: self.cpu[s] for s in top}}
        out["wall"]["other"] = wall - sum(out["wall"].values())
        out["cpu"]["other"] = cpu - sum(out["cpu"].values())
        for clock in ("wall", "cpu"):
            values = self.wall if clock == "wall" else self.cpu
            out[clock]["reference_models"] = {s: values[s] for s in self.LEVELS["models"]}
        return out


def split_upstream(tts) -> Split:
    """Upstream's stages on one IndexTTS2: get_emb (w2v-BERT and the normalisation), semantic_codec.quantize,
    mel_fn, campplus_model, gpt.merge_emovec, gpt.inference_speech, gpt.forward (the latent), the cfm's inference,
    bigvgan. Its reference stage is the four models (the rest of its reference block is inline code: `other`)."""
    split = Split()
    for owner, attr, stage in ((tts, "get_emb", "w2v_bert"), (tts.semantic_codec, "quantize", "codec"),
                               (tts, "mel_fn", "mel"), (tts.campplus_model, "forward", "campplus"),
                               (tts, "get_emb", "reference"), (tts.semantic_codec, "quantize", "reference"),
                               (tts, "mel_fn", "reference"), (tts.campplus_model, "forward", "reference"),
                               (tts.gpt, "merge_emovec", "emotion"),
                               (tts.gpt, "inference_speech", "gpt_decode"), (tts.gpt, "forward", "gpt_latent"),
                               (tts.s2mel.models["cfm"], "inference", "s2mel_cfm"),
                               (tts.bigvgan, "forward", "bigvgan")):
        split.wrap(owner, attr, stage)
    return split


def split_ours(engine, loaded) -> Split:
    """Our stages: voice and the emotion pass (semantic_features) as `reference`, with w2v-BERT's hidden_state, the
    codec's quantize, the mel and CAM++ inside; gpt.merge_emovec; the GPT's speaker latents, prefix, prompt, the
    decode's prefill and steps and the beam-search decode (engine.beam_sample) as `gpt_decode`; gpt.latents; the
    CFM's inference; the vocoder."""
    split = Split()
    for owner, attr, stage in ((loaded.semantic, "hidden_state", "w2v_bert"), (loaded.codec, "quantize", "codec"),
                               (loaded.mel, "mel", "mel"), (loaded.campplus, "forward", "campplus"),
                               (engine, "voice", "reference"), (engine, "semantic_features", "reference"),
                               (loaded.gpt, "speaker", "gpt_decode"), (loaded.gpt, "prefix", "gpt_decode"),
                               (loaded.gpt, "prompt", "gpt_decode"), (engine, "beam_sample", "gpt_decode"),
                               (loaded.gpt, "merge_emovec", "emotion"),
                               (loaded.gpt, "latents", "gpt_latent"),
                               (loaded.s2mel.nets.cfm, "inference", "s2mel_cfm"),
                               (loaded.vocoder, "forward", "bigvgan")):
        split.wrap(owner, attr, stage)
    split.wrap_made(loaded.gpt, "decode", ("prefill", "step"), "gpt_decode")  # prefill runs before beam_sample
    return split


class Identity:
    def normalize(self, text: str) -> str:
        return text


def read(path: Path) -> tuple[torch.Tensor, int]:
    """A WAV as the set's test reads it: (channels, samples) float32 and its rate."""
    import soundfile

    data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    return torch.from_numpy(data.T.copy()), rate


def load_upstream(infer_v2, folder: Path):
    cache = folder / "hf_cache"
    return infer_v2.IndexTTS2(cfg_path=str(folder / "config.yaml"), model_dir=str(folder), device="cpu",
                              use_qwen_emo=False,
                              aux_paths={"w2v_bert": str(cache / "w2v-bert-2.0"),
                                         "semantic_codec": str(cache / "semantic_codec_model.safetensors"),
                                         "campplus": str(cache / "campplus_cn_common.bin"),
                                         "bigvgan": str(cache / "bigvgan")})


def load_ours(folder: Path):
    from mizuoto.core.options import RuntimeOptions
    from mizuoto.engines.indextts import engine
    from mizuoto.engines.indextts.normalizer import TextNormaliser

    loaded = engine.load(folder, torch.device("cpu"), torch.float32,
                         RuntimeOptions("indextts", "auto", False, True, (), dict(OPTIONS)))
    # the writer's stand-in: TextNormalizer's own steps around identity zh and en normalisers
    loaded.text.normaliser = TextNormaliser("identity", zh=Identity(), en=Identity())
    return loaded


def compare(tts, loaded, speaker: Path, text: str, generation: dict, seed: int) -> dict:
    """Both sides once (each side's warm-up): the int16 waveforms must be equal. -> the audio's facts."""
    from mizuoto.engines.indextts import engine
    from mizuoto.engines.indextts.declaration import ENGINE
    from mizuoto.runtime.context import RequestContext

    clear(tts)
    torch.manual_seed(seed)
    random.seed(seed)
    rate, wave = quiet(lambda: upstream_infer(tts, speaker, text, generation))()
    want = torch.from_numpy(wave[:, 0].copy())
    params = {**ENGINE.speak_defaults(), **generation}
    codes, pcm = [], []
    for segment in engine.segments(loaded, text, RequestContext(seed), params, read(speaker)):
        codes.append(segment.codes.shape[1])
        pcm.append(segment.pcm)
    got = engine.join(pcm, params["interval_silence"])[0].to(torch.int16)[0]
    same = got.shape == want.shape and torch.equal(got, want)
    diff = float((got.float() - want.float()).abs().max()) if got.shape == want.shape else None
    return {"identical": same, "max_abs_diff_int16": diff, "rate": rate, "samples": int(want.numel()),
            "audio_seconds": round(want.numel() / rate, 3), "codes_per_segment": codes}


def clear(tts) -> None:
    """Upstream's reference caches, cleared: its next infer computes the speaker's and the emotion's features."""
    tts.cache_spk_cond = tts.cache_emo_cond = None
    tts.cache_spk_audio_prompt = tts.cache_emo_audio_prompt = None


def upstream_infer(tts, speaker: Path, text: str, generation: dict):
    with torch.inference_mode():
        return tts.infer(str(speaker), text, None, **generation)


def race(tts, loaded, speaker: Path, text: str, generation: dict, seed: int, repeats: int) -> dict:
    """Each side's whole request `repeats` times, alternating; best wall and CPU seconds, and the best run's split."""
    from mizuoto.engines.indextts import engine
    from mizuoto.engines.indextts.declaration import ENGINE
    from mizuoto.runtime.context import RequestContext

    params = {**ENGINE.speak_defaults(), **generation}
    reference = read(speaker)

    def upstream():
        clear(tts)
        torch.manual_seed(seed)
        random.seed(seed)
        upstream_infer(tts, speaker, text, generation)

    def mizuoto():
        engine.speak(loaded, text, RequestContext(seed), params, reference)

    splits = {"upstream": split_upstream(tts), "mizuoto": split_ours(engine, loaded)}
    runs = {"upstream": [], "mizuoto": []}
    for _ in range(repeats):
        for side, fn in (("upstream", quiet(upstream)), ("mizuoto", mizuoto)):
            splits[side].reset()
            wall, cpu = timed(fn)
            runs[side].append((wall, cpu, splits[side].stages(wall, cpu),
                               {k: v for k, v in splits[side].calls.items() if v}))
    row = {}
    for side, side_runs in runs.items():
        best = min(side_runs, key=lambda r: r[0])
        row[f"{side}_s"] = round(best[0], 4)
        row[f"{side}_cpu_s"] = round(min(r[1] for r in side_runs), 4)
        row[f"{side}_all_s"] = [round(r[0], 4) for r in side_runs]
        row[f"{side}_split_s"] = rounded(best[2]["wall"])
        row[f"{side}_split_cpu_s"] = rounded(least([r[2]["cpu"] for r in side_runs]))
        row[f"{side}_calls"] = best[3]
    return row


def least(splits: list) -> dict:
    """Each stage's least CPU seconds over the runs (what other processes move least)."""
    return {k: least([s[k] for s in splits]) if isinstance(v, dict) else min(s[k] for s in splits)
            for k, v in splits[0].items()}


def rounded(values: dict) -> dict:
    return {k: rounded(v) if isinstance(v, dict) else round(v, 4) for k, v in values.items()}


def finish(row: dict, seconds: float) -> dict:
    for side in ("upstream", "mizuoto"):
        row[f"rtf_{side}"] = round(row[f"{side}_s"] / seconds, 4)
        row[f"rtf_cpu_{side}"] = round(row[f"{side}_cpu_s"] / seconds, 4)
    row["speedup"] = round(row["upstream_s"] / row["mizuoto_s"], 3)
    row["speedup_cpu"] = round(row["upstream_cpu_s"] / row["mizuoto_cpu_s"], 3)
    ours, theirs = row["mizuoto_split_cpu_s"], row["upstream_split_cpu_s"]
    row["stage_speedup_cpu"] = {k: round(theirs[k] / ours[k], 3) for k in Split.LEVELS["top"] + ("other",)
                                if ours[k] > 0}
    row["reference_models_speedup_cpu"] = {
        k: round(theirs["reference_models"][k] / ours["reference_models"][k], 3)
        for k in Split.LEVELS["models"] if ours["reference_models"][k] > 0}
    return row


def tiny(args) -> None:
    """The tiny release of the indextts/e2e set (the default mode)."""
    torch.set_num_threads(args.threads)
    logging.disable(logging.INFO)
    infer_v2 = e2e.upstream(args.checkout.resolve())
    recorded = json.loads((SET / "references.json").read_text())
    case = recorded["cases"][CASE]
    generation = dict(recorded["generation"])
    report = {"mode": "tiny", "threads": args.threads, "repeats": args.repeats, "case": CASE, "text": case["text"],
              "seed": case["seed"], "generation": generation, "machine_load_average": list(os.getloadavg())}
    with tempfile.TemporaryDirectory() as tmp:
        folder = release.write(Path(tmp) / "IndexTTS-2", recorded["release"], SET / "bpe.model")
        tts = quiet(lambda: load_upstream(infer_v2, folder))()
        loaded = load_ours(folder)
        speaker = SET / "speaker.wav"
        facts = compare(tts, loaded, speaker, case["text"], generation, case["seed"])
        assert facts["identical"], f"ours differs from upstream's: {facts}"
        row = {**facts, **race(tts, loaded, speaker, case["text"], generation, case["seed"], args.repeats)}
        report["result"] = finish(row, facts["audio_seconds"])
    print(json.dumps(report["result"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------------------
# --full-size: the released architecture with random weights

FULL_TEXT = "HELLO WORLD, GOOD MORNING. 你好世界，早上好！"
FULL_SEED = 11
FULL_CODES = 80  # max_mel_tokens: every request decodes this many codes (the stop row is held down)
FULL_STOP_BIAS = -60.0  # added to mel_head.bias[stop_mel_token] (the recipe's own +STOP_BIAS undone first)
FULL_GENERATION = {"max_mel_tokens": FULL_CODES}
# IndexTeam/IndexTTS-2 config.yaml's sizes (version 2.0): the GPU check's table (scripts/indextts_gpu_check.py)
FULL_SIZES = gpu_check.RELEASED
# facebook/w2v-bert-2.0's config.json (transformers' Wav2Vec2BertConfig keys)
W2V_FULL = {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096,
            "conv_depthwise_kernel_size": 31, "position_embeddings_type": "relative_key", "add_adapter": False,
            "feature_projection_input_dim": 160, "left_max_position_embeddings": 64,
            "right_max_position_embeddings": 8}
CHECKPOINTS = ("gpt.pth", "s2mel.pth", "hf_cache/w2v-bert-2.0/model.safetensors",
               "hf_cache/semantic_codec_model.safetensors", "hf_cache/campplus_cn_common.bin",
               "hf_cache/bigvgan/bigvgan_generator.pt")


@contextlib.contextmanager
def released_sizes():
    """indextts_release's tiny sizes swapped for the released ones while the recipe is made."""
    saved = release.TINY_CONFIG, release.W2V_CONFIG, release.BIGVGAN_SIZES
    full = gpu_check.merged(saved[0], FULL_SIZES)
    release.TINY_CONFIG, release.W2V_CONFIG, release.BIGVGAN_SIZES = full, W2V_FULL, {}
    try:
        yield
    finally:
        release.TINY_CONFIG, release.W2V_CONFIG, release.BIGVGAN_SIZES = saved


def full_release(folder: Path, checkout: Path) -> Path:
    """The full-size release under `folder`, built once (kept when `folder` is given again): the set writer's recipe
    at the released sizes, the set's bpe.model (its 90 pieces address the first rows of the 12000-row table)."""
    target = folder / "IndexTTS-2"
    done = target / "mizuoto_full_size.json"
    if done.is_file():
        return target
    infer_v2 = e2e.upstream(checkout)
    with released_sizes():
        made = e2e.recipe(infer_v2, checkout, FULL_SIZES["gpt"]["number_text_tokens"])
    gc.collect()
    stop = made["config"]["gpt"]["stop_mel_token"]
    gpt_state = release.gpt_state

    def held_down(entries, seed, stop_token):
        values = gpt_state(entries, seed, stop_token)
        values["mel_head.bias"][stop] += FULL_STOP_BIAS - release.STOP_BIAS
        return values

    release.gpt_state = held_down
    try:
        release.write(target, made, SET / "bpe.model")
    finally:
        release.gpt_state = gpt_state
    done.write_text(json.dumps({"sizes": FULL_SIZES, "w2v_bert": W2V_FULL, "stop_bias": FULL_STOP_BIAS,
                                "bytes": checkpoint_bytes(target)}, indent=1) + "\n")
    return target


def checkpoint_bytes(folder: Path) -> dict:
    files = {name: (folder / name).stat().st_size for name in CHECKPOINTS}
    return {"files": files, "checkpoints": sum(files.values()),
            "all": sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())}


def full_size(args) -> None:
    logging.disable(logging.INFO)
    repeats = args.repeats or 1
    report = {"mode": "full-size", "threads": args.threads, "repeats": repeats, "text": FULL_TEXT,
              "seed": FULL_SEED, "generation": FULL_GENERATION, "machine_load_average": list(os.getloadavg())}
    with tempfile.TemporaryDirectory() as tmp:
        folder = full_release(Path(args.folder or tmp), args.checkout.resolve())
        infer_v2 = e2e.upstream(args.checkout.resolve())
        torch.set_num_threads(args.threads)
        start = time.perf_counter()
        tts = quiet(lambda: load_upstream(infer_v2, folder))()
        report["load_upstream_s"] = round(time.perf_counter() - start, 2)
        start = time.perf_counter()
        loaded = load_ours(folder)
        report["load_mizuoto_s"] = round(time.perf_counter() - start, 2)
        speaker = SET / "speaker.wav"
        facts = compare(tts, loaded, speaker, FULL_TEXT, FULL_GENERATION, FULL_SEED)
        print(json.dumps(facts), flush=True)
        row = {**facts, **race(tts, loaded, speaker, FULL_TEXT, FULL_GENERATION, FULL_SEED, repeats)}
        report["result"] = finish(row, facts["audio_seconds"])
        report["machine_load_average_after"] = list(os.getloadavg())
        report["bytes"] = checkpoint_bytes(folder)
    print(json.dumps(report["result"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


# ---------------------------------------------------------------------------------------------------------
# --memory: the peak resident set while loading, each side in a fresh process


def vm_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def load_child(args) -> None:
    """In a fresh process: VmHWM before and after loading the release (its imports done first), as one JSON line."""
    logging.disable(logging.INFO)
    folder = Path(args.folder) / "IndexTTS-2"
    if args.load_child == "upstream":
        sys.path.insert(0, str(REPO / "scripts" / "parity"))
        import indextts_e2e_references as writer

        infer_v2 = writer.upstream(args.checkout.resolve())

        def load():
            return load_upstream(infer_v2, folder)
    else:
        from mizuoto.engines.indextts import engine  # noqa: F401  (imported before the first reading)

        def load():
            return load_ours(folder)
    gc.collect()
    before, rss_before = vm_kib("VmHWM"), vm_kib("VmRSS")
    start = time.perf_counter()
    model = quiet(load)()
    seconds = time.perf_counter() - start
    gc.collect()
    after, rss_after = vm_kib("VmHWM"), vm_kib("VmRSS")
    print(json.dumps({"side": args.load_child, "hwm_before_kib": before, "hwm_after_kib": after,
                      "rss_before_kib": rss_before, "rss_after_kib": rss_after, "load_s": round(seconds, 2),
                      "loaded": type(model).__name__}))


def memory(args) -> None:
    report = {"mode": "memory"}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.folder or tmp)
        target = full_release(folder, args.checkout.resolve())
        sizes = checkpoint_bytes(target)
        row = {"bytes": sizes}
        for side in ("upstream", "mizuoto"):
            out = subprocess.run([sys.executable, __file__, "--checkout", str(args.checkout), "--folder", str(folder),
                                  "--load-child", side], capture_output=True, text=True, check=True)
            child = json.loads(out.stdout.strip().splitlines()[-1])
            growth = (child["hwm_after_kib"] - child["hwm_before_kib"]) * 1024
            row[side] = {**child, "growth_bytes": growth,
                         "growth_over_checkpoints": round(growth / sizes["checkpoints"], 3),
                         "growth_over_all_files": round(growth / sizes["all"], 3)}
        row["ratio_mizuoto_over_upstream"] = round(row["mizuoto"]["growth_bytes"] / row["upstream"]["growth_bytes"], 3)
        report["result"] = row
    print(json.dumps(report["result"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per side (default 3; --full-size 1)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--full-size", action="store_true", help="the released architecture, random weights")
    parser.add_argument("--memory", action="store_true", help="peak memory at load, each side in its own process")
    parser.add_argument("--folder", type=Path, help="where the full-size release is built (kept: reused later)")
    parser.add_argument("--load-child", choices=["upstream", "mizuoto"], help=argparse.SUPPRESS)
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
