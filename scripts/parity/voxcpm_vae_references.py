#!/usr/bin/env python
"""Build tiny random upstream VoxCPM AudioVAEs (voxcpm 2.0.3, v1 and v2) and write reference outputs for
tests/engines/test_voxcpm_audio_vae.py, with upstream's own code.

Usage, in a venv holding upstream (see scripts/parity/voxcpm_upstream_env.sh):
    python scripts/parity/voxcpm_vae_references.py \
        tests/parity/data/voxcpm/vae

Writes into OUTDIR, one folder per model, each as a VoxCPM model folder holds its VAE:
    <model>/config.json            {"architecture": "voxcpm" | "voxcpm2", "audio_vae_config": {...}}
    <model>/audiovae.safetensors   the state dict in the checkpoint layout (weight_g / weight_v), or
    <model>/audiovae.pth           {"state_dict": ...}, as the released VoxCPM2 ships it ("v2" only)
    references.safetensors         inputs and upstream's outputs (C-contiguous float32)
    references.json                cases (model, call, arguments, tensor names), versions, threads, ATEN level

Models (tiny widths; rates chosen to exercise what differs between configurations):
    v1_16k     v1, depthwise, rates [2, 5] / [5, 2] (an odd stride: v1 pads it one zero more than v2)
    v1_44k     v1, not depthwise, rates [3, 7] / [7, 3], 44.1 kHz (VoxCPM 1.5's kind: odd strides only)
    v2         v2, depthwise, 16 kHz in, 48 kHz out (3x the hop), scale_bias conditioning on the default
               boundaries; decoded at the default rate and at 24 kHz
    v2_plain   ENGINES.md's tiny v2: encoder 8 [2, 2], latent 16, decoder 32 [2, 2, 2], no conditioning
    v2_add     "add" conditioning on two boundaries, the default rate equal to one (bucketize's edge)
    v2_concat  "concat" conditioning with its out layer, and the noise block (global RNG, seeded per call)

Every parameter is re-randomised (each from its own generator, in name order): upstream starts weight_g at
|weight_v| (the fold would be the identity), Snake alphas at 1 and the scale/bias embeddings at 1 / 0.
Every upstream call runs twice and must give the same bits (its snake is torch.jit-scripted: the
profiling executor optimises from the second call on). Calls run under torch.inference_mode, as upstream's
generate does. Streamed chunks are fed as the non-contiguous views generation yields.
"""

import json
import math
import os
import sys
import time

from pinned import pin_process  # noqa: E402  (beside this script)

pin_process()  # re-executes under the parity pins, then one thread and oneDNN off

import warnings  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from pinned import environment, write_references  # noqa: E402  (beside this script)
from safetensors.torch import save_file  # noqa: E402
from voxcpm.modules.audiovae import AudioVAE, AudioVAEConfig, AudioVAEConfigV2, AudioVAEV2  # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning)  # torch.nn.utils.weight_norm's deprecation

T0 = time.time()
OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/parity/data/voxcpm/vae"
os.makedirs(OUT, exist_ok=True)

MODELS = {
    "v1_16k": ("voxcpm", dict(encoder_dim=4, encoder_rates=[2, 5], latent_dim=8, decoder_dim=16, decoder_rates=[5, 2],
                              depthwise=True, sample_rate=16000)),
    "v1_44k": ("voxcpm", dict(encoder_dim=4, encoder_rates=[3, 7], latent_dim=8, decoder_dim=16, decoder_rates=[7, 3],
                              depthwise=False, sample_rate=44100)),
    "v2": ("voxcpm2", dict(encoder_dim=4, encoder_rates=[2, 3], latent_dim=8, decoder_dim=16, decoder_rates=[3, 3, 2],
                           sample_rate=16000, out_sample_rate=48000)),
    "v2_plain": ("voxcpm2", dict(encoder_dim=8, encoder_rates=[2, 2], latent_dim=16, decoder_dim=32,
                                 decoder_rates=[2, 2, 2], sr_bin_boundaries=None)),
    "v2_add": ("voxcpm2", dict(encoder_dim=4, encoder_rates=[2, 3], latent_dim=8, decoder_dim=16,
                               decoder_rates=[3, 2, 2], depthwise=False, sample_rate=16000, out_sample_rate=44100,
                               sr_bin_boundaries=[24000, 44100], cond_type="add")),
    "v2_concat": ("voxcpm2", dict(encoder_dim=4, encoder_rates=[3], latent_dim=8, decoder_dim=16, decoder_rates=[3, 2],
                                  depthwise=False, sample_rate=16000, out_sample_rate=32000, cond_type="concat",
                                  cond_dim=4, cond_out_layer=True, use_noise_block=True)),
}
PTH_MODELS = ("v2",)  # saved as audiovae.pth {"state_dict": ...}; the others as audiovae.safetensors

