"""Seed-VC v2's length regulators: content tokens embedded and (for the CFM) stretched to the mel frame count.

Exact to seed-vc 0.4.3 `modules/v2/length_regulator.py::InterpolateRegulator` (GPL-3.0 code, read not copied), as
configs/v2/vc_wrapper.yaml builds it twice: `cfm_length_regulator` (wide codes, sampling ratios [1, 1, 1, 1]:
stretched to the mel's frames) and `ar_length_regulator` (narrow codes, no sampling ratios: the AR's condition,
one vector per token).

Data flow of `RegulatorV2.forward(x, ylens (B,) or None)`:
  discrete ids (B, T_in) -> embedding, or continuous features (B, T_in, in_channels) -> content_in_proj;
  with sampling ratios: nearest interpolation to max(ylens) frames, [Conv1d k3 -> GroupNorm -> Mish] per ratio,
  frames past each ylens zeroed; without: the T_in vectors as they are (ylens is not read);
  -> (B, frames, channels) (a 1x1 conv to out_channels last when those differ; the yaml's never do).

How v2's differs from v1's (mizuoto/nn/length_regulator.py, which this does not reuse for that reason): no 1x1
conv at the end when out_channels == channels (an Identity), and without sampling ratios no mask and no capping of
the lengths. Upstream's `mask_token` (and the embedding of a continuous regulator) is never read: ignored at load.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn.ops import Linear


@dataclass(frozen=True)
class RegulatorV2Config:
    """A vc_wrapper.yaml regulator section (`cfm_length_regulator`, `ar_length_regulator`)."""

    channels: int
    sampling_ratios: tuple = ()
    is_discrete: bool = False
    in_channels: int | None = None
    codebook_size: int = 1024
    out_channels: int | None = None
    groups: int = 1

    def __post_init__(self):
        if not self.is_discrete and not self.in_channels:
            raise CheckpointError("Seed-VC v2 length regulator: a continuous regulator needs in_channels; check "
                                  "the model's vc_wrapper.yaml")
        if self.channels % self.groups:
            raise CheckpointError(f"Seed-VC v2 length regulator: channels {self.channels} is not a multiple of "
                                  f"groups {self.groups}; check the model's vc_wrapper.yaml")

    @property
    def outputs(self) -> int:
        return self.out_channels or self.channels

    @classmethod
    def from_section(cls, section: dict) -> "RegulatorV2Config":
        if not isinstance(section, dict):
            raise CheckpointError("Seed-VC v2 config: a length regulator section is not a mapping; check the "
                                  "model's vc_wrapper.yaml")
        missing = [key for key in ("channels", "sampling_ratios") if key not in section]
        if missing:
            raise CheckpointError(f"Seed-VC v2 config: a length regulator section has no {missing[0]!r}; check the "
                                  f"model's vc_wrapper.yaml")
        if section.get("f0_condition"):
            raise CheckpointError("Seed-VC v2 length regulator: f0_condition is not supported (no v2 config uses "
                                  "it); set it to false in the model's vc_wrapper.yaml")
        try:
            return cls(channels=int(section["channels"]), sampling_ratios=tuple(section["sampling_ratios"] or ()),
                       is_discrete=bool(section.get("is_discrete", False)),
                       in_channels=None if section.get("in_channels") is None else int(section["in_channels"]),
                       codebook_size=int(section.get("codebook_size", 1024)),
                       out_channels=None if section.get("out_channels") is None else int(section["out_channels"]),
                       groups=int(section.get("groups", 1)))
        except (TypeError, ValueError):
            raise CheckpointError("Seed-VC v2 config: a length regulator section has a value that is not a number; "
                                  "check the model's vc_wrapper.yaml") from None


class RegulatorV2(nn.Module):
    """upstream's InterpolateRegulator at inference. Keys: `embedding.weight` (or `content_in_proj.*`), `model.N.*`
    (conv, GroupNorm, Mish per ratio, then the 1x1 conv when out_channels differs)."""

    def __init__(self, config: RegulatorV2Config):
        super().__init__()
        self.config = config
        channels = config.channels
        layers = []
        for _ in config.sampling_ratios:
            layers += [nn.Conv1d(channels, channels, 3, 1, 1), nn.GroupNorm(config.groups, channels), nn.Mish()]
        layers.append(nn.Conv1d(channels, config.outputs, 1, 1) if config.outputs != channels else nn.Identity())
        self.model = nn.Sequential(*layers)
        if config.is_discrete:
            self.embedding = nn.Embedding(config.codebook_size, channels)
        else:
            self.content_in_proj = Linear(config.in_channels, channels)

    def unused_checkpoint_keys(self) -> tuple[str, ...]:
        """What upstream's regulator holds but never reads here: the mask token, the codebook of a continuous one."""
        return ("mask_token",) if self.config.is_discrete else ("mask_token", "embedding.")

    def forward(self, x: torch.Tensor, ylens: torch.Tensor | None = None) -> torch.Tensor:
        """-> (B, max(ylens), outputs) zeroed past each length with sampling ratios, else (B, T_in, outputs)."""
        config = self.config
        if config.is_discrete:
            if x.dim() not in (2, 3) or x.is_floating_point():
                raise InputError(f"the Seed-VC v2 length regulator takes token ids (batch, tokens), got "
                                 f"{tuple(x.shape)} of {x.dtype}")
            x = self.embedding(x if x.dim() == 2 else x[:, 0])  # (B, codebooks, T): upstream reads the first
        else:
            if x.dim() != 3 or x.shape[-1] != config.in_channels:
                raise InputError(f"the Seed-VC v2 length regulator takes content features (batch, frames, "
                                 f"{config.in_channels}), got {tuple(x.shape)}")
            x = self.content_in_proj(x)
        x = x.transpose(1, 2).contiguous()
        if not config.sampling_ratios:
            return self.model(x).transpose(1, 2).contiguous()
        if ylens is None or ylens.dim() != 1 or ylens.shape[0] != x.shape[0] or ylens.is_floating_point():
            raise InputError(f"this Seed-VC v2 length regulator stretches: it needs ylens, one integer length per "
                             f"batch row ({x.shape[0]}), got {None if ylens is None else tuple(ylens.shape)}")
        frames = int(ylens.max())  # upstream's size=ylens.max() reads it from the device too
        if frames < 1:
            raise InputError(f"the Seed-VC v2 length regulator needs at least one frame, got ylens {frames}")
        keep = (torch.arange(frames, dtype=ylens.dtype, device=ylens.device) < ylens[:, None]).unsqueeze(-1)
        x = F.interpolate(x, size=frames, mode="nearest")
        return self.model(x).transpose(1, 2).contiguous() * keep


