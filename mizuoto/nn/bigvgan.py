"""BigVGAN v2: the mel-spectrogram-to-waveform vocoder of Seed-VC, IndexTTS and GPT-SoVITS v3.

Exact to seed-vc 0.4.3 `modules/bigvgan/bigvgan.py` and `activations.py` (NVIDIA BigVGAN v2, MIT;
seed-vc is GPL-3.0 code, read not copied), with the anti-aliased activations of `mizuoto.nn.alias_free`.
Only the torch path: the fused CUDA activation kernel (`use_cuda_kernel=True`) is out of scope.

Data flow, mel (B, num_mels, T) -> waveform (B, 1, T * prod(upsample_rates)):
    conv_pre (k7)
    per stage i: ups[i][0] (transposed conv, stride upsample_rates[i], halves the channels)
                 -> mean of the stage's resblocks (one AMP block per resblock kernel size)
    activation_post (anti-aliased Snake/SnakeBeta) -> conv_post (k7, one channel) -> tanh or clamp to [-1, 1]
An AMP block ("1") is, per dilation d: x + conv_1(act(conv_d(act(x)))); block "2" drops the dilation-1
conv: x + conv_d(act(x)).

State dict keys are upstream's (`conv_pre`, `ups.{i}.0`, `resblocks.{n}.convs1/convs2/convs`,
`resblocks.{n}.activations.{j}.act.alpha`, `...upsample.filter`, `activation_post`, `conv_post`), with
plain `weight`s: the released generators store weight norm as `weight_g` / `weight_v`, and upstream
recomputes `torch._weight_norm(weight_v, weight_g, 0)` before every call (the legacy hook) or once in
`remove_weight_norm()`. Both give the same bits, so `load_bigvgan` folds each pair once.

One deliberate difference: upstream's `AMPBlock2.forward` has no `return`, so a resblock "2" generator
raises a TypeError there. Ours returns the block's output, as the block is evidently meant to (no
released BigVGAN v2 uses "2"); the reference writer checks the rest of it against upstream's modules.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn.alias_free import AntiAliasedActivation

SNAKE_EPS = 1e-9  # added to the magnitude before its reciprocal, as upstream does, so a zero never divides

ACTIVATIONS = ("snake", "snakebeta")
RESBLOCKS = ("1", "2")


# ---------------------------------------------------------------------------------------------------
# Config


@dataclasses.dataclass(frozen=True)
class BigVGANConfig:
    """The generator's hyperparameters, as the released `config.json` names them. The training-only
    fields there (discriminators, losses, optimiser, segment size, ...) are ignored. `num_mels`,
    `sampling_rate` and `hop_size` describe the mel the generator expects; `hop_size` is normally
    prod(upsample_rates), which is what the generator actually multiplies the length by."""

    upsample_rates: tuple[int, ...]
    upsample_kernel_sizes: tuple[int, ...]
    upsample_initial_channel: int
    resblock_kernel_sizes: tuple[int, ...]
    resblock_dilation_sizes: tuple[tuple[int, ...], ...]
    num_mels: int
    resblock: str  # required, as upstream reads them unconditionally
    activation: str
    snake_logscale: bool
    use_tanh_at_final: bool = True  # upstream's defaults when config.json lacks the field (older models)
    use_bias_at_final: bool = True
    sampling_rate: int | None = None
    hop_size: int | None = None

    def __post_init__(self):
        def fail(message):
            raise CheckpointError(f"BigVGAN config.json: {message}")

        if self.resblock not in RESBLOCKS:
            fail(f"resblock {self.resblock!r} is not one of {', '.join(map(repr, RESBLOCKS))}")
        if self.activation not in ACTIVATIONS:
            fail(f"activation {self.activation!r} is not one of {', '.join(map(repr, ACTIVATIONS))}")
        if not self.upsample_rates or len(self.upsample_rates) != len(self.upsample_kernel_sizes):
            fail(f"{len(self.upsample_rates)} upsample_rates but {len(self.upsample_kernel_sizes)} "
                 "upsample_kernel_sizes (one kernel per rate, at least one)")
        if not self.resblock_kernel_sizes or len(self.resblock_kernel_sizes) != len(self.resblock_dilation_sizes):
            fail(f"{len(self.resblock_kernel_sizes)} resblock_kernel_sizes but {len(self.resblock_dilation_sizes)} "
                 "resblock_dilation_sizes (one dilation list per kernel, at least one)")
        positive = [*self.upsample_rates, *self.upsample_kernel_sizes, *self.resblock_kernel_sizes,
                    *(d for ds in self.resblock_dilation_sizes for d in ds), self.num_mels]
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in positive) or not all(
                self.resblock_dilation_sizes):
            fail("rates, kernel sizes, dilations and num_mels must be positive integers")
        flags = {"snake_logscale": self.snake_logscale, "use_tanh_at_final": self.use_tanh_at_final,
                 "use_bias_at_final": self.use_bias_at_final}
        for name, value in flags.items():
            if not isinstance(value, bool):
                fail(f"{name} is {value!r}, not true or false")
        channel = self.upsample_initial_channel
        if isinstance(channel, bool) or not isinstance(channel, int) or channel % 2 ** len(self.upsample_rates) \
                or channel < 2 ** len(self.upsample_rates):
            fail(f"upsample_initial_channel {channel!r} cannot be halved {len(self.upsample_rates)} times")

    @classmethod
    def from_dict(cls, h: Mapping) -> "BigVGANConfig":
        """From the fields of a released config.json (the AttrDict upstream builds from it)."""
        if not isinstance(h, Mapping):
            raise CheckpointError(f"BigVGAN config.json holds a {type(h).__name__}, not an object")
        fields = {f.name for f in dataclasses.fields(cls)}
        required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
        missing = [name for name in required if name not in h]
        if missing:
            raise CheckpointError(f"BigVGAN config.json lacks {', '.join(missing)}")
        values = {k: v for k, v in h.items() if k in fields}
        for name in ("upsample_rates", "upsample_kernel_sizes", "resblock_kernel_sizes"):
            values[name] = _int_tuple(values[name], name)
        dilations = values["resblock_dilation_sizes"]
        if not isinstance(dilations, Sequence) or isinstance(dilations, str):
            raise CheckpointError("BigVGAN config.json: resblock_dilation_sizes is not a list of lists")
        values["resblock_dilation_sizes"] = tuple(_int_tuple(d, "resblock_dilation_sizes") for d in dilations)
        return cls(**values)

    @property
    def upsample_factor(self) -> int:
        """Waveform samples per mel frame."""
        return math.prod(self.upsample_rates)

    def stage_channels(self, stage: int) -> int:
        """Channels after upsampling stage `stage` (the initial channel halved stage + 1 times)."""
        return self.upsample_initial_channel // 2 ** (stage + 1)


def _int_tuple(value, name: str) -> tuple:
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise CheckpointError(f"BigVGAN config.json: {name} is not a list")
    return tuple(value)


# ---------------------------------------------------------------------------------------------------
# Periodic activations


class Snake(nn.Module):
    """x + sin^2(alpha x) / alpha, one alpha per channel over (B, C, T). With `logscale` the parameter
    holds log(alpha) (released v2 models); upstream starts it at 0 (log scale) or 1."""

    def __init__(self, channels: int, logscale: bool = False):
        super().__init__()
        self.logscale = logscale
        self.alpha = nn.Parameter(torch.zeros(channels) if logscale else torch.ones(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha = self.alpha[None, :, None]
        if self.logscale:
            alpha = torch.exp(alpha)
        return x + 1.0 / (alpha + SNAKE_EPS) * torch.sin(x * alpha).pow(2)


class SnakeBeta(nn.Module):
    """x + sin^2(alpha x) / beta: Snake with the magnitude `beta` separate from the frequency `alpha`
    (both per channel, both log-scaled with `logscale`)."""

    def __init__(self, channels: int, logscale: bool = False):
        super().__init__()
        self.logscale = logscale
        start = torch.zeros(channels) if logscale else torch.ones(channels)
        self.alpha = nn.Parameter(start.clone())
        self.beta = nn.Parameter(start.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        alpha, beta = self.alpha[None, :, None], self.beta[None, :, None]
        if self.logscale:
            alpha, beta = torch.exp(alpha), torch.exp(beta)
        return x + 1.0 / (beta + SNAKE_EPS) * torch.sin(x * alpha).pow(2)


def periodic_activation(config: BigVGANConfig, channels: int) -> AntiAliasedActivation:
    """The config's Snake or SnakeBeta over `channels`, run at twice the rate (alias_free)."""
    kind = Snake if config.activation == "snake" else SnakeBeta
    return AntiAliasedActivation(kind(channels, logscale=config.snake_logscale))


