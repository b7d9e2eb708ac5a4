"""IndexTTS 2 on a GPU at the released architecture (random weights): the real-time factor of a whole request
(`speak`), the GPT's mel codes per second, the s2mel CFM solve's seconds (25 steps, CFG 0.7), BigVGAN's, and the
peak memory, with CUDA graphs off and on (bit for bit the same codes and audio, the same seed) and with
compute.compile on, in float32, bfloat16 and float16.

    python scripts/indextts_gpu_check.py [--json OUT.json] [--repeats 3] [--codes 500] [--folder DIR]
    python scripts/indextts_gpu_check.py --device cpu --tiny --threads 1 --repeats 1    # the smoke test (~30 s)

The issue's GPU goal: IndexTTS 2.5 RTF <= 0.10 on the lent H200 at exact settings (attention `auto`, no
compute.fast, compile off, CUDA graphs on); upstream's numbers: IndexTTS 2.5 0.2065 in bfloat16 on an RTX 4090, and
the official TensorRT path for 2.0 0.137. IndexTTS 2.5 is not implemented yet: this script measures 2.0 (the same
GPT, s2mel and BigVGAN sizes; 2.5 changes the codec and the GPT's rate), and the report's `goal` says, per
precision, whether 2.0 with graphs on (compile off) is under the bar the goal sets for 2.5.

The release folder is written with Mizuoto's own modules only (no upstream package, no download): IndexTeam/
IndexTTS-2's config.yaml (version 2.0) at its released sizes (RELEASED: the GPT 1280 x 24 layers x 20 heads with its
Conformer conditioning 512 / 2048 / 8 heads / 6 blocks and the emotion one 512 / 1024 / 4 / 4, the semantic codec
8192 x 8 with vocos 384 / 2048 / 12, the s2mel DiT 512 x 13 x 8 heads with its WaveNet 512 / 8 / kernel 5 and the
length regulator 512 over 1024), w2v-BERT 2.0 at its full 24 layers x 1024 (W2V_BERT), CAM++ (80 -> 192), BigVGAN v2
22 kHz 80 bands 256x (BIGVGAN), the emotion and speaker matrices of emo_num [3, 17, 2, 8, 4, 5, 10, 24] rows, and
the indextts/e2e parity set's bpe.model (its 90 pieces address the first rows of the 12000-row text table). Every
parameter is drawn by scripts/parity/cosyvoice_weights.state (nothing left at an init), the built buffers (the
timestep frequencies, BigVGAN's filters, CAM++'s statistics) are the modules' own. The GPT's stop row is held down
(STOP_BIAS added to mel_head's bias at the stop token), so every request decodes exactly `--codes` mel codes
(max_mel_tokens; 500 codes are 10 s of audio) for any weights and precision; the text is TEXT, the reference a 3 s
synthetic voice.

Per precision the model is loaded once per setting (graphs off; graphs on; graphs and compile on): a warm-up
`speak` (captures, compiles), then `--repeats` timed ones: the best wall seconds, the real-time factor (wall / audio
seconds), the GPT's codes per second (its prompt, prefill and decode steps, timed with a device wait at each
stage's ends), the CFM solve's and BigVGAN's seconds, and torch.cuda.max_memory_allocated over the load and over
the requests. Graphs on must equal graphs off (codes and audio); compile's distance is reported. A failure in
float32 (the engine's exact default) fails the check (exit 1); a lower precision the engine cannot run is listed
under `unsupported`, reported once and its other settings skipped.

`--device cpu` runs the same code without graphs (they are a no-op there) and without compile unless --compile;
with --tiny (the e2e parity set's tiny sizes: indextts_release.TINY_CONFIG, TINY_CODES codes) it checks the script
itself. Its numbers mean nothing (`goal_applies` is false off CUDA or with --tiny).
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts" / "parity"))

import indextts_release as release  # noqa: E402  (scripts/parity: the tiny config, pure torch and yaml)
from cosyvoice_weights import state as drawn  # noqa: E402  (scripts/parity: seeded parameter values)

from mizuoto.host import load_model, speak  # noqa: E402

TEXT = "HELLO WORLD, GOOD MORNING. THE SOUND OF A VOICE, 你好世界，早上好！"
SEED = 11
PRECISIONS = ("float32", "bfloat16", "float16")
SETTINGS = ((False, False), (True, False), (True, True))  # (cuda_graphs, compile)
GOAL_RTF = 0.10  # IndexTTS 2.5 on the lent H200 (2.0 is what runs here)
CODES, TINY_CODES = 500, 50  # max_mel_tokens (the declaration's least is 50)
STOP_BIAS = -60.0  # added to mel_head.bias[stop_mel_token]: the decode never ends before max_mel_tokens
BPE = REPO / "tests" / "parity" / "data" / "indextts" / "e2e" / "bpe.model"
OVERRIDES = {"engines.indextts.load_options.text_normaliser": "none",
             "engines.indextts.load_options.emotion_model": False}
SEEDS = {"gpt": 4100, "w2v_bert": 4300, "codec": 4500, "s2mel": 4700, "campplus": 4900, "bigvgan": 5100,
         "tables": 5300}

# IndexTeam/IndexTTS-2 config.yaml's sizes (version 2.0), over the tiny config's flags and file names (the same)
RELEASED = {
    "gpt": {"model_dim": 1280, "max_mel_tokens": 1815, "max_text_tokens": 600, "heads": 20, "layers": 24,
            "number_text_tokens": 12000, "number_mel_codes": 8194, "start_mel_token": 8192, "stop_mel_token": 8193,
            "condition_module": {"output_size": 512, "linear_units": 2048, "attention_heads": 8, "num_blocks": 6,
                                 "input_layer": "conv2d2", "perceiver_mult": 2},
            "emo_condition_module": {"output_size": 512, "linear_units": 1024, "attention_heads": 4, "num_blocks": 4,
                                     "input_layer": "conv2d2", "perceiver_mult": 2}},
    "semantic_codec": {"codebook_size": 8192, "hidden_size": 1024, "codebook_dim": 8, "vocos_dim": 384,
                       "vocos_intermediate_dim": 2048, "vocos_num_layers": 12},
    "s2mel": {"length_regulator": {"channels": 512}, "DiT": {"hidden_dim": 512, "num_heads": 8, "depth": 13,
                                                            "content_dim": 512},
              "wavenet": {"hidden_dim": 512, "num_layers": 8, "kernel_size": 5}},
}
# facebook/w2v-bert-2.0's config.json (transformers' Wav2Vec2BertConfig keys)
W2V_BERT = {"model_type": "wav2vec2-bert", "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
            "intermediate_size": 4096, "conv_depthwise_kernel_size": 31, "position_embeddings_type": "relative_key",
            "add_adapter": False, "feature_projection_input_dim": 160, "left_max_position_embeddings": 64,
            "right_max_position_embeddings": 8, "hidden_act": "swish", "layer_norm_eps": 1e-5,
            "mask_time_prob": 0.05}
# nvidia/bigvgan_v2_22khz_80band_256x's config.json (the fields the generator reads)
BIGVGAN = {"num_mels": 80, "upsample_rates": [4, 4, 2, 2, 2, 2], "upsample_kernel_sizes": [8, 8, 4, 4, 4, 4],
           "upsample_initial_channel": 1536, "resblock": "1", "resblock_kernel_sizes": [3, 7, 11],
           "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "activation": "snakebeta",
           "snake_logscale": True, "use_tanh_at_final": False, "use_bias_at_final": False, "sampling_rate": 22050,
           "hop_size": 256, "n_fft": 1024, "win_size": 1024, "fmin": 0, "fmax": None}


def merged(base: dict, sizes: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in sizes.items():
        out[key] = merged(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


def release_config(tiny: bool) -> dict:
    """config.yaml: the tiny config of the e2e set, or it with the released sizes."""
    config = release.tiny_config(90)
    return config if tiny else merged(config, RELEASED)


def filled(module: torch.nn.Module, seed: int) -> dict:
    """`module`'s state dict with every parameter drawn (cosyvoice_weights.state), its buffers as built."""
    values = module.state_dict()
    params = [[k, list(v.shape)] for k, v in module.named_parameters()]
    values.update(drawn(params, seed))
    return values


