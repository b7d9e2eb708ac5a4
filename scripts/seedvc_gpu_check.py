"""Seed-VC v1 offline on a GPU: real-time factor at the released architecture (random weights), CUDA graphs on and off
(bit for bit the same audio), compute.compile, both precisions, and peak memory.

    python scripts/seedvc_gpu_check.py [--json OUT.json] [--seconds 10] [--steps 10]

The model folder is written with Mizuoto's own modules at the released sizes (the preset's DiT 512 x 13 x 8 with its
WaveNet, whisper-small's encoder, BigVGAN 22 kHz 256x, CAM++ 80 -> 192), so no upstream package and no download is
needed: only torch and Mizuoto's own dependencies. The goal the issue sets: offline conversion RTF <= 0.05 on an
H200 at exact settings (float16 precision, upstream's numbers).
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

from mizuoto.host import convert, load_model  # noqa: E402
from mizuoto.nn import bigvgan, campplus, whisper_encoder  # noqa: E402
from mizuoto.nn.s2mel_cfm import S2Mel, S2MelConfig  # noqa: E402

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


def write_model(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config_dit_mel_seed_uvit_whisper_small_wavenet.yml").write_text(
        json.dumps({"preprocess_params": PREPROCESS, "model_params": RELEASED}))  # JSON is YAML
    s2mel = S2Mel(S2MelConfig.from_model_params(RELEASED))
    state = s2mel.state_dict()
    torch.save({"net": {n: {k[len(n) + 1:]: v for k, v in state.items() if k.startswith(n + ".")} for n in S2Mel.NETS}},
               folder / "DiT_seed_v2_uvit_whisper_small_wavenet_bigvgan_pruned.pth")
    whisper = folder / "whisper-small"
    whisper.mkdir()
    (whisper / "config.json").write_text(json.dumps(WHISPER_SMALL))
    encoder = whisper_encoder.AudioEncoder(whisper_encoder.dims_from_hf(WHISPER_SMALL), numerics="transformers")
    torch.save(to_transformers(encoder.state_dict()), whisper / "pytorch_model.bin")
    vocoder = folder / "bigvgan_v2_22khz_80band_256x"
    vocoder.mkdir()
    (vocoder / "config.json").write_text(json.dumps(BIGVGAN))
    torch.save({"generator": bigvgan.BigVGAN(bigvgan.BigVGANConfig.from_dict(BIGVGAN)).state_dict()},
               vocoder / "bigvgan_generator.pt")
    torch.save(campplus.CAMPPlus(campplus.SEEDVC).state_dict(), folder / "campplus_cn_common.bin")
    return folder


def speech(seconds: float, rate: int, hz: float) -> torch.Tensor:
    t = torch.arange(int(seconds * rate)) / rate
    return 0.3 * torch.sin(2 * torch.pi * hz * t * (1 + 0.05 * torch.sin(2 * torch.pi * 3 * t)))


def measure(folder: Path, device: str, precision: str, graphs: bool, compile_: bool, seconds: float, steps: int):
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
    return {"precision": precision, "cuda_graphs": graphs, "compile": compile_, "seconds": round(best, 4),
            "rtf": round(best / (out.waveform.shape[-1] / out.sample_rate), 4),
            "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3)}, out.waveform


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--steps", type=int, default=10)
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
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "source_seconds": args.seconds,
              "steps": args.steps, "rows": rows, "failures": failures}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({"failures": failures}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
