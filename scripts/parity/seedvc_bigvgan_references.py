#!/usr/bin/env python
"""Reference outputs of upstream's BigVGAN v2 (seed-vc 0.4.3 `modules/bigvgan`, torch path), for
tests/nn/test_bigvgan.py.

Usage, in upstream's venv (scripts/parity/seedvc_upstream_env.sh):
    python scripts/parity/seedvc_bigvgan_references.py [OUTDIR]     # default tests/parity/data/nn/bigvgan
(restarts itself under the parity pins; runs at one thread)

Writes OUTDIR/references.safetensors (C-contiguous float32 arrays) and OUTDIR/references.json (cases,
configs, seeds, tensor names, environment):

- filter/*: `kaiser_sinc_filter1d` for kernel sizes that reach each of Kaiser's three beta branches,
  odd and even sizes, the cutoffs 2x and 3x resampling use.
- resample/*: `UpSample1d`, `DownSample1d`, `LowPassFilter1d` alone (default and explicit kernels,
  ratios 2 and 3, an odd low-pass kernel, a one-sample input), and `Activation1d` around Snake and
  SnakeBeta; snake/*: Snake and SnakeBeta alone, log scale on and off. Alphas and betas randomised.
- model/<case>: `BigVGAN(h, use_cuda_kernel=False)` on tiny configs (both resblocks, snake and
  snakebeta, log scale on and off, tanh or clamp, conv_post bias on and off, 2 and 3 upsample stages,
  odd rates), every parameter randomised (`procedural_state`: weight_g, weight_v, biases, alphas and
  betas; upstream inits alphas to a constant and g to |v|). Stored: the state dict with weight norm
  (weight_g / weight_v, and the filter buffers), the conv weights after `remove_weight_norm()`, and for
  each mel (batch 1 and 2, lengths 1 to 9) the output with weight norm applied (`out_wn`) and removed
  (`out_removed`).
- real/22khz_80band_256x: the released bigvgan_v2_22khz_80band_256x config (the config.json seed-vc
  vendors in modules/bigvgan, which is that model's published one) with `procedural_state` weights
  (seed in the json; not stored: the test rebuilds them: seedvc_weights.py), on an
  8-frame mel: only the mel, the outputs and the layout (names and shapes) are stored.

Upstream's `AMPBlock2.forward` lacks its `return x`, so a resblock "2" generator raises a TypeError
in upstream's own forward (checked here). For those cases each AMPBlock2 instance's forward is replaced
by the loop upstream writes, over upstream's own convs and activations, plus the missing return; that
loop is the only code here in the place of upstream's.

No upstream module here imports `audiocodec` (length_regulator is not used), so no stub is needed.
"""

import json
import os
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import environment, pin_process, write_references  # noqa: E402  (beside this script)
from seedvc_weights import bigvgan_state as procedural_state  # noqa: E402

pin_process()

import seed_vc  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(seed_vc.__file__))  # upstream imports itself as top-level `modules`
from modules.bigvgan import bigvgan as upstream  # noqa: E402
from modules.bigvgan.activations import Snake, SnakeBeta  # noqa: E402
from modules.bigvgan.alias_free_activation.torch.act import Activation1d  # noqa: E402
from modules.bigvgan.alias_free_activation.torch.filter import LowPassFilter1d, kaiser_sinc_filter1d  # noqa: E402
from modules.bigvgan.alias_free_activation.torch.resample import DownSample1d, UpSample1d  # noqa: E402
from modules.bigvgan.env import AttrDict  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/parity/data/nn/bigvgan"
VENDORED_CONFIG = Path(upstream.__file__).with_name("config.json")
REFS, CASES = {}, {}


def put(name, tensor):
    assert name not in REFS, name
    REFS[name] = tensor.detach().float().contiguous().numpy()
    return name


# ---------------------------------------------------------------------------------------------------


def parameter_layout(module):
    return {name: tuple(p.shape) for name, p in module.named_parameters()}


def randomise(module, seed, logscale):
    values = procedural_state(parameter_layout(module), seed, logscale)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(values[name])


def amp_block2_with_return(block, x):
    """Upstream's AMPBlock2 loop (its modules, its order), with the `return x` it lacks."""
    for c, a in zip(block.convs, block.activations, strict=True):
        xt = a(x)
        xt = c(xt)
        x = xt + x
    return x


def repair_amp_block2(model):
    patched = 0
    for block in model.resblocks:
        if isinstance(block, upstream.AMPBlock2):
            block.forward = types.MethodType(amp_block2_with_return, block)
            patched += 1
    return patched


# ---------------------------------------------------------------------------------------------------
# Filters, resamplers, activations


FILTERS = {  # name: (cutoff, half_width, kernel_size)
    "k12_ratio2": (0.25, 0.3, 12),  # BigVGAN's filters: attenuation > 50 dB branch
    "k8": (0.25, 0.3, 8),  # 21..50 dB branch
    "k4": (0.25, 0.3, 4),  # < 21 dB: beta 0 (rectangular window)
    "k18_ratio3": (0.5 / 3, 0.6 / 3, 18),
    "k11_odd": (0.25, 0.3, 11),
    "k7_odd_nyquist": (0.5, 0.6, 7),
    "k13_odd": (0.1, 0.2, 13),
}