def meta_params(cls, *args) -> list:
    """[name, shape] of a module's parameters, built on the meta device (no memory, no init)."""
    with torch.device("meta"):
        module = cls(*args)
    return [[k, list(v.shape)] for k, v in module.named_parameters()]


def write_release(folder: Path, tiny: bool = False) -> Path:
    """The release folder in IndexTeam/IndexTTS-2's layout (as indextts_release.py writes the tiny one) from our
    modules: gpt.pth in upstream's names (GPT-2's Conv1D weights transposed back), s2mel.pth {"net": ...}, the
    statistics and matrices, and hf_cache/ with w2v-BERT, the codec, CAM++ and BigVGAN."""
    import yaml
    from safetensors.torch import save_file

    from mizuoto.engines.indextts import s2mel
    from mizuoto.engines.indextts.gpt import CONV1D, GptConfig, UnifiedVoice
    from mizuoto.nn import bigvgan, campplus, maskgct_codec, w2v_bert

    folder.mkdir(parents=True, exist_ok=True)
    cache = folder / "hf_cache"
    for sub in ("w2v-bert-2.0", "bigvgan"):
        (cache / sub).mkdir(parents=True, exist_ok=True)
    config = release_config(tiny)
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    (folder / "bpe.model").write_bytes(BPE.read_bytes())
    gpt_config = GptConfig.from_dict(config["gpt"])
    gpt = drawn(meta_params(UnifiedVoice, gpt_config), SEEDS["gpt"])  # the position tables: the loader builds them
    gpt["mel_head.bias"][config["gpt"]["stop_mel_token"]] += STOP_BIAS
    torch.save({k: v.t().contiguous() if CONV1D.fullmatch(k) else v for k, v in gpt.items()}, folder / "gpt.pth")
    del gpt
    back = s2mel.S2Mel(s2mel.S2MelConfig.from_section(config["s2mel"]))
    values = filled(back, SEEDS["s2mel"])
    nets = {name: {k[len(prefix):]: v for k, v in values.items() if k.startswith(prefix)}
            for name, prefix in (("cfm", "nets.cfm."), ("length_regulator", "nets.length_regulator."),
                                 ("gpt_layer", "gpt_layer."))}
    torch.save({"net": nets}, folder / "s2mel.pth")
    g = torch.Generator().manual_seed(SEEDS["tables"])
    torch.save({"mean": torch.randn(1024, generator=g) * 0.1, "var": torch.rand(1024, generator=g) + 0.5},
               folder / "wav2vec2bert_stats.pt")
    rows = sum(config["emo_num"])
    torch.save(torch.randn(rows, 192, generator=g), folder / "feat1.pt")
    torch.save(torch.randn(rows, config["gpt"]["model_dim"], generator=g) * 0.3, folder / "feat2.pt")
    codec = maskgct_codec.SemanticCodec(maskgct_codec.CodecConfig.from_section(config["semantic_codec"]))
    save_file({k: v.contiguous() for k, v in filled(codec, SEEDS["codec"]).items()},
              str(cache / "semantic_codec_model.safetensors"))
    w2v = dict(W2V_BERT, **(dict(release.W2V_CONFIG) if tiny else {}))
    (cache / "w2v-bert-2.0" / "config.json").write_text(json.dumps(w2v, indent=1))
    (cache / "w2v-bert-2.0" / "preprocessor_config.json").write_text(json.dumps(release.W2V_PREPROCESSOR, indent=1))
    layout = w2v_bert.checkpoint_layout(w2v_bert.W2vBertConfig.from_dict(w2v))
    save_file({k: v.contiguous() for k, v in drawn([[k, list(s)] for k, s in layout.items()],
                                                   SEEDS["w2v_bert"]).items()},
              str(cache / "w2v-bert-2.0" / "model.safetensors"), metadata={"format": "pt"})
    torch.save(filled(campplus.CAMPPlus(campplus.SEEDVC), SEEDS["campplus"]), cache / "campplus_cn_common.bin")
    vocoder = dict(BIGVGAN, **(release.BIGVGAN_SIZES if tiny else {}))
    assert math.prod(vocoder["upsample_rates"]) == vocoder["hop_size"]
    (cache / "bigvgan" / "config.json").write_text(json.dumps(vocoder, indent=1))
    generator = bigvgan.BigVGAN(bigvgan.BigVGANConfig.from_dict(vocoder))
    torch.save({"generator": filled(generator, SEEDS["bigvgan"])}, cache / "bigvgan" / "bigvgan_generator.pt")
    (folder / "mizuoto_random_release.json").write_text(json.dumps(
        {"tiny": tiny, "stop_bias": STOP_BIAS, "w2v_bert": w2v, "bigvgan": vocoder, "seeds": SEEDS}, indent=1))
    return folder