# ---------------------------------------------------------------------------------------------------
# Blocks


def same_padding(kernel_size: int, dilation: int) -> int:
    """Padding that keeps the length of a stride-1 conv (odd kernels)."""
    return (kernel_size * dilation - dilation) // 2


def dilated_conv(channels: int, kernel_size: int, dilation: int) -> nn.Conv1d:
    return nn.Conv1d(channels, channels, kernel_size, dilation=dilation, padding=same_padding(kernel_size, dilation))


class AMPBlock1(nn.Module):
    """Anti-aliased multi-periodicity block: per dilation, act -> dilated conv -> act -> conv -> add.
    `activations` interleaves the two activations of each dilation (0, 1 for the first, ...)."""

    def __init__(self, config: BigVGANConfig, channels: int, kernel_size: int, dilations: Sequence[int]):
        super().__init__()
        self.convs1 = nn.ModuleList(dilated_conv(channels, kernel_size, d) for d in dilations)
        self.convs2 = nn.ModuleList(dilated_conv(channels, kernel_size, 1) for _ in dilations)
        self.activations = nn.ModuleList(periodic_activation(config, channels) for _ in range(2 * len(dilations)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for index, (dilated, plain) in enumerate(zip(self.convs1, self.convs2, strict=True)):
            residual = dilated(self.activations[2 * index](x))
            x = plain(self.activations[2 * index + 1](residual)) + x
        return x


class AMPBlock2(nn.Module):
    """The lighter AMP block: per dilation, act -> dilated conv -> add. (Upstream forgets to return
    the result; see the module docstring.)"""

    def __init__(self, config: BigVGANConfig, channels: int, kernel_size: int, dilations: Sequence[int]):
        super().__init__()
        self.convs = nn.ModuleList(dilated_conv(channels, kernel_size, d) for d in dilations)
        self.activations = nn.ModuleList(periodic_activation(config, channels) for _ in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for conv, act in zip(self.convs, self.activations, strict=True):
            x = conv(act(x)) + x
        return x


# ---------------------------------------------------------------------------------------------------
# Generator


class BigVGAN(nn.Module):
    """The generator, for inference (no weight norm: load with `load_bigvgan`)."""

    def __init__(self, config: BigVGANConfig):
        super().__init__()
        self.config = config
        h = config
        self.conv_pre = nn.Conv1d(h.num_mels, h.upsample_initial_channel, 7, 1, padding=3)
        # each stage is a one-element list, as upstream nests it (keys ups.{i}.0.weight)
        self.ups = nn.ModuleList(
            nn.ModuleList([nn.ConvTranspose1d(h.upsample_initial_channel // 2 ** i, h.stage_channels(i), kernel,
                                              rate, padding=(kernel - rate) // 2)])
            for i, (rate, kernel) in enumerate(zip(h.upsample_rates, h.upsample_kernel_sizes, strict=True)))
        block = AMPBlock1 if h.resblock == "1" else AMPBlock2
        self.resblocks = nn.ModuleList(
            block(h, h.stage_channels(i), kernel, dilations)
            for i in range(len(h.upsample_rates))
            for kernel, dilations in zip(h.resblock_kernel_sizes, h.resblock_dilation_sizes, strict=True))
        last = h.stage_channels(len(h.upsample_rates) - 1)
        self.activation_post = periodic_activation(h, last)
        self.conv_post = nn.Conv1d(last, 1, 7, 1, padding=3, bias=h.use_bias_at_final)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """mel (B, num_mels, T) -> waveform (B, 1, T * upsample_factor) in [-1, 1]."""
        self.check_mel(mel)
        per_stage = len(self.config.resblock_kernel_sizes)
        x = self.conv_pre(mel)
        for stage, (up,) in enumerate(self.ups):
            x = up(x)
            blocks = self.resblocks[stage * per_stage:(stage + 1) * per_stage]
            # summed in block order and divided (not scaled by 1/n): upstream's rounding
            total = blocks[0](x)
            for block in blocks[1:]:
                total = total + block(x)
            x = total / per_stage
        x = self.conv_post(self.activation_post(x))
        # released v2 configs clamp instead of tanh: the generator was trained to stay in range itself
        return torch.tanh(x) if self.config.use_tanh_at_final else torch.clamp(x, min=-1.0, max=1.0)

    def check_mel(self, mel) -> None:
        """InputError, in one line, for anything but a float (B, num_mels, T >= 1) tensor."""
        mels = self.config.num_mels
        if not isinstance(mel, torch.Tensor) or not mel.is_floating_point():
            kind = f"a {mel.dtype} tensor" if isinstance(mel, torch.Tensor) else f"a {type(mel).__name__}"
            raise InputError(f"BigVGAN takes a float mel spectrogram tensor, got {kind}")
        if mel.dim() != 3 or mel.shape[1] != mels or mel.shape[2] < 1:
            raise InputError(f"BigVGAN takes a mel of shape (batch, {mels}, frames >= 1), got {tuple(mel.shape)}")


# ---------------------------------------------------------------------------------------------------
# Loading


def checkpoint_layout(config: BigVGANConfig, weight_norm: bool = True) -> dict[str, tuple[int, ...]]:
    """Every tensor of an upstream generator state dict for `config` -> its shape, in our modules'
    order: with `weight_norm`, each conv's weight as `weight_g` (dim 0 kept, others 1) and `weight_v`,
    as the released bigvgan_generator.pt stores it; without, the plain `weight` of a generator whose
    weight norm was removed."""
    with torch.device("meta"):
        model = BigVGAN(config)
    layout: dict[str, tuple[int, ...]] = {}
    for key, tensor in model.state_dict().items():
        if weight_norm and _is_conv_weight(model, key):
            base = key[: -len("weight")]
            layout[base + "weight_g"] = (tensor.shape[0],) + (1,) * (tensor.dim() - 1)
            layout[base + "weight_v"] = tuple(tensor.shape)
        else:
            layout[key] = tuple(tensor.shape)
    return layout


def load_bigvgan(checkpoint: Mapping[str, torch.Tensor], config: BigVGANConfig, device="cpu",
                 dtype: torch.dtype = torch.float32, source: str = "bigvgan_generator.pt") -> BigVGAN:
    """The generator of `config` with an upstream checkpoint's tensors, on `device` in `dtype`, in eval.

    `checkpoint` is what bigvgan_generator.pt holds (`{"generator": state_dict}`) or the state dict
    itself. Each conv weight comes from `weight_g` / `weight_v` (folded with torch._weight_norm in
    float32, exactly what upstream's hook and its remove_weight_norm compute) or from a plain `weight`
    where the weight norm was already removed. The resampling filters are taken from the checkpoint, as
    upstream's load_state_dict takes them. `source` names the file in error messages."""
    state = checkpoint
    if isinstance(state, Mapping) and isinstance(state.get("generator"), Mapping):
        state = state["generator"]
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{source} does not hold a BigVGAN state dict (got {type(state).__name__})")
    with torch.device("meta"):
        model = BigVGAN(config)
    tensors: dict[str, torch.Tensor] = {}
    missing: list[str] = []
    used: set[str] = set()

    def take(key: str, shape: tuple[int, ...]) -> torch.Tensor | None:
        if key not in state:
            missing.append(key)
            return None
        value = state[key]
        used.add(key)
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            kind = f"a {value.dtype} tensor" if isinstance(value, torch.Tensor) else f"a {type(value).__name__}"
            raise CheckpointError(f"{source}: {key} is {kind}, not a float tensor")
        if tuple(value.shape) != tuple(shape):
            raise CheckpointError(f"{source}: {key} has shape {tuple(value.shape)}, the config.json implies "
                                  f"{tuple(shape)}")
        return value.to(device=device, dtype=torch.float32)

    for key, meta in model.state_dict().items():
        base = key[: -len("weight")]
        if _is_conv_weight(model, key) and key not in state and base + "weight_v" in state:
            g = take(base + "weight_g", (meta.shape[0],) + (1,) * (meta.dim() - 1))
            v = take(base + "weight_v", tuple(meta.shape))
            if g is not None and v is not None:
                tensors[key] = torch._weight_norm(v, g, 0)
        else:
            value = take(key, tuple(meta.shape))
            if value is not None:
                tensors[key] = value
    unexpected = sorted(set(state) - used)
    if missing or unexpected:
        detail = f"missing {missing[0]}" if missing else f"unexpected {unexpected[0]}"
        raise CheckpointError(f"{source} does not fit its config.json ({detail}; {len(missing)} missing, "
                              f"{len(unexpected)} unexpected tensors)")
    model.load_state_dict({k: v.to(dtype) for k, v in tensors.items()}, assign=True)
    return model.eval().requires_grad_(False)


def _is_conv_weight(model: BigVGAN, key: str) -> bool:
    """Whether `key` is a (weight-normed, in upstream's training form) convolution's weight."""
    if not key.endswith(".weight"):
        return False
    return isinstance(model.get_submodule(key[: -len(".weight")]), (nn.Conv1d, nn.ConvTranspose1d))


__all__ = ["AMPBlock1", "AMPBlock2", "BigVGAN", "BigVGANConfig", "Snake", "SnakeBeta", "checkpoint_layout",
           "load_bigvgan"]


def load_folder(folder, device="cpu") -> BigVGAN:
    """A BigVGAN release folder as nvidia publishes it (config.json and bigvgan_generator.pt)."""
    import json
    from pathlib import Path

    folder = Path(folder)
    try:
        config = BigVGANConfig.from_dict(json.loads((folder / "config.json").read_text(encoding="utf-8")))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"cannot read {folder / 'config.json'} ({error})") from None
    checkpoint = folder / "bigvgan_generator.pt"
    try:
        state = torch.load(str(checkpoint), map_location="cpu", weights_only=True)
    except Exception as error:  # a damaged or foreign file, said in one line
        raise CheckpointError(f"{checkpoint} is not a readable checkpoint ({' '.join(str(error).split())[:160]})") \
            from None
    return load_bigvgan(state, config, device=device, source=str(checkpoint))