def filter_cases():
    for name, (cutoff, half_width, size) in FILTERS.items():
        CASES[f"filter/{name}"] = {"cutoff": cutoff, "half_width": half_width, "kernel_size": size,
                                   "out": put(f"filter/{name}", kaiser_sinc_filter1d(cutoff, half_width, size))}


RESAMPLERS = {  # name: (kind, args, input shape)
    "up2_k12": ("up", dict(ratio=2, kernel_size=12), (2, 3, 17)),
    "up2_default": ("up", dict(ratio=2), (1, 2, 8)),
    "up3_default": ("up", dict(ratio=3), (2, 2, 10)),
    "up2_one_sample": ("up", dict(ratio=2, kernel_size=12), (1, 3, 1)),
    "down2_k12": ("down", dict(ratio=2, kernel_size=12), (2, 3, 34)),
    "down2_odd_length": ("down", dict(ratio=2, kernel_size=12), (1, 2, 15)),
    "down3_default": ("down", dict(ratio=3), (2, 2, 30)),
    "lowpass_k11_stride1": ("lowpass", dict(cutoff=0.3, half_width=0.4, stride=1, kernel_size=11), (2, 3, 20)),
    "lowpass_k12_stride2": ("lowpass", dict(cutoff=0.25, half_width=0.3, stride=2, kernel_size=12), (1, 4, 21)),
}

ACTIVATIONS = {  # name: (kind, logscale, channels, input shape)
    "snake_linear": ("snake", False, 3, (2, 3, 11)),
    "snake_log": ("snake", True, 3, (1, 3, 16)),
    "snakebeta_linear": ("snakebeta", False, 4, (2, 4, 9)),
    "snakebeta_log": ("snakebeta", True, 4, (1, 4, 13)),
}


def resample_cases():
    g = torch.Generator().manual_seed(50)
    for name, (kind, args, shape) in RESAMPLERS.items():
        module = {"up": UpSample1d, "down": DownSample1d, "lowpass": LowPassFilter1d}[kind](**args)
        x = torch.randn(shape, generator=g) * 2
        with torch.inference_mode():
            out = module(x)
        CASES[f"resample/{name}"] = {"kind": kind, "args": args, "x": put(f"resample/{name}/x", x),
                                     "out": put(f"resample/{name}/out", out)}
    for index, (name, (kind, logscale, channels, shape)) in enumerate(ACTIVATIONS.items()):
        snake = (Snake if kind == "snake" else SnakeBeta)(channels, alpha_logscale=logscale)
        randomise(snake, 60 + 10 * index, logscale)
        x = torch.randn(shape, generator=g) * 3
        with torch.inference_mode():
            alone = snake(x)
            wrapped = Activation1d(activation=snake)
            anti_aliased = wrapped(x)
        CASES[f"snake/{name}"] = {
            "kind": kind, "logscale": logscale, "channels": channels,
            "state": {k: put(f"snake/{name}/state/{k}", v) for k, v in snake.state_dict().items()},
            "x": put(f"snake/{name}/x", x), "out": put(f"snake/{name}/out", alone),
            "anti_aliased": put(f"snake/{name}/anti_aliased", anti_aliased)}


# ---------------------------------------------------------------------------------------------------
# Generators


def tiny(**changes):
    base = dict(resblock="1", upsample_rates=[4, 2], upsample_kernel_sizes=[8, 4], upsample_initial_channel=32,
                resblock_kernel_sizes=[3, 7], resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5]], activation="snakebeta",
                snake_logscale=True, use_tanh_at_final=False, use_bias_at_final=False, num_mels=12,
                sampling_rate=16000, hop_size=8)
    return {**base, **changes}


MODELS = {  # name: config (the AttrDict fields upstream reads, plus the mel description)
    "r1_snakebeta_log_clamp_nobias": tiny(),  # the released v2 form, small
    "r1_snake_linear_tanh_bias_3stages": tiny(upsample_rates=[2, 2, 2], upsample_kernel_sizes=[4, 4, 4],
                                              # three kernels: their mean is not a power-of-2 scaling
                                              resblock_kernel_sizes=[3, 5, 7],
                                              resblock_dilation_sizes=[[1, 3], [1, 2], [2]],
                                              activation="snake", snake_logscale=False, use_tanh_at_final=True,
                                              use_bias_at_final=True, num_mels=10),
    "r2_snakebeta_linear_tanh_nobias_rate3": tiny(resblock="2", upsample_rates=[3, 2], upsample_kernel_sizes=[7, 4],
                                                  resblock_kernel_sizes=[3, 5], resblock_dilation_sizes=[[1, 3], [2]],
                                                  snake_logscale=False, use_tanh_at_final=True, hop_size=6),
    "r2_snake_log_clamp_bias_3stages": tiny(resblock="2", upsample_rates=[2, 2, 2], upsample_kernel_sizes=[4, 4, 4],
                                            resblock_kernel_sizes=[3], resblock_dilation_sizes=[[1, 3, 5]],
                                            activation="snake", use_bias_at_final=True, num_mels=8),
    "r1_snakebeta_linear_clamp_bias_rate5": tiny(upsample_rates=[5, 2], upsample_kernel_sizes=[10, 4],
                                                 upsample_initial_channel=16, resblock_kernel_sizes=[3],
                                                 resblock_dilation_sizes=[[1, 2]], snake_logscale=False,
                                                 use_bias_at_final=True, hop_size=10),
}
MELS = ((1, 1), (1, 6), (2, 9))  # (batch, frames)


