"""Qwen3-TTS speed and load memory: Mizuoto vs upstream qwen-tts 0.1.1 on the same model, in one run.

Runs in a venv holding upstream (scripts/parity/qwen3tts_upstream_env.sh) with this clone on sys.path:
    .venv-qwen3tts-upstream/bin/python benchmarks/qwen3tts_vs_upstream.py [--frames 120] [--repeats 3]
    .venv-qwen3tts-upstream/bin/python benchmarks/qwen3tts_vs_upstream.py --size full [--frames 12] [--folder DIR]

Frames per second: the same text, speaker and seed through upstream's `generate_custom_voice` and our
`host.speak` (whole requests: prompt, frames, codec decode), greedy talker and predictor (a random model
stops early when it samples; greedy runs the same forwards per frame without draws). The waveforms must
be identical before anything is timed; then the best of `--repeats` runs of each, taken in turn (12.5
frames make a second).

--size tiny (default): the tiny CustomVoice model the parity tests use (tests/parity/data/qwen3tts).
Per frame, upstream runs transformers' generate() step of the talker and, inside it, a nested generate()
of the code predictor: per-frame overhead is what this measures.

--size full: the Qwen3-TTS-12Hz-0.6B-CustomVoice architecture with random weights, built with upstream's
own classes and saved in the published layout (config.json, model.safetensors, generation_config.json,
speech_tokenizer/ with the released 12 Hz codec: Mimi encoder and decoder). The sizes are those of the
published config.json (talker 1024 wide, 28 layers, 16 query / 8 key-value heads of 128, MLP 3072, codec
vocabulary 3072, text vocabulary 151936 x 2048; code predictor 1024 wide, 5 layers, 16 / 8 x 128, MLP
3072, 15 codebooks of 2048; codec decoder 8 layers of 512 with 16 heads of 64, SEANet 1536 with rates
8, 5, 4, 3), as mirrored by third-party ports of the checkpoint (see FULL_TALKER). The text tokenizer is
the tiny test one (its ids are valid rows of the full text vocabulary): text tokenization is not timed.
Two folders are written: float32, and the published dtypes (bfloat16 model, float32 codec). Each is
timed with both sides loading it in its model's dtype (float32; bfloat16, which upstream and we also
apply to the codec, as `dtype=` does upstream), identical waves asserted. Per folder, a fresh process per
side (ours: mizuoto.host.load_model; upstream: Qwen3TTSModel.from_pretrained) reports its peak RSS after
loading, after reading every weight once (a memory-mapped checkpoint's pages count once read) and after
a 2-frame request, against the size of the safetensors files. The EOS row of the codec head is zeroed so
that greedy decoding runs to the frame limit.

On a shared machine, time at --threads 1: with two intra-op threads, a busy core stalls every parallel
kernel on its barrier and timings swing severalfold.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts" / "parity"))

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from qwen3tts_released import RELEASED_DECODER  # noqa: E402  (scripts/parity)

TINY = REPO / "tests" / "parity" / "data" / "qwen3tts" / "custom_voice"
# The parity suite's greedy case: random tiny weights stop early when sampled, greedy runs to the limit.
TEXT = "Hi, 你好 in the hall."
SPEAKER, LANGUAGE = "Vivian", "German"
GREEDY = {"do_sample": False, "subtalker_dosample": False}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

# --------------------------------------------------------------------------------------------------
# The 0.6B CustomVoice architecture (Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice config.json). Sources: the
# config.json copies in third-party ports (a Rust port's config test with the full talker_config and
# code_predictor_config; ivan-digital/qwen3-asr-swift docs/tts-model.md; the speaker and language ids
# as mlx-audio's Qwen3-TTS config lists them), agreeing with ../shared/ENGINES.md §2 and with upstream's
# own code-predictor defaults; the published checkpoint is 1.83 GB of bfloat16, which these sizes give.

SPEAKER_IDS = {"vivian": 3065, "serena": 3066, "uncle_fu": 3010, "dylan": 2878, "eric": 2875, "ryan": 3061,
               "aiden": 2861, "ono_anna": 2873, "sohee": 2864}
DIALECTS = {"dylan": "beijing_dialect", "eric": "sichuan_dialect"}
LANGUAGE_IDS = {"chinese": 2055, "english": 2050, "german": 2053, "italian": 2070, "portuguese": 2071,
                "spanish": 2054, "japanese": 2058, "korean": 2064, "french": 2061, "russian": 2069,
                "beijing_dialect": 2074, "sichuan_dialect": 2062}
FULL_PREDICTOR = dict(vocab_size=2048, hidden_size=1024, intermediate_size=3072, num_hidden_layers=5,
                      num_attention_heads=16, num_key_value_heads=8, head_dim=128, num_code_groups=16,
                      rope_theta=1000000, max_position_embeddings=65536, rms_norm_eps=1e-6, hidden_act="silu")
FULL_TALKER = dict(vocab_size=3072, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                   num_attention_heads=16, num_key_value_heads=8, head_dim=128, text_vocab_size=151936,
                   text_hidden_size=2048, num_code_groups=16, rope_theta=1000000, max_position_embeddings=32768,
                   rms_norm_eps=1e-6, hidden_act="silu", position_id_per_seconds=13,
                   rope_scaling={"rope_type": "default", "mrope_section": [24, 20, 20], "interleaved": True},
                   codec_pad_id=2148, codec_bos_id=2149, codec_eos_token_id=2150, codec_think_id=2154,
                   codec_nothink_id=2155, codec_think_bos_id=2156, codec_think_eos_id=2157,
                   spk_id=SPEAKER_IDS, spk_is_dialect={k: DIALECTS.get(k, False) for k in SPEAKER_IDS},
                   codec_language_id=LANGUAGE_IDS, code_predictor_config=FULL_PREDICTOR)
FULL_TOP = dict(tokenizer_type="qwen3_tts_tokenizer_12hz", tts_model_size="0b6", tts_model_type="custom_voice",
                im_start_token_id=151644, im_end_token_id=151645, tts_pad_token_id=151671, tts_bos_token_id=151672,
                tts_eos_token_id=151673, assistant_token_id=77091, architectures=["Qwen3TTSForConditionalGeneration"])
# Qwen/Qwen3-TTS-Tokenizer-12Hz: the decoder_config as published (also scripts/parity/qwen3tts_codec_live.py);
# the encoder is transformers' MimiConfig with its defaults at 12.5 frames per second.
FULL_DECODER = RELEASED_DECODER
FULL_ENCODER = {"_frame_rate": 12.5}
GENERATION_CONFIG = {"do_sample": True, "repetition_penalty": 1.05, "temperature": 0.9, "top_p": 1.0, "top_k": 50,
                     "subtalker_dosample": True, "subtalker_temperature": 0.9, "subtalker_top_p": 1.0,
                     "subtalker_top_k": 50, "max_new_tokens": 8192}
PREPROCESSOR = {"feature_extractor_type": "EncodecFeatureExtractor", "feature_size": 1, "sampling_rate": 24000,
                "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True,
                "chunk_length_s": None, "overlap": None}
TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json", "tokenizer.json", "special_tokens_map.json",
                   "added_tokens.json")


def build_full(root: Path, seed: int = 0) -> dict[str, Path]:
    """Write {"float32": folder, "published": folder} under `root` (skipped when already there)."""
    folders = {"float32": root / "float32", "published": root / "published"}
    if all((f / "speech_tokenizer" / "model.safetensors").is_file() for f in folders.values()):
        return folders
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Config
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Model

    torch.manual_seed(seed)
    start = time.perf_counter()
    model = Qwen3TTSForConditionalGeneration(Qwen3TTSConfig(talker_config=FULL_TALKER, **FULL_TOP)).eval()
    with torch.no_grad():
        model.talker.codec_head.weight[FULL_TALKER["codec_eos_token_id"]] = 0  # greedy never stops early
    codec = Qwen3TTSTokenizerV2Model(Qwen3TTSTokenizerV2Config(
        encoder_config=FULL_ENCODER, decoder_config=FULL_DECODER, encoder_valid_num_quantizers=16,
        input_sample_rate=24000, output_sample_rate=24000, decode_upsample_rate=1920, encode_downsample_rate=1920,
        architectures=["Qwen3TTSTokenizerV2Model"])).eval()
    print(f"built {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M + codec "
          f"{sum(p.numel() for p in codec.parameters()) / 1e6:.1f} M parameters in "
          f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    for name, folder in folders.items():
        shutil.rmtree(folder, ignore_errors=True)
        (folder / "speech_tokenizer").mkdir(parents=True)
        model.to(torch.float32 if name == "float32" else torch.bfloat16).save_pretrained(folder)
        config = json.loads((folder / "config.json").read_text())
        config.get("speaker_encoder_config", {}).pop("model_type", None)  # as the published configs hold it
        (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
        (folder / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))
        for file in TOKENIZER_FILES:
            shutil.copy(TINY / file, folder / file)
        codec.save_pretrained(folder / "speech_tokenizer")  # float32, as published
        (folder / "speech_tokenizer" / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR))
    return folders


def checkpoint_bytes(folder: Path) -> dict:
    model = (folder / "model.safetensors").stat().st_size
    codec = (folder / "speech_tokenizer" / "model.safetensors").stat().st_size
    return {"model": model, "speech_tokenizer": codec, "total": model + codec}


# --------------------------------------------------------------------------------------------------
# The two sides


def upstream(folder: Path, frames: int, seed: int, dtype=torch.float32):
    from qwen_tts import Qwen3TTSModel

    with contextlib.redirect_stdout(io.StringIO()):
        model = Qwen3TTSModel.from_pretrained(str(folder), dtype=dtype)
    return upstream_run(model, frames, seed)


def upstream_run(model, frames: int, seed: int):
    def run():
        torch.manual_seed(seed)
        with contextlib.redirect_stdout(io.StringIO()):
            waves, rate = model.generate_custom_voice(text=TEXT, speaker=SPEAKER, language=LANGUAGE,
                                                      max_new_tokens=frames + 1, **GREEDY)
        return torch.from_numpy(np.asarray(waves[0], dtype=np.float32))

    return run


def ours(folder: Path, frames: int, seed: int, dtype: str = "float32"):
    from mizuoto.host import load_model

    return ours_run(load_model("qwen3tts", folder, device="cpu", dtype=dtype), frames, seed)


def ours_run(loaded, frames: int, seed: int):
    from mizuoto.host import speak

    def run():
        params = {"speaker": SPEAKER, "language": LANGUAGE, "max_new_tokens": frames + 1, **GREEDY}
        return speak(loaded, TEXT, seed=seed, params=params).waveform[0]

    return run


def timed(functions, repeats: int):
    """The best time and the last output of each function, run in turn (so that a load change on a
    shared machine hits both sides alike)."""
    best, out = [None] * len(functions), [None] * len(functions)
    for _ in range(repeats):
        for i, fn in enumerate(functions):
            start = time.perf_counter()
            out[i] = fn()
            elapsed = time.perf_counter() - start
            best[i] = elapsed if best[i] is None else min(best[i], elapsed)
    return best, out


def compare_speed(folder: Path, frames: int, repeats: int, samples_per_frame: int, seed: int = 9,
                  dtype: str = "float32") -> dict:
    theirs_fn = upstream(folder, frames, seed, DTYPES[dtype])
    ours_fn = ours(folder, frames, seed, dtype)
    wave_theirs, wave_ours = theirs_fn(), ours_fn()  # warm-up: lazy tables, allocator
    identical = bool(torch.equal(wave_ours, wave_theirs))
    if not identical:
        raise SystemExit(f"the waveforms differ ({tuple(wave_ours.shape)} vs {tuple(wave_theirs.shape)}); "
                         f"nothing timed")
    (t_theirs, t_ours), (wave_theirs, wave_ours) = timed((theirs_fn, ours_fn), repeats)
    drawn = wave_theirs.shape[-1] / samples_per_frame
    seconds = drawn / 12.5  # what the frames last at the released codec's 1920 samples per frame
    return {
        "threads": torch.get_num_threads(), "frames": round(drawn, 1),
        "identical": identical and bool(torch.equal(wave_ours, wave_theirs)),
        "frames_per_second": {"upstream": round(drawn / t_theirs, 2), "mizuoto": round(drawn / t_ours, 2)},
        "real_time_factor": {"upstream": round(t_theirs / seconds, 4), "mizuoto": round(t_ours / seconds, 4)},
        "speedup": round(t_theirs / t_ours, 2),
    }


# --------------------------------------------------------------------------------------------------
# Load memory: a fresh process that imports, notes its RSS, loads, and reports its peak RSS (file
# pages of a memory-mapped checkpoint count once they are read)


def _status(field: str) -> int:
    """A size from /proc/self/status, in bytes: VmRSS (now) or VmHWM (the peak). Not getrusage's
    ru_maxrss, which Linux carries over execve: a child started by a large parent would report the
    parent's size."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def load_only(side: str, folder: Path, dtype: str) -> None:
    """In this fresh process: import, load, then read every weight once, then speak 2 frames; the peak
    RSS after each stage."""
    if side == "upstream":
        from qwen_tts import Qwen3TTSModel

        before = _status("VmRSS")
        with contextlib.redirect_stdout(io.StringIO()):
            model = Qwen3TTSModel.from_pretrained(str(folder), dtype=DTYPES[dtype])
        modules = [model.model]  # the speech tokenizer's model is not a submodule: add it
        modules.append(model.model.speech_tokenizer.model)
        run = upstream_run(model, 2, 9)
    else:
        from mizuoto.host import load_model

        before = _status("VmRSS")
        model = load_model("qwen3tts", folder, device="cpu", dtype=dtype)
        modules = [model.state.handle.modules]
        run = ours_run(model, 2, 9)
    loaded = _status("VmHWM")
    with torch.no_grad():
        for module in modules:
            for tensor in (*module.parameters(), *module.buffers()):
                tensor.sum()
    resident = _status("VmHWM")
    run()
    print(json.dumps({"side": side, "before_load": before, "load": loaded, "resident": resident,
                      "request": _status("VmHWM")}))