REFS = {}
CASES = []


def put(name, t):
    assert name not in REFS, name
    REFS[name] = np.ascontiguousarray(t.detach().cpu().contiguous().numpy())
    return name


RESIDUAL_GAIN = 0.2
OUTPUT_GAIN = 0.3  # the decoder's last conv: most samples well inside tanh's range


def randomise(model, seed):
    with torch.no_grad():
        for index, (name, p) in enumerate(sorted(model.named_parameters())):
            g = torch.Generator().manual_seed(seed * 1000 + index)
            u = torch.rand(p.shape, generator=g) * 2 - 1
            if name.endswith("alpha"):
                p.copy_(1.0 + 0.8 * u)
            elif name.endswith("weight_g"):
                p.copy_(1.0 + 0.5 * u)
                if name.endswith("block.3.weight_g"):  # a residual unit's last conv: keep the sums from growing
                    p.mul_(RESIDUAL_GAIN)
            elif name.endswith("scale_embed.weight"):
                p.copy_(1.0 + 0.3 * u)
            elif name.endswith(("bias_embed.weight", "cond_embed.weight")):
                p.copy_(0.3 * u)
            elif name.endswith("bias"):
                p.copy_(0.1 * u)
            else:  # weight_v: any scale (the fold normalises it), uniform in +-1
                p.copy_(u)


def build(name, seed):
    arch, cfg = MODELS[name]
    if arch == "voxcpm":
        model = AudioVAE(AudioVAEConfig(**cfg))
    else:
        model = AudioVAEV2(AudioVAEConfigV2(**cfg))
    randomise(model, seed)
    with torch.no_grad():
        model.decoder.model[-2].weight_g.mul_(OUTPUT_GAIN)  # [..., Snake, last conv, Tanh]
    return model.eval()


def twice(fn):
    """upstream's output, computed twice: the scripted snake must not change between calls."""
    with torch.inference_mode():
        a, b = fn(), fn()
    if isinstance(a, list):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    else:
        assert torch.equal(a, b)
    return a


def audio(batch, length, seed):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(length, dtype=torch.float32)
    tone = torch.sin(2 * math.pi * t[None] * (0.01 + 0.02 * torch.rand(batch, 1, generator=g)))
    return (0.4 * tone + 0.2 * (torch.rand(batch, length, generator=g) * 2 - 1)).float()


def latents(batch, dim, frames, seed):
    return torch.randn(batch, dim, frames, generator=torch.Generator().manual_seed(seed))


def save_folder(name, model):
    folder = os.path.join(OUT, name)
    os.makedirs(folder, exist_ok=True)
    arch, cfg = MODELS[name]
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"architecture": arch, "audio_vae_config": cfg}, f, indent=1)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if name in PTH_MODELS:
        torch.save({"state_dict": state}, os.path.join(folder, "audiovae.pth"))
    else:
        save_file(state, os.path.join(folder, "audiovae.safetensors"))
    return len(state)