def checkpoint_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def speech(seconds: float, rate: int = 24000, seed: int = 5) -> torch.Tensor:
    """A synthetic voice: a gliding harmonic tone with syllable-like gaps and a little noise."""
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(int(seconds * rate)) / rate
    pitch = 150 + 30 * torch.sin(2 * torch.pi * 0.7 * t)
    phase = 2 * torch.pi * torch.cumsum(pitch / rate, dim=0)
    wave = sum(torch.sin(k * phase) / k for k in range(1, 6))
    envelope = (torch.sin(2 * torch.pi * 3 * t) > -0.3).float()
    return (0.25 * wave * envelope + 0.01 * torch.randn(t.shape, generator=g)).float()


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def peak_bytes(device: str) -> int | None:
    return torch.cuda.max_memory_allocated() if device == "cuda" else None


def reset_peak(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


class Stages:
    """The seconds of the GPT (speaker latents, prompt, prefill and decode steps), the CFM solve and BigVGAN in
    each request, with a device wait at each stage's ends, and the codes each segment's decode returned. The engine
    module's beam_sample is wrapped once (RECORDER); each loaded model's methods as it comes."""

    def __init__(self, device: str):
        self.device = device
        self.active = False
        self.reset()

    def reset(self) -> None:
        self.seconds = {"gpt": 0.0, "s2mel_cfm": 0.0, "bigvgan": 0.0}
        self.codes: list[torch.Tensor] = []

    def timed(self, original, stage: str, keep=None):
        def run(*args, **kwargs):
            if self.active:
                return original(*args, **kwargs)
            self.active = True
            sync(self.device)
            start = time.perf_counter()
            try:
                out = original(*args, **kwargs)
                sync(self.device)
            finally:
                self.seconds[stage] += time.perf_counter() - start
                self.active = False
            if keep is not None:
                keep(out)
            return out
        return run

    def attach(self, state) -> None:
        gpt = state.gpt
        for attr in ("speaker", "prefix", "prompt"):
            object.__setattr__(gpt, attr, self.timed(getattr(gpt, attr), "gpt"))
        make = gpt.decode

        def decode(*args, **kwargs):
            made = make(*args, **kwargs)
            for attr in ("prefill", "step"):
                object.__setattr__(made, attr, self.timed(getattr(made, attr), "gpt"))
            return made

        object.__setattr__(gpt, "decode", decode)
        cfm = state.s2mel.nets.cfm
        object.__setattr__(cfm, "inference", self.timed(cfm.inference, "s2mel_cfm"))
        object.__setattr__(state.vocoder, "forward", self.timed(state.vocoder.forward, "bigvgan"))

    def wrap_engine(self) -> None:
        from mizuoto.engines.indextts import engine

        def keep(codes):
            self.codes.append(codes.detach().cpu())

        engine.beam_sample = self.timed(engine.beam_sample, "gpt", keep)


def measure(folder: Path, device: str, precision: str, graphs: bool, compile_: bool, repeats: int, text: str,
            reference, codes: int, stages: Stages) -> tuple[dict, dict]:
    reset_peak(device)
    start = time.perf_counter()
    loaded = load_model("indextts", str(folder), device=device, dtype=precision,
                        overrides={**OVERRIDES, "compute.cuda_graphs": graphs, "compute.compile": compile_})
    sync(device)
    load_s, load_peak = time.perf_counter() - start, peak_bytes(device)
    stages.attach(loaded.state)
    params = {"max_mel_tokens": codes}
    speak(loaded, text, seed=SEED, params=params, reference=reference)  # warm-up: captures, compiles
    reset_peak(device)
    best, out, kept = float("inf"), None, None
    for _ in range(repeats):
        stages.reset()
        sync(device)
        start = time.perf_counter()
        out = speak(loaded, text, seed=SEED, params=params, reference=reference)
        sync(device)
        wall = time.perf_counter() - start
        if wall < best:
            best, kept = wall, (dict(stages.seconds), [c.clone() for c in stages.codes])
    seconds = out.waveform.shape[-1] / out.sample_rate
    stage_s, segment_codes = kept
    stop = loaded.state.config.stop_mel_token
    counted = sum(int((c[0] != stop).sum()) for c in segment_codes)
    row = {"precision": precision, "cuda_graphs": graphs, "compile": compile_, "graphs_used": loaded.info.graphs,
           "load_s": round(load_s, 2), "audio_seconds": round(seconds, 3), "segments": len(segment_codes),
           "codes": counted, "speak_s": round(best, 4), "rtf": round(best / seconds, 4),
           "stages_s": {k: round(v, 4) for k, v in stage_s.items()},
           "gpt_codes_per_s": round(counted / stage_s["gpt"], 1) if stage_s["gpt"] else None,
           "peak_load_gib": None if load_peak is None else round(load_peak / 2**30, 3),
           "peak_request_gib": None if peak_bytes(device) is None else round(peak_bytes(device) / 2**30, 3),
           "report_rtf": out.report.get("real_time_factor")}
    del loaded
    return row, {"wave": out.waveform, "codes": segment_codes}


def compare(a: dict, b: dict) -> dict:
    same_length = a["wave"].shape == b["wave"].shape
    codes_equal = len(a["codes"]) == len(b["codes"]) and all(
        torch.equal(x, y) for x, y in zip(a["codes"], b["codes"], strict=True))
    return {"codes_equal": codes_equal, "audio_equal": same_length and torch.equal(a["wave"], b["wave"]),
            "audio_max_diff": float((a["wave"] - b["wave"]).abs().max()) if same_length else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="the e2e parity set's tiny sizes (a smoke test)")
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--codes", type=int, help=f"mel codes per request (default {CODES}; --tiny {TINY_CODES})")
    parser.add_argument("--compile", action="store_true", help="on the CPU too (always on a GPU)")
    parser.add_argument("--folder", type=Path, help="where the release folder is written (reused when there)")
    parser.add_argument("--text", help=f"what to speak (default {TEXT!r})")
    parser.add_argument("--threads", type=int, help="torch's CPU threads (default: as torch starts)")
    args = parser.parse_args()
    device = args.device
    text = args.text or TEXT
    codes = args.codes or (TINY_CODES if args.tiny else CODES)
    if args.threads:
        torch.set_num_threads(args.threads)
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing to measure (the smoke test: --device cpu --tiny)")
        return 0
    settings = [s for s in SETTINGS if not s[1] or device == "cuda" or args.compile]
    rows, comparisons, failures, unsupported = [], [], [], []
    stages = Stages(device)
    stages.wrap_engine()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.folder or tmp) / ("IndexTTS-2_tiny" if args.tiny else "IndexTTS-2")
        if not (folder / "mizuoto_random_release.json").is_file():
            start = time.perf_counter()
            write_release(folder, tiny=args.tiny)
            print(json.dumps({"wrote": str(folder), "seconds": round(time.perf_counter() - start, 1),
                              "bytes": checkpoint_bytes(folder)}), flush=True)
        reference = (speech(3.0), 24000)
        for precision in args.precisions:
            outputs = {}
            for graphs, compile_ in settings:
                if outputs == {} and (graphs, compile_) != settings[0]:  # the precision failed: said once
                    continue
                try:
                    row, outputs[(graphs, compile_)] = measure(folder, device, precision, graphs, compile_,
                                                               args.repeats, text, reference, codes, stages)
                except Exception as error:  # said, and the rest goes on
                    row = {"precision": precision, "cuda_graphs": graphs, "compile": compile_,
                           "error": f"{type(error).__name__}: {error}"[:400]}
                    where = f"{precision} graphs={graphs} compile={compile_}: {row['error']}"
                    # float32 is the engine's exact default: its failure fails the check; a lower precision the
                    # engine cannot run yet is reported as unsupported
                    (failures if precision == "float32" else unsupported).append(where)
                rows.append(row)
                print(json.dumps(row), flush=True)
            if (False, False) in outputs and (True, False) in outputs:
                same = compare(outputs[(False, False)], outputs[(True, False)])
                comparisons.append({"precision": precision, "graphs_on_vs_off": same})
                if not (same["codes_equal"] and same["audio_equal"]):
                    failures.append(f"{precision}: CUDA graphs changed the output ({same})")
            if (True, False) in outputs and (True, True) in outputs:
                comparisons.append({"precision": precision,
                                    "compile_vs_eager": compare(outputs[(True, False)], outputs[(True, True)])})
            print(json.dumps([c for c in comparisons if c["precision"] == precision]), flush=True)
            del outputs
            gc.collect()
            if device == "cuda":
                torch.cuda.empty_cache()
    goal = {row["precision"]: {"rtf": row["rtf"], "met": row["rtf"] <= GOAL_RTF} for row in rows
            if row.get("cuda_graphs") and not row.get("compile") and "rtf" in row}
    report = {"device": torch.cuda.get_device_name() if device == "cuda" else device, "torch": torch.__version__,
              "tiny": args.tiny, "text": text, "seed": SEED, "codes": codes, "repeats": args.repeats,
              "threads": torch.get_num_threads(),
              "release": {"version": "2.0", "sizes": "tiny" if args.tiny else RELEASED, "w2v_bert": W2V_BERT,
                          "bigvgan": BIGVGAN},
              "goal_2.5_rtf_0.10_measured_on_2.0": goal, "goal_applies": device == "cuda" and not args.tiny,
              "rows": rows, "comparisons": comparisons, "unsupported": unsupported, "failures": failures}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({"goal": goal, "unsupported": unsupported, "failures": failures}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
