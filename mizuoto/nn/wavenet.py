"""The WaveNet stack (WN) that ends the s2mel DiT, its reflect-padded convolution, and weight-norm folding.

Exact to seed-vc 0.4.3 `modules/wavenet.py::WN` with `modules/encodec.py::SConv1d` and
`modules/commons.py::fused_add_tanh_sigmoid_multiply` (GPL-3.0 code, read not copied). IndexTTS 2's s2mel
uses the same stack.

Data flow of `WaveNet.forward(x (B, H, T), mask (B, 1, T), g (B, G, 1))`:
  g -> cond_layer (1x1) -> one (2H)-channel slice per layer;
  per layer: x -> in_layer (kernel k, reflect padded) + its g slice -> tanh(first H) * sigmoid(last H)
  -> res_skip_layer (1x1) -> the first H channels update x (masked), the rest add to the skip sum;
  the last layer's res_skip output is all skip. Output: the skip sum, masked.

Two upstream details that decide the numbers:
- `WN` passes `padding=...` to `SConv1d`, which swallows it in `**kwargs`: the convolution itself has no
  padding, and `SConv1d` pads with *reflection* (its default `pad_mode`), left and right halves of
  `(kernel - 1) * dilation` (the left gets the odd one), with zeros appended first when the input is too short
  to reflect (`pad1d`). `ReflectPadConv1d` does exactly that.
- Every convolution is weight-normed (`torch.nn.utils.weight_norm`, checkpoint keys `weight_g` / `weight_v`).
  Upstream recomputes `torch._weight_norm(weight_v, weight_g, 0)` before every call; the same op on the same
  tensors gives the same bits, so `fold_weight_norm` computes it once at load and the modules hold a plain
  `weight`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# The two spellings of a weight-normed weight: torch.nn.utils.weight_norm (what seed-vc trains with) and
# torch.nn.utils.parametrizations.weight_norm (a checkpoint re-saved from a newer torch).
LEGACY = ("weight_g", "weight_v")
PARAMETRIZED = ("parametrizations.weight.original0", "parametrizations.weight.original1")


def fold_weight_norm(state: dict, dtype: torch.dtype = torch.float32) -> dict:
    """`state` with every weight-normed pair (magnitude g, direction v) replaced by its `weight`,
    computed as upstream computes it before each call: torch._weight_norm(v, g, dim=0), on g and v in the
    model's `dtype` (upstream's load_state_dict casts them into its parameters first)."""
    out = dict(state)
    for magnitude_name, direction_name in (LEGACY, PARAMETRIZED):
        for key in [k for k in state if k.endswith(magnitude_name)]:
            base = key[: -len(magnitude_name)]
            direction = state.get(base + direction_name)
            if direction is None:
                continue
            magnitude = out.pop(key)
            out.pop(base + direction_name)
            out[base + "weight"] = torch._weight_norm(direction.to(dtype), magnitude.to(dtype), 0)
    return out


def reflect_pad(x: torch.Tensor, left: int, right: int) -> torch.Tensor:
    """encodec's `pad1d(mode='reflect')`: reflection needs more samples than the padding, so a short input
    first gets zeros appended (as many as reflection needs), is reflected, and the appended zeros' share of
    the result is cut off again."""
    length = x.shape[-1]
    widest = max(left, right)
    appended = widest - length + 1 if length <= widest else 0
    if appended:
        x = F.pad(x, (0, appended))
    padded = F.pad(x, (left, right), "reflect")
    return padded[..., : padded.shape[-1] - appended] if appended else padded


class ConvHolder(nn.Module):
    """encodec's `NormConv1d` level (its norm is an Identity here): kept so the keys read `conv.conv.*`."""

    def __init__(self, conv: nn.Conv1d):
        super().__init__()
        self.conv = conv


