"""Anti-aliased activation: upsample 2x, apply a nonlinearity, low-pass and downsample 2x.

A pointwise nonlinearity such as Snake creates harmonics above the Nyquist frequency of the signal it
is applied to; at the original rate they fold back as aliasing. BigVGAN therefore runs each activation
at twice the rate, between a kaiser-windowed sinc interpolator and a matching low-pass decimator
(the alias-free construction of StyleGAN3, via alias-free-torch).

Exact to seed-vc 0.4.3 `modules/bigvgan/alias_free_activation/torch/` (`filter.py`, `resample.py`,
`act.py`; NVIDIA BigVGAN v2, MIT, itself from alias-free-torch, Apache-2.0; seed-vc is GPL-3.0 code,
read not copied). Only the torch path: upstream's fused CUDA kernel (`use_cuda_kernel=True`) is out of
scope here; it computes the same function with other rounding.

Data flow of `AntiAliasedActivation` over (B, C, T):
    replicate-pad -> depthwise transposed conv with the sinc filter, stride 2, times 2 -> crop to 2T
    -> activation -> replicate-pad -> depthwise conv with the sinc filter, stride 2 -> (B, C, T)

Every filter is a (1, 1, K) buffer named `filter` and kept in the state dict, as upstream keeps it:
a released checkpoint carries the filters it was trained with, and loading takes those (they were
computed by whatever torch built the checkpoint), so the construction here only matters for models
built from scratch. Module attribute names (`act`, `upsample`, `downsample`, `lowpass`, `filter`) are
upstream's, so the keys match its checkpoints.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def kaiser_beta(half_size: int, half_width: float) -> float:
    """Kaiser's window shape parameter for the attenuation a filter of `half_size` taps per side can
    reach with transition band `half_width` (Kaiser's empirical formula, as julius and upstream use it)."""
    attenuation = 2.285 * (half_size - 1) * math.pi * (4 * half_width) + 7.95  # dB
    if attenuation > 50.0:
        return 0.1102 * (attenuation - 8.7)
    if attenuation >= 21.0:
        return 0.5842 * (attenuation - 21) ** 0.4 + 0.07886 * (attenuation - 21.0)
    return 0.0


def kaiser_sinc_filter(cutoff: float, half_width: float, kernel_size: int) -> torch.Tensor:
    """A windowed-sinc low-pass filter of `kernel_size` taps, (1, 1, kernel_size), float32, summing to 1.

    `cutoff` is in cycles per sample (0.5 = Nyquist), `half_width` the half transition band. An even
    size has no centre tap: its taps sit at half-integer times. The float operations and their order
    are upstream's (python floats folded first, then window times sinc), so the taps are its bits."""
    if not 0.0 < cutoff <= 0.5:
        raise ValueError(f"cutoff {cutoff} is outside (0, 0.5]")  # upstream cannot build cutoff 0 either
    half_size = kernel_size // 2
    window = torch.kaiser_window(kernel_size, periodic=False, beta=kaiser_beta(half_size, half_width),
                                 dtype=torch.float32)
    if kernel_size % 2 == 0:
        time = torch.arange(-half_size, half_size) + 0.5
    else:
        time = torch.arange(kernel_size) - half_size
    time = time.to(torch.float32)
    taps = 2 * cutoff * window * torch.sinc(2 * cutoff * time)
    # normalise the DC gain to exactly one tap-sum, or a constant input would leak a small ripple
    taps /= taps.sum()
    return taps.view(1, 1, kernel_size)


class LowPassFilter(nn.Module):
    """Depthwise convolution with a kaiser-sinc filter, replicate-padded to keep length / stride.

    The padding centres the filter: an even kernel leans one tap to the right."""

    def __init__(self, cutoff: float = 0.5, half_width: float = 0.6, stride: int = 1, kernel_size: int = 12):
        super().__init__()
        even = kernel_size % 2 == 0
        self.pad_left = kernel_size // 2 - int(even)
        self.pad_right = kernel_size // 2
        self.stride = stride
        self.register_buffer("filter", kaiser_sinc_filter(cutoff, half_width, kernel_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        channels = x.shape[1]
        x = F.pad(x, (self.pad_left, self.pad_right), mode="replicate")
        # the expanded (stride-0) view, as upstream passes it: the same operands reach the same kernel
        return F.conv1d(x, self.filter.expand(channels, -1, -1), stride=self.stride, groups=channels)


def default_kernel_size(ratio: int) -> int:
    """Six taps per output sample at `ratio`, rounded to even (upstream's default)."""
    return int(6 * ratio // 2) * 2


class Upsampler(nn.Module):
    """Sinc interpolation by an integer `ratio`: (B, C, T) -> (B, C, ratio * T).

    A transposed conv with the low-pass filter (cutoff 0.5 / ratio) inserts the new samples; scaling by
    `ratio` restores the amplitude the zero-stuffing divided away. The input is replicate-padded first
    and the transients at both ends cropped, so edges see a held value rather than silence."""

    def __init__(self, ratio: int = 2, kernel_size: int | None = None):
        super().__init__()
        self.ratio = ratio
        kernel_size = default_kernel_size(ratio) if kernel_size is None else kernel_size
        self.pad = kernel_size // ratio - 1  # input samples of context each side
        self.crop_left = self.pad * ratio + (kernel_size - ratio) // 2
        self.crop_right = self.pad * ratio + (kernel_size - ratio + 1) // 2
        self.register_buffer("filter", kaiser_sinc_filter(0.5 / ratio, 0.6 / ratio, kernel_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        channels = x.shape[1]
        x = F.pad(x, (self.pad, self.pad), mode="replicate")
        x = self.ratio * F.conv_transpose1d(x, self.filter.expand(channels, -1, -1), stride=self.ratio,
                                            groups=channels)
        return x[..., self.crop_left:-self.crop_right]


class Downsampler(nn.Module):
    """Low-pass at 0.5 / ratio and keep every `ratio`-th sample: (B, C, T) -> (B, C, T / ratio)."""

    def __init__(self, ratio: int = 2, kernel_size: int | None = None):
        super().__init__()
        self.ratio = ratio
        kernel_size = default_kernel_size(ratio) if kernel_size is None else kernel_size
        self.lowpass = LowPassFilter(cutoff=0.5 / ratio, half_width=0.6 / ratio, stride=ratio,
                                     kernel_size=kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lowpass(x)


class AntiAliasedActivation(nn.Module):
    """`act` applied at `up_ratio` times the rate, then brought back: upstream's `Activation1d`.
    BigVGAN uses the defaults (2x, 12 taps each way)."""

    def __init__(self, act: nn.Module, up_ratio: int = 2, down_ratio: int = 2, up_kernel_size: int = 12,
                 down_kernel_size: int = 12):
        super().__init__()
        self.act = act
        self.upsample = Upsampler(up_ratio, up_kernel_size)
        self.downsample = Downsampler(down_ratio, down_kernel_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.downsample(self.act(self.upsample(x)))


__all__ = ["AntiAliasedActivation", "Downsampler", "LowPassFilter", "Upsampler", "kaiser_beta", "kaiser_sinc_filter"]
