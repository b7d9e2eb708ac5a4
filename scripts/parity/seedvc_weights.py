"""The seeded weights and inputs of the shared-part reference sets (nn/campplus, nn/hift, nn/bigvgan, nn/s2mel,
nn/rmvpe), defined once: each writer (in the seed-vc oracle venv) fills upstream's modules with them, and each
test (in ours, through helpers.parity_module) rebuilds the same values for its own modules, so large weights are
never stored. Pure torch, no upstream import, no side effects on import: every draw comes from its own seeded CPU
generator.
"""

from __future__ import annotations

import hashlib
import json
import math

import torch

# --- CAM++ (nn/campplus) ---------------------------------------------------------------------------------------


def campplus_state(shapes: dict, seed: int) -> dict:
    """A value for every entry of a CAM++ state dict {name: (shape, dtype name)}, drawn in name order from
    one seeded generator: convolution weights at Kaiming scale, 1-D weights (BatchNorm scales, PReLU slopes)
    in [0.5, 1.5), biases and running means small, running variances in [0.5, 1.5)."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for name in sorted(shapes):
        shape, dtype = shapes[name]
        if dtype == "int64":  # num_batches_tracked: unused in eval mode
            state[name] = torch.tensor(seed, dtype=torch.int64).reshape(shape)
        elif name.endswith("running_var"):
            state[name] = torch.rand(shape, generator=g) + 0.5
        elif name.endswith(("running_mean", "bias")):
            state[name] = torch.randn(shape, generator=g) * 0.2
        elif len(shape) == 1:
            state[name] = torch.rand(shape, generator=g) + 0.5
        else:
            fan_in = math.prod(shape[1:])
            state[name] = torch.randn(shape, generator=g) * math.sqrt(2.0 / fan_in)
    return state


def campplus_features(batch: int, frames: int, feat_dim: int, seed: int) -> torch.Tensor:
    """CAM++ input features (batch, frames, feat_dim) of about the spread of mean-removed log mels."""
    return torch.randn(batch, frames, feat_dim, generator=torch.Generator().manual_seed(seed)) * 2


def shapes_of(model) -> dict:
    return {k: (list(v.shape), str(v.dtype).removeprefix("torch.")) for k, v in model.state_dict().items()}


def digest(value) -> str:
    """sha256 of a JSON value in canonical form (key lists and shapes are stored as this, not spelled out)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


# --- HiFT (nn/hift) --------------------------------------------------------------------------------------------


def hift_state(layout: dict, seed: int, post_gain: float = 1.0) -> dict:
    """Every tensor of an upstream HiFT state dict (key -> shape) drawn from its own generator, in sorted key
    order: weight norm's g in [0.5, 1] (conv_post's times `post_gain`: a larger one drives magnitudes into
    upstream's clip at 100 and the wave into its clamp), Snake alphas in [0.5, 1.5], biases in +-0.1, the F0
    classifier scaled so its |output| spans unvoiced and voiced Hz, every other weight U(+-sqrt(3 / fan_in))."""
    state = {}
    for index, key in enumerate(sorted(layout)):
        shape = tuple(layout[key])
        g = torch.Generator().manual_seed(seed + index)
        u = torch.rand(shape, generator=g) * 2 - 1
        fan_in = math.prod(shape[1:]) if len(shape) > 1 else shape[0]
        if key.endswith(("weight_g", "original0")):
            value = (0.75 + 0.25 * u) * (post_gain if key.startswith("conv_post.") else 1.0)
        elif key.endswith(".alpha"):
            value = 1 + 0.5 * u
        elif key == "f0_predictor.classifier.weight":
            value = 500 * u * math.sqrt(3.0 / fan_in)
        elif key == "f0_predictor.classifier.bias":
            value = 150 * u
        elif key.endswith("bias"):
            value = 0.1 * u
        else:
            value = u * math.sqrt(3.0 / fan_in)
        state[key] = value
    return state


# --- BigVGAN (nn/bigvgan) --------------------------------------------------------------------------------------

BIGVGAN_POST_GAIN = 0.35