def load_regulator(state: dict, config: RegulatorV2Config, device) -> RegulatorV2:
    """A regulator for `config` with upstream's state dict (`net.length_regulator`, its `module.` prefix stripped
    or not), in eval mode on `device`. Every weight it reads must be there with its shape; keys upstream's
    strict=False load would leave unused are ignored as there."""
    module = RegulatorV2(config)
    load_strictly(module, state, module.unused_checkpoint_keys(), "length regulator")
    return module.to(device).eval()


def load_strictly(module: nn.Module, state: dict, unused: tuple[str, ...], what: str,
                  optional: tuple[str, ...] = ()) -> None:
    """`module.load_state_dict(state)` where every key of the module but `optional` is in `state` with its shape
    (one line naming the first few that are not); `unused` prefixes and every other key of `state` ignored, as
    upstream's strict=False load ignores them (its shapes must still agree there: load_state_dict raises)."""
    if not isinstance(state, dict):
        raise CheckpointError(f"the Seed-VC v2 {what} state is not a state dict; check the checkpoint")
    state = {(k[len("module."):] if k.startswith("module.") else k): v for k, v in state.items()}
    expected = module.state_dict()
    present = {k: v for k, v in state.items() if k in expected and not k.startswith(unused)}
    missing = sorted(k for k in expected if k not in present and k not in optional)
    wrong = sorted(k for k, v in present.items() if not isinstance(v, torch.Tensor) or v.shape != expected[k].shape)
    if missing or wrong:
        problem = f"missing {missing[:3]}" if missing else f"shapes differ for {wrong[:3]}"
        raise CheckpointError(f"the Seed-VC v2 {what} checkpoint does not match the config ({problem}); check that "
                              f"vc_wrapper.yaml and the checkpoint belong together")
    module.load_state_dict({**expected, **present}, strict=True)
