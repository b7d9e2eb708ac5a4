"""The s2mel length regulator: content features stretched to the mel frame count, with an optional F0 embedding.

Exact to seed-vc 0.4.3 `modules/length_regulator.py::InterpolateRegulator` (GPL-3.0 code, read not copied), as
`modules/commons.py::build_model` builds it (one codebook, no vector quantiser: no preset uses either). IndexTTS 2's
s2mel uses the same module.

Data flow of `LengthRegulator.forward(x, ylens (B,), f0 (B, T_f0) or None)`:
  continuous x (B, T_in, in_channels) -> content_in_proj, or discrete ids -> embedding: (B, T_in, channels);
  nearest interpolation to max(ylens) frames (when there are sampling ratios);
  with f0_condition: + the embedding of the coarse F0 bins (nearest-interpolated the same way), or + f0_mask
  when no F0 is given;
  [Conv1d k3 -> GroupNorm -> Mish] per sampling ratio -> Conv1d 1x1;
  -> (B, max(ylens), channels), frames past each ylens zeroed; and the lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn.ops import Linear

# seed-vc's mel-scale F0 range, `1127 * np.log(1 + f / 700)` for f = 50 and 1100 Hz, as the float64 values numpy
# computes (written out so the bins never depend on this machine's log; the writer checks them against numpy).
F0_MEL_MIN = 77.75496616579427  # (math.log gives ...426 here: one ulp apart)
F0_MEL_MAX = 1064.4082331636394


@dataclass(frozen=True)
class RegulatorConfig:
    """model_params.length_regulator, as build_model reads it."""

    channels: int
    sampling_ratios: tuple = (1, 1, 1, 1)
    is_discrete: bool = False
    in_channels: int | None = None
    content_codebook_size: int = 1024
    f0_condition: bool = False
    n_f0_bins: int = 512

    def __post_init__(self):
        if not self.is_discrete and not self.in_channels:
            raise CheckpointError("s2mel length_regulator: a continuous regulator needs in_channels; "
                                  "check the model's config")

    @classmethod
    def from_model_params(cls, model_params: dict) -> "RegulatorConfig":
        section = model_params.get("length_regulator") if isinstance(model_params, dict) else None
        if not isinstance(section, dict):
            raise CheckpointError("s2mel config: model_params has no 'length_regulator' section; "
                                  "check the model's config")
        missing = [k for k in ("channels", "sampling_ratios", "is_discrete", "content_codebook_size")
                   if k not in section]
        if missing:
            raise CheckpointError(f"s2mel config: model_params.length_regulator has no {missing[0]!r}; "
                                  f"check the model's config")
        if section.get("vector_quantize"):
            raise CheckpointError("s2mel length_regulator: vector_quantize is not supported (build_model never "
                                  "builds it); check the model's config")
        in_channels = section.get("in_channels")
        return cls(channels=int(section["channels"]), sampling_ratios=tuple(section["sampling_ratios"]),
                   is_discrete=bool(section["is_discrete"]),
                   in_channels=None if in_channels is None else int(in_channels),
                   content_codebook_size=int(section["content_codebook_size"]),
                   f0_condition=bool(section.get("f0_condition", False)),
                   n_f0_bins=int(section.get("n_f0_bins", 512)))


def coarse_f0(f0: torch.Tensor, bins: int) -> torch.Tensor:
    """F0 in Hz -> int64 bins in [0, bins), as seed-vc's `f0_to_coarse`: the mel value mapped linearly so that
    50 Hz lands on 1 and 1100 Hz on bins - 1, rounded; anything below 1 (unvoiced 0 Hz included) becomes 1, and
    anything at or above `bins` becomes 0 (upstream zeroes it before its own clip can apply)."""
    mel = 1127 * (1 + f0 / 700).log()
    slope = (bins - 2) / (F0_MEL_MAX - F0_MEL_MIN)
    offset = F0_MEL_MIN * slope - 1.0
    mel = torch.where(mel > 0, mel * slope - offset, mel)
    coarse = torch.round(mel).long().clamp(min=1)
    return torch.where(coarse < bins, coarse, torch.zeros_like(coarse))


class LengthRegulator(nn.Module):
    """seed-vc's InterpolateRegulator at inference. Keys: `content_in_proj.*` (or `embedding.weight`),
    `model.N.*` (conv, GroupNorm, Mish per ratio, then the 1x1 conv), `f0_embedding.weight`, `f0_mask`."""

    def __init__(self, config: RegulatorConfig):
        super().__init__()
        self.config = config
        channels = config.channels
        layers = []
        for _ in config.sampling_ratios:
            layers += [nn.Conv1d(channels, channels, 3, 1, 1), nn.GroupNorm(1, channels), nn.Mish()]
        layers.append(nn.Conv1d(channels, channels, 1, 1))
        self.model = nn.Sequential(*layers)
        if config.is_discrete:
            self.embedding = nn.Embedding(config.content_codebook_size, channels)
        else:
            self.content_in_proj = Linear(config.in_channels, channels)
        if config.f0_condition:
            self.f0_embedding = nn.Embedding(config.n_f0_bins, channels)
            self.f0_mask = nn.Parameter(torch.zeros(1, channels))

    def unused_checkpoint_keys(self) -> tuple[str, ...]:
        """What upstream's regulator holds but never reads here (dropped at load): the mask token, and the
        codebook of a continuous regulator."""
        return ("mask_token",) if self.config.is_discrete else ("mask_token", "embedding.")

    def forward(self, x: torch.Tensor, ylens: torch.Tensor, f0: torch.Tensor | None = None):
        """-> (features (B, max(ylens), channels) zeroed past each length, lengths (B,))."""
        config = self.config
        if ylens.dim() != 1 or ylens.shape[0] != x.shape[0] or ylens.is_floating_point():
            raise InputError(f"ylens must be one integer length per batch row ({x.shape[0]}), got shape "
                             f"{tuple(ylens.shape)} of {ylens.dtype}")
        if config.is_discrete:
            x = self.embedding(x if x.dim() == 2 else x[:, 0])
        else:
            if x.dim() != 3 or x.shape[-1] != config.in_channels:
                raise InputError(f"the length regulator takes content features (batch, frames, "
                                 f"{config.in_channels}), got shape {tuple(x.shape)}")
            x = self.content_in_proj(x)
        frames = int(ylens.max())  # upstream's size=ylens.max() reads it from the device too
        keep = (torch.arange(frames, dtype=ylens.dtype, device=ylens.device) < ylens[:, None]).unsqueeze(-1)
        x = x.transpose(1, 2).contiguous()
        if config.sampling_ratios:
            x = F.interpolate(x, size=frames, mode="nearest")
        elif frames < x.shape[2]:  # upstream's mask would not broadcast either
            raise InputError(f"this length regulator does not stretch: the longest ylens ({frames}) must be at "
                             f"least the content's {x.shape[2]} frames")
        else:  # no stretching: the lengths are capped at the input's
            keep = keep[:, : x.shape[2], :]
            ylens = ylens.clamp(max=x.shape[2]).long()
            frames = min(frames, x.shape[2])  # (the F0 embedding is stretched to the capped lengths)
        if config.f0_condition:
            if f0 is None:
                x = x + self.f0_mask.unsqueeze(-1)
            else:
                bins = coarse_f0(f0, config.n_f0_bins)
                f0_embedded = self.f0_embedding(bins).transpose(1, 2).contiguous()
                x = x + F.interpolate(f0_embedded, size=frames, mode="nearest")
        return self.model(x).transpose(1, 2).contiguous() * keep, ylens