class ReflectPadConv1d(nn.Module):
    """encodec's non-causal, stride-1 `SConv1d`: a Conv1d without padding of its own, the input reflected by
    (kernel - 1) * dilation frames, split with the odd frame on the left."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1):
        super().__init__()
        self.conv = ConvHolder(nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation))
        total = (kernel_size - 1) * dilation  # stride 1: the output keeps the input's length
        self.pad_right = total // 2
        self.pad_left = total - self.pad_right

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv.conv(reflect_pad(x, self.pad_left, self.pad_right))


def zero_pad_conv1d(in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1) -> nn.Conv1d:
    """VITS's own WN convolution: zero padding of int((k * d - d) / 2) on both sides, plain `weight`/`bias` keys."""
    return nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation,
                     padding=int((kernel_size * dilation - dilation) / 2))


class WaveNet(nn.Module):
    """The WN stack (non-causal; dropout is identity at inference), each `weight` folded from `weight_g/_v`.
    `padding="reflect"`: seed-vc's, keys `cond_layer.conv.conv.*`, `in_layers.N.conv.conv.*`,
    `res_skip_layers.N.conv.conv.*`. `padding="zeros"`: VITS's own (GPT-SoVITS' `module/modules.py::WN`), plain
    nn.Conv1d keys `in_layers.N.*`; the same gate and sums otherwise."""

    def __init__(self, hidden_channels: int, kernel_size: int, dilation_rate: int, n_layers: int,
                 gin_channels: int = 0, padding: str = "reflect"):
        super().__init__()
        if kernel_size % 2 != 1:
            raise ValueError(f"the WaveNet kernel size must be odd, got {kernel_size}")
        if padding not in ("reflect", "zeros"):
            raise ValueError(f"the WaveNet padding is 'reflect' or 'zeros', got {padding!r}")
        conv = ReflectPadConv1d if padding == "reflect" else zero_pad_conv1d
        self.hidden_channels = hidden_channels
        self.n_layers = n_layers
        if gin_channels:
            self.cond_layer = conv(gin_channels, 2 * hidden_channels * n_layers, 1)
        self.in_layers = nn.ModuleList(
            conv(hidden_channels, 2 * hidden_channels, kernel_size, dilation=dilation_rate ** i)
            for i in range(n_layers))
        # Every layer but the last returns a residual half and a skip half; the last only skip channels.
        self.res_skip_layers = nn.ModuleList(
            conv(hidden_channels, 2 * hidden_channels if i < n_layers - 1 else hidden_channels, 1)
            for i in range(n_layers))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, g: torch.Tensor | None = None) -> torch.Tensor:
        hidden = self.hidden_channels
        skip = torch.zeros_like(x)  # upstream sums onto zeros (0 + -0.0 is +0.0: kept for the same bits)
        if g is not None:
            g = self.cond_layer(g)
        for i, (in_layer, res_skip_layer) in enumerate(zip(self.in_layers, self.res_skip_layers, strict=True)):
            x_in = in_layer(x)
            g_in = torch.zeros_like(x_in) if g is None else g[:, i * 2 * hidden:(i + 1) * 2 * hidden, :]
            if torch.is_autocast_enabled(x_in.device.type):
                # upstream's gate is a TorchScript function, and under autocast a scripted function computes in
                # float32 from float32 copies of its inputs (measured: bit for bit), where eager code would stay
                # in float16; its float32 output then feeds the next (autocast) convolution
                x_in, g_in = x_in.float(), g_in.float()
            pre = x_in + g_in  # upstream adds even a zero conditioning (it turns -0.0 into +0.0)
            gated = torch.tanh(pre[:, :hidden, :]) * torch.sigmoid(pre[:, hidden:, :])
            res_skip = res_skip_layer(gated)
            if i < self.n_layers - 1:
                x = (x + res_skip[:, :hidden, :]) * mask
                skip = skip + res_skip[:, hidden:, :]
            else:
                skip = skip + res_skip
        return skip * mask
