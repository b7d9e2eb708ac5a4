"""Seed-VC v1 on a GPU at the released architectures (random weights): the offline model's real-time factor, CUDA
graphs on and off (bit for bit the same audio), compute.compile, both precisions, and peak memory; the singing
model's (44.1 kHz, RMVPE F0) in float16 with graphs off and on; and the real-time
model's live blocks (the real-time app's algorithm at seed-vc's README settings: 0.18 s blocks, 10 steps, guidance
0.7): milliseconds per block, graphs on and off (the same blocks). For v2: the tiny v2 model of the parity set
(tests/parity/data/seedvc_v2/model) converts timbre and style with graphs on and off (the same audio: the CFM's
graphs and the AR's step segments), and the AR style converter at its released sizes (768 x 12, 12 heads over 2
key/value heads, random weights) decodes `--ar-tokens` tokens: tokens per second, graphs on and off (the same
tokens), float16 and float32.

    python scripts/seedvc_gpu_check.py [--json OUT.json] [--seconds 10] [--steps 10] [--live-seconds 6]

The model folder is written with Mizuoto's own modules at the released sizes (the preset's DiT 512 x 13 x 8 with its
WaveNet, whisper-small's encoder, BigVGAN 22 kHz 256x, CAM++ 80 -> 192), so no upstream package and no download is
needed: only torch and Mizuoto's own dependencies. The real-time model likewise (the preset's DiT 384 x 9 x 6, XLS-R
300m's encoder cut to 12 layers, HiFT at CosyVoice-300M's sizes, CAM++). The goals the issue sets, on an H200 at
exact settings (float16 precision, upstream's numbers): offline conversion RTF <= 0.05, and a live block of 0.18 s
in <= 100 ms (upstream: 150 ms per block on an RTX 3060 Laptop).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mizuoto.engines.seedvc import ar as style_ar  # noqa: E402
from mizuoto.engines.seedvc.loaded_v2 import RELEASED as RELEASED_V2  # noqa: E402
from mizuoto.host import convert, convert_stream, load_model  # noqa: E402
from mizuoto.nn import bigvgan, campplus, hift, wav2vec2, whisper_encoder  # noqa: E402
from mizuoto.nn.s2mel_cfm import S2Mel, S2MelConfig  # noqa: E402
from mizuoto.runtime.graphs import Graphs  # noqa: E402

# config_dit_mel_seed_uvit_whisper_small_wavenet.yml's model_params (Plachta/Seed-VC), as released
RELEASED = {
    "dit_type": "DiT",
    "speech_tokenizer": {"type": "whisper", "name": "openai/whisper-small"},
    "style_encoder": {"dim": 192, "campplus_path": "campplus_cn_common.bin"},
    "vocoder": {"type": "bigvgan", "name": "nvidia/bigvgan_v2_22khz_80band_256x"},
    "length_regulator": {"channels": 512, "is_discrete": False, "in_channels": 768, "content_codebook_size": 2048,
                         "sampling_ratios": [1, 1, 1, 1], "vector_quantize": False, "n_codebooks": 1,
                         "quantizer_dropout": 0.0, "f0_condition": False, "n_f0_bins": 512},
    "DiT": {"hidden_dim": 512, "num_heads": 8, "depth": 13, "class_dropout_prob": 0.1, "block_size": 8192,
            "in_channels": 80, "style_condition": True, "final_layer_type": "wavenet", "target": "mel",
            "content_dim": 512, "content_codebook_size": 1024, "content_type": "discrete", "f0_condition": False,
            "n_f0_bins": 512, "content_codebooks": 1, "is_causal": False, "long_skip_connection": True,
            "zero_prompt_speech_token": False, "time_as_token": False, "style_as_token": False,
            "uvit_skip_connection": True, "add_resblock_in_transformer": False},
    "wavenet": {"hidden_dim": 512, "num_layers": 8, "kernel_size": 5, "dilation_rate": 1, "p_dropout": 0.2,
                "style_condition": True},
}
PREPROCESS = {"sr": 22050, "spect_params": {"n_fft": 1024, "win_length": 1024, "hop_length": 256, "n_mels": 80,
                                            "fmin": 0, "fmax": "None"}}
# nvidia/bigvgan_v2_22khz_80band_256x's config.json (the fields the generator reads)
BIGVGAN = {"num_mels": 80, "upsample_rates": [4, 4, 2, 2, 2, 2], "upsample_kernel_sizes": [8, 8, 4, 4, 4, 4],
           "upsample_initial_channel": 1536, "resblock": "1", "resblock_kernel_sizes": [3, 7, 11],
           "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]], "activation": "snakebeta",
           "snake_logscale": True, "use_tanh_at_final": False, "use_bias_at_final": False, "sampling_rate": 22050,
           "hop_size": 256}
WHISPER_SMALL = {"num_mel_bins": 80, "max_source_positions": 1500, "d_model": 768, "encoder_attention_heads": 12,
                 "encoder_layers": 12, "vocab_size": 51865, "max_target_positions": 448,
                 "decoder_attention_heads": 12, "decoder_layers": 12}


def to_transformers(state: dict) -> dict:
    """Our encoder's names -> a WhisperModel's (the inverse of whisper_encoder.hf_to_openai for the encoder)."""
    parts = {ours: theirs for theirs, ours in whisper_encoder._LAYER_PARTS.items()}
    out = {}
    for name, tensor in state.items():
        if name.startswith("blocks."):
            _, index, rest = name.split(".", 2)
            part, kind = rest.rsplit(".", 1)
            out[f"encoder.layers.{index}.{parts[part]}.{kind}"] = tensor
        elif name == "positional_embedding":
            out["encoder.embed_positions.weight"] = tensor
        else:
            part, kind = name.rsplit(".", 1)
            out[f"encoder.{'layer_norm' if part == 'ln_post' else part}.{kind}"] = tensor
    return out


# config_dit_mel_seed_uvit_whisper_base_f0_44k.yml's model_params and preprocess_params (the singing model), as
# released: the offline preset with a 768 x 17 x 12 DiT, its mlp tail, F0 in 256 bins, 128 mels at 44.1 kHz
SINGING = {**RELEASED,
           "vocoder": {"type": "bigvgan", "name": "nvidia/bigvgan_v2_44khz_128band_512x"},
           "length_regulator": {**RELEASED["length_regulator"], "channels": 768, "f0_condition": True,
                                "n_f0_bins": 256},
           "DiT": {**RELEASED["DiT"], "hidden_dim": 768, "num_heads": 12, "depth": 17, "in_channels": 128,
                   "final_layer_type": "mlp", "content_dim": 768, "f0_condition": True, "n_f0_bins": 256,
                   "long_skip_connection": False},
           "wavenet": {**RELEASED["wavenet"], "hidden_dim": 768}}
SINGING_PREPROCESS = {"sr": 44100, "spect_params": {"n_fft": 2048, "win_length": 2048, "hop_length": 512,
                                                    "n_mels": 128, "fmin": 0, "fmax": "None"}}
# nvidia/bigvgan_v2_44khz_128band_512x's config.json (the fields the generator reads)
BIGVGAN_44K = {**BIGVGAN, "num_mels": 128, "upsample_rates": [8, 4, 2, 2, 2, 2],
               "upsample_kernel_sizes": [16, 8, 4, 4, 4, 4], "sampling_rate": 44100, "hop_size": 512}


def save_s2mel(params: dict, path: Path) -> None:
    state = S2Mel(S2MelConfig.from_model_params(params)).state_dict()
    torch.save({"net": {n: {k[len(n) + 1:]: v for k, v in state.items() if k.startswith(n + ".")} for n in S2Mel.NETS}},
               path)


def write_model(folder: Path, singing: bool = False) -> Path:
    """The offline model's folder, or with `singing` the singing model's (its DiT pair, the 44 kHz BigVGAN and
    rmvpe.pt at E2E(4, 1, (2, 2))) beside the same Whisper and CAM++."""
    from mizuoto.nn import rmvpe

    folder.mkdir(parents=True)
    params, preprocess = (SINGING, SINGING_PREPROCESS) if singing else (RELEASED, PREPROCESS)
    stem = "seed_uvit_whisper_base_f0_44k" if singing else "seed_uvit_whisper_small_wavenet"
    (folder / f"config_dit_mel_{stem}.yml").write_text(
        json.dumps({"preprocess_params": preprocess, "model_params": params}))  # JSON is YAML
    save_s2mel(params, folder / ("DiT_seed_v2_uvit_whisper_base_f0_44k_bigvgan_pruned_ft_ema.pth" if singing
                                 else "DiT_seed_v2_uvit_whisper_small_wavenet_bigvgan_pruned.pth"))
    if singing:
        torch.save(rmvpe.RMVPE(rmvpe.RMVPEConfig()).model.state_dict(), folder / "rmvpe.pt")
    whisper = folder / "whisper-small"
    whisper.mkdir()
    (whisper / "config.json").write_text(json.dumps(WHISPER_SMALL))
    encoder = whisper_encoder.AudioEncoder(whisper_encoder.dims_from_hf(WHISPER_SMALL), numerics="transformers")
    torch.save(to_transformers(encoder.state_dict()), whisper / "pytorch_model.bin")
    config = BIGVGAN_44K if singing else BIGVGAN
    vocoder = folder / params["vocoder"]["name"].split("/")[1]
    vocoder.mkdir()
    (vocoder / "config.json").write_text(json.dumps(config))
    torch.save({"generator": bigvgan.BigVGAN(bigvgan.BigVGANConfig.from_dict(config)).state_dict()},
               vocoder / "bigvgan_generator.pt")
    torch.save(campplus.CAMPPlus(campplus.SEEDVC).state_dict(), folder / "campplus_cn_common.bin")
    return folder


# config_dit_mel_seed_uvit_xlsr_tiny.yml's model_params (Plachta/Seed-VC), as released
REALTIME = {
    "dit_type": "DiT", "vocoder": {"type": "hifigan"},
    "speech_tokenizer": {"type": "xlsr", "output_layer": 12, "name": "facebook/wav2vec2-xls-r-300m"},
    "style_encoder": {"dim": 192, "campplus_path": "campplus_cn_common.bin"},
    "length_regulator": {"channels": 384, "is_discrete": False, "in_channels": 1024, "content_codebook_size": 1024,
                         "sampling_ratios": [1, 1, 1, 1], "vector_quantize": False, "n_codebooks": 2,
                         "quantizer_dropout": 0.0, "f0_condition": False, "n_f0_bins": 512},
    "DiT": {"hidden_dim": 384, "num_heads": 6, "depth": 9, "class_dropout_prob": 0.1, "block_size": 8192,
            "in_channels": 80, "style_condition": True, "final_layer_type": "mlp", "target": "mel", "content_dim": 384,
            "content_codebook_size": 1024, "content_type": "discrete", "f0_condition": False, "n_f0_bins": 512,
            "content_codebooks": 1, "is_causal": False, "long_skip_connection": False,
            "zero_prompt_speech_token": False, "time_as_token": True, "style_as_token": True,
            "uvit_skip_connection": True, "add_resblock_in_transformer": False},
}
REALTIME_PREPROCESS = {"sr": 22050, "spect_params": {"n_fft": 1024, "win_length": 1024, "hop_length": 256,
                                                     "n_mels": 80, "fmin": 0, "fmax": 8000}}
# facebook/wav2vec2-xls-r-300m's config.json (the encoder's fields) and preprocessor_config.json
XLSR_300M = {"model_type": "wav2vec2", "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
             "intermediate_size": 4096, "hidden_act": "gelu", "layer_norm_eps": 1e-5, "feat_extract_norm": "layer",
             "feat_extract_activation": "gelu", "conv_dim": [512] * 7, "conv_stride": [5, 2, 2, 2, 2, 2, 2],
             "conv_kernel": [10, 3, 3, 3, 3, 2, 2], "conv_bias": True, "num_conv_pos_embeddings": 128,
             "num_conv_pos_embedding_groups": 16, "do_stable_layer_norm": True}
XLSR_PREPROCESSOR = {"feature_size": 1, "sampling_rate": 16000, "padding_value": 0.0, "do_normalize": True,
                     "return_attention_mask": True, "feature_extractor_type": "Wav2Vec2FeatureExtractor"}


def write_realtime_model(folder: Path) -> Path:
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    (folder / "config_dit_mel_seed_uvit_xlsr_tiny.yml").write_text(
        json.dumps({"preprocess_params": REALTIME_PREPROCESS, "model_params": REALTIME}))
    save_s2mel(REALTIME, folder / "DiT_uvit_tat_xlsr_ema.pth")
    xlsr = folder / "wav2vec2-xls-r-300m"
    xlsr.mkdir()
    (xlsr / "config.json").write_text(json.dumps(XLSR_300M))
    (xlsr / "preprocessor_config.json").write_text(json.dumps(XLSR_PREPROCESSOR))
    encoder = wav2vec2.Wav2Vec2(wav2vec2.Wav2Vec2Config.from_dict(XLSR_300M))
    save_file({k: v.contiguous() for k, v in encoder.state_dict().items()}, str(xlsr / "model.safetensors"))
    vocoder = folder / "CosyVoice-300M"
    vocoder.mkdir()
    torch.save(hift.HiFTGenerator(hift.HiFTConfig()).state_dict(), vocoder / "hift.pt")
    torch.save(campplus.CAMPPlus(campplus.SEEDVC).state_dict(), folder / "campplus_cn_common.bin")
    return folder


def measure_live(folder: Path, precision: str, graphs: bool, compile_: bool, seconds: float):
    """The live stream at its defaults over `seconds` of source fed as 10 ms chunks (a sound card's callbacks): the
    blocks' wall milliseconds after the first two (captures, allocations), and the blocks."""
    overrides = {"engines.seedvc.load_options.precision": precision, "compute.cuda_graphs": graphs,
                 "compute.compile": compile_}
    loaded = load_model("seedvc", str(folder), device="cuda", overrides=overrides)
    source, reference = speech(seconds, 22050, 170.0), (speech(3.0, 22050, 240.0), 22050)
    chunks = ((source[i:i + 220], 22050) for i in range(0, source.shape[-1], 220))
    stream = convert_stream(loaded, chunks, reference, seed=1, live={})
    blocks, walls = [], []
    for piece in stream:
        blocks.append(piece.waveform)
        walls.append(piece.report["wall_seconds"] * 1000)
    steady = sorted(walls[2:])
    return {"precision": precision, "cuda_graphs": graphs, "compile": compile_, "blocks": len(blocks),
            "block_seconds": round(blocks[0].shape[-1] / 22050, 4),
            "ms_per_block_median": round(steady[len(steady) // 2], 2), "ms_per_block_max": round(steady[-1], 2),
            "first_block_ms": round(walls[0], 2)}, torch.cat(blocks, dim=-1)


TINY_V2 = Path(__file__).resolve().parents[1] / "tests" / "parity" / "data" / "seedvc_v2" / "model"


def check_v2_tiny(precision: str) -> list[str]:
    """The tiny v2 model on CUDA, timbre and style, graphs off and on: the same audio, or what differed."""
    failures = []
    source, reference = (speech(4.0, 22050, 180.0), 22050), (speech(3.0, 22050, 260.0), 22050)
    for params in ({"diffusion_steps": 4}, {"diffusion_steps": 4, "convert_style": True},
                   {"diffusion_steps": 3, "convert_style": True, "anonymization_only": True, "top_p": 0.7}):
        waves = []
        for graphs in (False, True):
            loaded = load_model("seedvc", str(TINY_V2), device="cuda",
                                overrides={"engines.seedvc.load_options.precision": precision,
                                           "compute.cuda_graphs": graphs})
            waves.append(convert(loaded, source, reference, seed=5, params=params).waveform)
        if not torch.equal(waves[0], waves[1]):
            failures.append(f"v2 tiny {precision} {params}: CUDA graphs changed the audio")
        print(json.dumps({"v2_tiny": precision, "params": params, "samples": waves[0].shape[-1],
                          "graphs_equal": torch.equal(waves[0], waves[1])}), flush=True)
    return failures


def measure_v2_ar(precision: str, graphs: bool, tokens: int, device: str = "cuda"):
    """The released-size AR decoding `tokens` tokens (EOS held off by the step limit) after a 600-token condition
    and a 500-token prompt: tokens per second (the best of 3 after a warm-up), and the tokens."""
    model = style_ar.StyleAR(style_ar.ARConfig.from_section(RELEASED_V2["ar"]))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.02)
    model = model.to(device).eval()
    float16 = precision == "float16"
    g = torch.Generator(device).manual_seed(0)
    cond = torch.randn(1, 600, model.config.dim, device=device, generator=g)
    prompt = torch.randint(0, model.config.eos, (1, 500), device=device, generator=g)
    graph_set = Graphs(device) if graphs else None
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    limit, style_ar.MAX_STEPS = style_ar.MAX_STEPS, tokens - 1
    try:
        best, out = float("inf"), None
        for attempt in range(4):  # the first warms up (captures, allocations)
            sync()
            start = time.perf_counter()
            with torch.inference_mode(), torch.autocast(device, dtype=torch.float16, enabled=float16):
                out = model.generate(cond, prompt, style_ar.Sampling(), torch.Generator(device).manual_seed(1),
                                     torch.float16 if float16 else torch.float32, graph_set)
            sync()
            if attempt:
                best = min(best, time.perf_counter() - start)
    finally:
        style_ar.MAX_STEPS = limit
    return {"v2_ar": precision, "cuda_graphs": graphs, "tokens": out.shape[-1],
            "tokens_per_second": round(out.shape[-1] / best, 1)}, out


def speech(seconds: float, rate: int, hz: float) -> torch.Tensor:
    t = torch.arange(int(seconds * rate)) / rate
    return 0.3 * torch.sin(2 * torch.pi * hz * t * (1 + 0.05 * torch.sin(2 * torch.pi * 3 * t)))


def measure(folder: Path, device: str, precision: str, graphs: bool, compile_: bool, seconds: float, steps: int,
            model: str = "offline"):
    overrides = {"engines.seedvc.load_options.precision": precision, "compute.cuda_graphs": graphs,
                 "compute.compile": compile_}
    loaded = load_model("seedvc", str(folder), device=device, overrides=overrides)
    source, reference = (speech(seconds, 22050, 180.0), 22050), (speech(3.0, 22050, 260.0), 22050)
    params = {"diffusion_steps": steps}
    convert(loaded, source, reference, seed=1, params=params)  # warm-up: captures, compiles, allocations
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    best, out = float("inf"), None
    for _ in range(3):
        start = time.perf_counter()
        out = convert(loaded, source, reference, seed=1, params=params)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return {"model": model, "precision": precision, "cuda_graphs": graphs, "compile": compile_,
            "seconds": round(best, 4),
            "rtf": round(best / (out.waveform.shape[-1] / out.sample_rate), 4),
            "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3)}, out.waveform


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--live-seconds", type=float, default=6.0)
    parser.add_argument("--ar-tokens", type=int, default=500)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure")
        return 0
    torch.manual_seed(0)
    rows, failures = [], []
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_model(Path(tmp) / "model")
        waves = {}
        for precision in ("float16", "float32"):
            for graphs, compile_ in ((False, False), (True, False), (True, True)):
                row, wave = measure(folder, "cuda", precision, graphs, compile_, args.seconds, args.steps)
                rows.append(row)
                print(json.dumps(row), flush=True)
                waves[(precision, graphs, compile_)] = wave
            if not torch.equal(waves[(precision, False, False)], waves[(precision, True, False)]):
                failures.append(f"{precision}: CUDA graphs changed the audio")
        singing = write_model(Path(tmp) / "singing", singing=True)
        sung = {}
        for graphs in (False, True):
            row, sung[graphs] = measure(singing, "cuda", "float16", graphs, False, args.seconds, args.steps, "singing")
            rows.append(row)
            print(json.dumps(row), flush=True)
        if not torch.equal(sung[False], sung[True]):
            failures.append("singing float16: CUDA graphs changed the audio")
        live_rows = []
        realtime = write_realtime_model(Path(tmp) / "realtime")
        for precision in ("float16", "float32"):
            live_waves = {}
            for graphs in (False, True):
                row, wave = measure_live(realtime, precision, graphs, False, args.live_seconds)
                live_rows.append(row)
                print(json.dumps(row), flush=True)
                live_waves[graphs] = wave
            if not torch.equal(live_waves[False], live_waves[True]):
                failures.append(f"live {precision}: CUDA graphs changed the blocks")
    v2_rows = []
    for precision in ("float16", "float32"):
        failures += check_v2_tiny(precision)
        decoded = {}
        for graphs in (False, True):
            row, decoded[graphs] = measure_v2_ar(precision, graphs, args.ar_tokens)
            v2_rows.append(row)
            print(json.dumps(row), flush=True)
        if not torch.equal(decoded[False], decoded[True]):
            failures.append(f"v2 AR {precision}: CUDA graphs changed the tokens")
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "source_seconds": args.seconds,
              "steps": args.steps, "rows": rows, "live_rows": live_rows, "v2_rows": v2_rows, "failures": failures}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({"failures": failures}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
