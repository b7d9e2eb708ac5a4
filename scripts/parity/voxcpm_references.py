#!/usr/bin/env python
"""Build tiny random upstream VoxCPM models (voxcpm 2.0.3: VoxCPM 1 / 1.5 architecture and VoxCPM2) in the
published folder layout and write reference waveforms for the native port's tests, with upstream's own code.

Usage, in a venv holding upstream (see scripts/parity/voxcpm_upstream_env.sh):
    python scripts/parity/voxcpm_references.py tests/parity/data/voxcpm/e2e

Writes into OUTDIR:
    v1/, v2/        config.json (architecture voxcpm / voxcpm2, float32, cpu), model.safetensors,
                    audiovae.safetensors, tokenizer.json + tokenizer_config.json + special_tokens_map.json
                    (a small Llama-style BPE: "▁" normaliser, merges that make multi-character CJK tokens)
    v2_bf16/        v2 with config.json dtype bfloat16 and bfloat16 weights, as the released models are
    *.wav, *.flac   16 kHz and 24 kHz prompt / reference recordings (int16 PCM), one 44.1 kHz stereo 24-bit FLAC
    references.safetensors   every waveform (and streaming chunk) the cases produced, float32
    references.json          the cases (model, text, prompts, seed, options, names), versions, threads, ATEN level

Every reference comes from upstream's public API: `voxcpm.VoxCPM` (the folder loaded with from_local, no
denoiser, no torch.compile) and its `generate` / `generate_streaming`, seeded with torch.manual_seed as a user
would. Harness-only instrumentation (numerics untouched): a wrapper around the model's `_inference` generator
that records how many patches each attempt produced, so a test can tell a length mismatch from a value one.
"""

import json
import os
import sys
import time

from pinned import pin_process  # noqa: E402  (beside this script)

pin_process()  # re-executes under the parity pins, then one thread and oneDNN off
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import soundfile  # noqa: E402
import torch  # noqa: E402
import voxcpm  # noqa: E402
from pinned import environment, write_references  # noqa: E402  (beside this script)
from voxcpm.model import voxcpm as upstream_v1  # noqa: E402
from voxcpm_models import CONFIGS, build_model  # noqa: E402  (beside this script)

T0 = time.time()
KINDS = ("v1", "v2", "v2_bf16")
OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/parity/data/voxcpm/e2e"
os.makedirs(OUT, exist_ok=True)
REFS, CASES = {}, []


def put(name, t):
    a = t.detach().cpu().numpy() if torch.is_tensor(t) else np.asarray(t)
    assert name not in REFS, name
    REFS[name] = np.ascontiguousarray(a.astype(np.float32) if a.dtype.kind == "f" else a.astype(np.int64))
    return name