def run_both_ways(model, mels):
    """Outputs with weight norm applied, then (same model) after remove_weight_norm(); the conv
    weights it folded."""
    with torch.inference_mode():
        with_norm = [model(mel) for mel in mels]
    model.remove_weight_norm()
    folded = {k: v.clone() for k, v in model.state_dict().items() if k.endswith(".weight")}
    with torch.inference_mode():
        removed = [model(mel) for mel in mels]
    for a, b in zip(with_norm, removed, strict=True):
        assert torch.equal(a, b), "upstream's hook and remove_weight_norm differ"
    return with_norm, removed, folded


def model_cases():
    for index, (name, config) in enumerate(MODELS.items()):
        seed = 1000 + 100 * index
        model = upstream.BigVGAN(AttrDict(json.loads(json.dumps(config))), use_cuda_kernel=False).eval()
        randomise(model, seed, config["snake_logscale"])
        if config["resblock"] == "2":
            try:
                with torch.inference_mode():
                    model(torch.zeros(1, config["num_mels"], 2))
                raise AssertionError("upstream's AMPBlock2 returned something: drop the repair")
            except TypeError:
                pass
            assert repair_amp_block2(model) == len(model.resblocks)
        g = torch.Generator().manual_seed(seed + 99)
        mels = [torch.randn(batch, config["num_mels"], frames, generator=g) for batch, frames in MELS]
        state = {k: put(f"model/{name}/state/{k}", v) for k, v in model.state_dict().items()}
        with_norm, removed, folded = run_both_ways(model, mels)
        clipped = [float((out.abs() >= 1).float().mean()) for out in removed]
        CASES[f"model/{name}"] = {
            "config": config, "seed": seed, "state": state,
            "folded": {k: put(f"model/{name}/folded/{k}", v) for k, v in folded.items()},
            "mels": [put(f"model/{name}/mel{i}", m) for i, m in enumerate(mels)],
            "out_wn": [put(f"model/{name}/out_wn{i}", o) for i, o in enumerate(with_norm)],
            "out_removed": [put(f"model/{name}/out_removed{i}", o) for i, o in enumerate(removed)],
            "clipped_fraction": clipped, "amp_block2_repaired": config["resblock"] == "2"}


REAL_FIELDS = ("resblock", "upsample_rates", "upsample_kernel_sizes", "upsample_initial_channel",
               "resblock_kernel_sizes", "resblock_dilation_sizes", "use_tanh_at_final", "use_bias_at_final",
               "activation", "snake_logscale", "num_mels", "hop_size", "sampling_rate")


def real_case():
    h = AttrDict(json.loads(VENDORED_CONFIG.read_text()))
    config = {k: h[k] for k in REAL_FIELDS}
    seed = 7000
    model = upstream.BigVGAN(h, use_cuda_kernel=False).eval()
    layout = parameter_layout(model)
    randomise(model, seed, h.snake_logscale)
    mel = torch.randn(1, h.num_mels, 8, generator=torch.Generator().manual_seed(7001)) * 1.5 - 5
    with_norm, removed, _ = run_both_ways(model, [mel])
    CASES["real/22khz_80band_256x"] = {
        "config": config, "seed": seed, "layout": {k: list(v) for k, v in layout.items()},
        "mel": put("real/22khz_80band_256x/mel", mel), "out_wn": put("real/22khz_80band_256x/out_wn", with_norm[0]),
        "out_removed": put("real/22khz_80band_256x/out_removed", removed[0]),
        "clipped_fraction": float((removed[0].abs() >= 1).float().mean())}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    filter_cases()
    resample_cases()
    model_cases()
    real_case()
    write_references(REFS, OUT / "references.safetensors")
    info = {"cases": CASES, "environment": environment(["seed-vc", "torch", "safetensors"]),
            "note": "float32; compare bitwise. real/* weights are procedural (procedural_state), not stored"}
    (OUT / "references.json").write_text(json.dumps(info, indent=1) + "\n")
    size = (OUT / "references.safetensors").stat().st_size
    print(f"wrote {len(REFS)} tensors ({size} bytes), {len(CASES)} cases to {OUT}")


if __name__ == "__main__":
    main()