def measure_load(side: str, folder: Path, dtype: str) -> dict:
    command = [sys.executable, __file__, "--load-only", side, "--folder", str(folder), "--dtype", dtype]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"loading with {side} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare_load(folder: Path, dtype: str) -> dict:
    size = checkpoint_bytes(folder)
    out = {"checkpoint_gb": {k: round(v / 1e9, 3) for k, v in size.items()}}
    for side in ("upstream", "mizuoto"):
        r = measure_load(side, folder, dtype)
        out[side] = {"rss_before_load_gb": round(r["before_load"] / 1e9, 3),
                     **{f"peak_rss_{stage}_gb": round(r[stage] / 1e9, 3) for stage in STAGES},
                     **{f"peak_{stage}_over_checkpoint": round(r[stage] / size["total"], 3) for stage in STAGES}}
    return out


STAGES = ("load", "resident", "request")  # after loading; after every weight was read once; after 2 frames


# --------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=("tiny", "full"), default="tiny")
    parser.add_argument("--frames", type=int, default=None, help="frames to draw (default 120 tiny, 12 full)")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs, the best kept (default 3 tiny, 2 full)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--folder", type=Path, default=None,
                        help="full: where the models are written (kept; default: a temporary folder, removed)")
    parser.add_argument("--skip", choices=("speed", "load"), action="append", default=[],
                        help="full: leave out a measurement")
    parser.add_argument("--load-only", choices=("upstream", "mizuoto"), help=argparse.SUPPRESS)
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="float32", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    if opts.load_only:
        return load_only(opts.load_only, opts.folder, opts.dtype)
    if opts.size == "tiny":
        config = json.loads((TINY / "speech_tokenizer" / "config.json").read_text())
        result = compare_speed(TINY, opts.frames or 120, opts.repeats or 3, config["decode_upsample_rate"])
        print(json.dumps({"model": "tiny CustomVoice (tests/parity/data/qwen3tts/custom_voice)", **result}, indent=2))
        return None
    temporary = None
    if opts.folder is None:
        temporary = opts.folder = Path(tempfile.mkdtemp(prefix="qwen3tts_full_"))
    try:
        folders = build_full(opts.folder)
        result = {"model": "Qwen3-TTS-12Hz-0.6B-CustomVoice architecture, random weights"}
        if "load" not in opts.skip:
            result["load_float32"] = compare_load(folders["float32"], "float32")
            result["load_published_bfloat16"] = compare_load(folders["published"], "bfloat16")
            print(json.dumps(result, indent=2), file=sys.stderr, flush=True)
        if "speed" not in opts.skip:
            result["speed_float32"] = compare_speed(folders["float32"], opts.frames or 12, opts.repeats or 2, 1920)
            print(json.dumps(result, indent=2), file=sys.stderr, flush=True)
            result["speed_published_bfloat16"] = compare_speed(folders["published"], opts.frames or 12,
                                                               opts.repeats or 2, 1920, dtype="bfloat16")
        print(json.dumps(result, indent=2))
    finally:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
    return None


if __name__ == "__main__":
    main()