def record(name, seed):
    """Save the model's folder and its reference cases; its tensor and parameter counts."""
    model = build(name, seed)
    count = save_folder(name, model)
    arch, cfg = MODELS[name]
    hop = math.prod(cfg["encoder_rates"])
    latent_dim = cfg["latent_dim"]
    sr = cfg.get("sample_rate", 16000)

    # encode: lengths below, at and past the hop, padded or not; one batch of 2
    for i, (batch, length) in enumerate([(1, 1), (1, hop), (2, 3 * hop + 1), (1, 40 * hop - 1)]):
        x = audio(batch, length, seed * 100 + i)
        out = twice(lambda x=x: model.encode(x, sr))
        CASES.append({"model": name, "call": "encode", "sample_rate": sr,
                      "input": put(f"{name}/encode_{i}/audio", x), "output": put(f"{name}/encode_{i}/latents", out)})

    # decode: one frame, a few, a batch; v2 at its default rate and, conditioned, at another
    rates = [None]
    if arch == "voxcpm2" and cfg.get("sr_bin_boundaries", [1]) is not None:
        rates.append(24000 if name == "v2" else 16000)
    noise = cfg.get("use_noise_block", False)
    # (upstream's "concat" conditioning cannot take a batch: its embedding keeps batch 1)
    single = cfg.get("cond_type") == "concat"
    for i, (batch, frames) in enumerate([(1, 1), (1, 5), (1 if single else 2, 13)]):
        z = latents(batch, latent_dim, frames, seed * 100 + 50 + i)
        for rate in rates:
            noise_seed = seed * 100 + 70 + i if noise else None

            def call(z=z, rate=rate, noise_seed=noise_seed):
                if noise_seed is not None:
                    torch.manual_seed(noise_seed)
                if rate is None:
                    return model.decode(z)
                return model.decode(z, torch.tensor([rate], dtype=torch.int32))

            out = twice(call)
            tag = f"decode_{i}" + (f"_sr{rate}" if rate else "")
            CASES.append({"model": name, "call": "decode", "sample_rate": rate, "noise_seed": noise_seed,
                          "input": put(f"{name}/{tag}/latents", z), "output": put(f"{name}/{tag}/audio", out)})

    # streaming (v2): the chunks a generation would yield, one patch at a time
    if arch == "voxcpm2":
        for i, (batch, sizes) in enumerate([(1, [4, 4, 1, 3, 4]), (1 if single else 2, [2, 5, 2])]):
            # generation's chunk is rearrange(b t p d -> b d (t p)): a (B, D, P) view of a (B, P, D) tensor
            chunks = [latents(batch, n, latent_dim, seed * 100 + 80 + 10 * i + k).transpose(1, 2)
                      for k, n in enumerate(sizes)]
            noise_seed = seed * 100 + 90 + i if noise else None

            def run(chunks=chunks, noise_seed=noise_seed):
                if noise_seed is not None:
                    torch.manual_seed(noise_seed)
                with model.streaming_decode() as dec:
                    return [dec.decode_chunk(c) for c in chunks]

            outs = twice(run)
            whole = twice(lambda chunks=chunks: model.decode(torch.cat(chunks, dim=-1))) if not noise else None
            case = {"model": name, "call": "stream", "noise_seed": noise_seed,
                    "inputs": [put(f"{name}/stream_{i}/latents_{k}", c) for k, c in enumerate(chunks)],
                    "outputs": [put(f"{name}/stream_{i}/audio_{k}", o) for k, o in enumerate(outs)]}
            if whole is not None:  # not a reference for ours: how far streaming is from one decode
                streamed = torch.cat(outs, dim=-1)
                case["stream_vs_decode_max_abs"] = (streamed - whole).abs().max().item()
            CASES.append(case)
    return {"tensors": count, "parameters": sum(p.numel() for p in model.parameters())}


summary = {name: record(name, seed) for seed, name in enumerate(MODELS, start=1)}
write_references(REFS, os.path.join(OUT, "references.safetensors"))
info = {"models": {name: {"architecture": MODELS[name][0], "audio_vae_config": MODELS[name][1],
                          "file": "audiovae.pth" if name in PTH_MODELS else "audiovae.safetensors", **summary[name]}
                   for name in MODELS},
        "cases": CASES, "environment": environment(["voxcpm", "torch", "numpy", "safetensors"])}
with open(os.path.join(OUT, "references.json"), "w") as f:
    json.dump(info, f, indent=1)
peaks = {c["output"]: float(np.abs(REFS[c["output"]]).max()) for c in CASES if "output" in c}
print(json.dumps({"cases": len(CASES), "tensors": len(REFS), "bytes": sum(a.nbytes for a in REFS.values()),
                  "max_abs_output": max(peaks.values()),
                  "stream_vs_decode": {c["outputs"][0].rsplit("/", 1)[0]: c["stream_vs_decode_max_abs"]
                                       for c in CASES if "stream_vs_decode_max_abs" in c},
                  "seconds": round(time.time() - T0, 1)}))