def write_wav(name, seconds, rate, seed):
    """A voiced-looking test signal: a few harmonics with vibrato, noise and a fade, as int16 PCM."""
    rng = np.random.RandomState(seed)
    t = np.arange(int(seconds * rate)) / rate
    f0 = 140 + 30 * rng.rand() + 8 * np.sin(2 * np.pi * 5 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    x = sum(0.3 / k * np.sin(k * phase + rng.rand()) for k in range(1, 6)) + 0.02 * rng.randn(t.size)
    x *= np.minimum(1.0, np.minimum(t, t[-1] - t) / 0.01)
    if name.endswith(".flac"):  # stereo 24-bit FLAC: the second channel a little quieter and later
        stereo = np.stack([x, 0.7 * np.roll(x, 3)], axis=1) * 0.8
        soundfile.write(os.path.join(OUT, name), np.round(stereo * 8388607).astype(np.int32) * 256, rate,
                        subtype="PCM_24")
    else:
        soundfile.write(os.path.join(OUT, name), (x * 0.8 * 32767).astype(np.int16), rate, subtype="PCM_16")
    return name


def soundfile_load(path, *args, **kwargs):
    """v1's build_prompt_cache calls torchaudio.load, which needs torchcodec (not installed in the oracle venv);
    this returns what torchaudio.load returns for PCM WAV: float32 (channels, samples) scaled by 1/32768."""
    data, rate = soundfile.read(path, dtype="float32", always_2d=True)
    return torch.from_numpy(np.ascontiguousarray(data.T)), rate


upstream_v1.torchaudio.load = soundfile_load


def record_attempts(tts_model, lengths):
    """Count the patches each `_inference` attempt yields: one per patch when streaming, else the whole
    sequence once (the caller closes the generator right after, so counting happens at each yield)."""
    inner = tts_model._inference

    def wrapped(*args, **kwargs):
        lengths.append(0)
        for item in inner(*args, **kwargs):
            feats = item[1]
            lengths[-1] = lengths[-1] + 1 if kwargs.get("streaming") else int(feats.shape[0])
            yield item

    tts_model._inference = wrapped


def main():
    for kind in ("v1", "v2"):
        build_model(kind, os.path.join(OUT, kind))
    # the released models' dtype: weights saved and run in bfloat16 (the AudioVAE in float32), as upstream
    # runs a config.json that says "bfloat16"
    build_model("v2", os.path.join(OUT, "v2_bf16"), {**CONFIGS["v2"], "dtype": "bfloat16"}, dtype=torch.bfloat16)
    wavs = {
        "ref16": write_wav("ref16.wav", 0.09, 16000, 1),
        "prompt16": write_wav("prompt16.wav", 0.07, 16000, 2),
        "prompt24": write_wav("prompt24.wav", 0.075, 24000, 3),
        "ref44": write_wav("ref44.flac", 0.08, 44100, 4),  # VoxCPM2 reads it with librosa.load: mono, soxr HQ
    }
    tts = {kind: voxcpm.VoxCPM(os.path.join(OUT, kind), zipenhancer_model_path=None, enable_denoiser=False,
                               optimize=False, device="cpu") for kind in KINDS}
    lengths = {}
    for kind, pipeline in tts.items():
        lengths[kind] = []
        record_attempts(pipeline.tts_model, lengths[kind])

    def path(key):
        return os.path.join(OUT, wavs[key]) if key else None

    cases = [
        # kind, text, seed, prompt wav, prompt text, reference wav, options
        ("v2", "hello world", 0, None, None, None, {}),
        ("v2", "the quick brown fox.", 7, None, None, None, {"cfg_value": 1.5, "inference_timesteps": 6}),
        ("v2", "你好世界, 今天很好!", 3, None, None, None, {}),
        ("v2", "hi\nthere   you", 5, None, None, None, {"retry_badcase": False}),
        ("v2", "hello there", 1, None, None, "ref16", {}),
        ("v2", "the fox", 2, "prompt16", "a prompt", None, {}),
        ("v2", "good day", 4, "prompt16", "a prompt", "ref16", {"inference_timesteps": 4}),
        ("v2", "hello world", 9, None, None, None, {"streaming": True}),
        ("v2", "the fox", 8, "prompt16", "a prompt", None, {"streaming": True}),
        ("v2", "hey", 6, None, None, "ref16", {"streaming": True}),
        ("v2_bf16", "hello world", 0, None, None, None, {}),
        ("v2_bf16", "the fox", 2, "prompt16", "a prompt", "ref16", {}),
        ("v1", "hello world", 0, None, None, None, {}),
        ("v1", "你好世界 the end.", 3, None, None, None, {"cfg_value": 2.5, "inference_timesteps": 5}),
        ("v1", "the fox", 2, "prompt16", "a prompt", None, {}),
        ("v1", "hello", 4, "prompt24", "the prompt", None, {}),  # 24 kHz: torchaudio's resampler to 16 kHz
        ("v1", "hello world", 9, None, None, None, {"streaming": True}),
        ("v1", "the fox", 8, "prompt16", "a prompt", None, {"streaming": True}),
        # VoxCPM2 from recordings at other rates: upstream's librosa.load resamples them (soxr HQ) to 16 kHz
        ("v2", "the fox", 2, "prompt24", "a prompt", None, {}),
        ("v2", "hello there", 1, None, None, "ref44", {}),
        ("v2", "good day", 4, "ref44", "a prompt", "ref44", {"inference_timesteps": 4}),
    ]
    for index, (kind, text, seed, prompt, prompt_text, reference, options) in enumerate(cases):
        pipeline, options = tts[kind], dict(options)
        streaming = options.pop("streaming", False)
        kwargs = dict(text=text, prompt_wav_path=path(prompt), prompt_text=prompt_text, **options)
        if reference:
            kwargs["reference_wav_path"] = path(reference)
        before = len(lengths[kind])
        torch.manual_seed(seed)
        if streaming:
            chunks = [torch.from_numpy(c) for c in pipeline.generate_streaming(**kwargs)]
            wave = torch.cat(chunks)
        else:
            chunks, wave = None, torch.from_numpy(pipeline.generate(**kwargs))
        name = f"case{index}"
        CASES.append({
            "name": name, "kind": kind, "text": text, "seed": seed, "prompt_wav": wavs.get(prompt),
            "prompt_text": prompt_text, "reference_wav": wavs.get(reference), "streaming": streaming,
            "options": options, "attempt_patches": lengths[kind][before:],
            "chunk_lengths": [int(c.numel()) for c in chunks] if chunks else None,
            "wave": put(f"{name}/wave", wave),
        })
        print(f"{name}: {kind} {text!r} attempts {lengths[kind][before:]} samples {wave.numel()}", file=sys.stderr)
    write_references(REFS, os.path.join(OUT, "references.safetensors"))
    meta = {"cases": CASES, "sample_rates": {k: int(p.tts_model.sample_rate) for k, p in tts.items()},
            "environment": environment(["voxcpm", "transformers", "tokenizers", "librosa", "soundfile"])}
    with open(os.path.join(OUT, "references.json"), "w") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
    print(f"wrote {len(REFS)} tensors in {time.time() - T0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