def bigvgan_state(layout, seed, logscale):
    """Values for every parameter of `layout` (name -> shape), each from its own generator (sorted name
    order, seed + index): weight_v ~ U(±sqrt(3 / fan_in)); weight_g a signed U(0.4, 1.2) per row
    of dim 0 (the norm a row ends with); biases U(±0.1); alpha / beta U(±0.8) in log scale, U(0.3, 1.8)
    linear; conv_post's g times BIGVGAN_POST_GAIN, so that the final clamp cuts peaks only (the residual stacks
    grow random signals well past 1). Filter buffers are not parameters and are left out."""
    state = {}
    for index, name in enumerate(sorted(layout)):
        shape = tuple(layout[name])
        g = torch.Generator().manual_seed(seed + index)
        u = torch.rand(shape, generator=g) * 2 - 1
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "weight_g":
            state[name] = torch.where(u < 0, -1.0, 1.0) * (0.4 + 0.8 * u.abs())
            if name.startswith("conv_post."):
                state[name] = state[name] * BIGVGAN_POST_GAIN
        elif leaf == "weight_v":
            state[name] = u * math.sqrt(3.0 / (math.prod(shape[1:])))
        elif leaf == "bias":
            state[name] = 0.1 * u
        elif leaf in ("alpha", "beta"):
            state[name] = 0.8 * u if logscale else 1.05 + 0.75 * u
        else:
            raise ValueError(f"no rule for {name}")
    return state


# --- RMVPE (nn/rmvpe) -----------------------------------------------------------------------------------------


def rmvpe_state(layout: dict, seed: int) -> dict:
    """Every tensor of an upstream E2E state dict (key -> shape) drawn from its own generator, in sorted key
    order: BatchNorm weights in [0.5, 1.5], biases and running means in +-0.2, running variances in [0.5, 2]
    (the input BatchNorm's mean about -6 and variance about 9, the range of the log-mels), convolution and
    head weights U(+-sqrt(3 / fan_in)), the GRU U(+-1 / sqrt(256)) as torch draws it, the head's bias about -4.8
    (so the sigmoid's maxima straddle the 0.03 threshold), num_batches_tracked the key's index."""
    state = {}
    for index, key in enumerate(sorted(layout)):
        shape = tuple(layout[key])
        if key.endswith("num_batches_tracked"):
            state[key] = torch.tensor(index, dtype=torch.long)
            continue
        g = torch.Generator().manual_seed(seed + index)
        u = torch.rand(shape, generator=g) * 2 - 1
        fan_in = math.prod(shape[1:]) if len(shape) > 1 else shape[0]
        is_norm = len(shape) == 1 and ("running_" in key or f"{key.rpartition('.')[0]}.running_mean" in layout)
        if key.startswith("unet.encoder.bn."):
            value = {"weight": 1 + 0.5 * u, "bias": 0.2 * u, "running_mean": -6 + u,
                     "running_var": 9 + 2 * u}[key.rpartition(".")[2]]
        elif is_norm and key.endswith("running_var"):
            value = 1.25 + 0.75 * u
        elif is_norm and key.endswith(".weight"):
            value = 1 + 0.5 * u
        elif is_norm:  # bias, running_mean
            value = 0.2 * u
        elif ".gru." in key:
            value = u / 16
        elif key == "fc.1.bias":
            value = -4.8 + 0.5 * u
        elif key.endswith("bias"):
            value = 0.1 * u
        else:
            value = u * math.sqrt(3.0 / fan_in)
        state[key] = value
    return state


# --- the s2mel DiT, WaveNet and regulator (nn/s2mel, and the seedvc models) ----------------------------------


def s2mel_fill(name, shape, seed):
    """A parameter's values from its name and shape alone: weight-norm magnitudes and 1-D weights (RMSNorm,
    GroupNorm) around 1, biases small, everything else U(±sqrt(3 / fan_in))."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(shape, generator=g) * 2 - 1
    if name.endswith("weight_g"):
        return 1 + 0.25 * u
    if len(shape) == 1 and name.endswith("weight"):
        return 1 + 0.3 * u
    if name.endswith("bias"):
        return 0.1 * u
    fan_in = math.prod(shape[1:]) if len(shape) > 1 else shape[0]
    return u * math.sqrt(3.0 / fan_in)
