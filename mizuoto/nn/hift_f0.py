"""HiFT's F0 predictor: a mel spectrogram -> one pitch value (Hz) per frame.

Exact to seed-vc 0.4.3 `modules/hifigan/f0_predictor.py` (`ConvRNNF0Predictor`, from CosyVoice; the
same class in CosyVoice 2); GPL-3.0 code, read not copied. Despite upstream's name there is no RNN:

    mel (B, in_channels, T) -> 5 x [conv k3 (weight-normed in checkpoints) -> ELU] -> (B, cond, T)
        -> per frame Linear(cond -> num_class) -> squeeze -> |.|  -> f0 (B, T) in Hz

The module keeps upstream's parameter names (`condnet.{0,2,4,6,8}`, `classifier`), so a HiFT checkpoint's
`f0_predictor.*` tensors load as they are once their weight norm is folded (hift.load_hift does that).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn import ops

CONV_LAYERS = 5  # upstream's condnet: five conv + ELU pairs


@dataclass(frozen=True)
class F0PredictorConfig:
    """The `f0_predictor` section of seed-vc's configs/hifigan.yml (CosyVoice's yaml has the same fields);
    defaults are upstream's."""

    num_class: int = 1
    in_channels: int = 80
    cond_channels: int = 512

    def __post_init__(self):
        for name in ("num_class", "in_channels", "cond_channels"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CheckpointError(f"f0_predictor.{name} must be a positive integer, got {value!r}")

    @classmethod
    def from_dict(cls, data) -> F0PredictorConfig:
        """From the yaml section (a mapping); missing fields take upstream's defaults, unknown ones are refused
        (upstream's constructor would raise on them)."""
        if not isinstance(data, dict):
            raise CheckpointError(f"the f0_predictor config must be a mapping, got {type(data).__name__}")
        unknown = sorted(set(data) - {"num_class", "in_channels", "cond_channels"})
        if unknown:
            raise CheckpointError(f"the f0_predictor config has an unknown field {unknown[0]!r}")
        return cls(**data)


class F0Predictor(nn.Module):
    """Upstream's ConvRNNF0Predictor with plain (folded) convolution weights."""

    def __init__(self, config: F0PredictorConfig = F0PredictorConfig()):
        super().__init__()
        self.config = config
        layers: list[nn.Module] = []
        for index in range(CONV_LAYERS):
            width_in = config.in_channels if index == 0 else config.cond_channels
            layers += [nn.Conv1d(width_in, config.cond_channels, kernel_size=3, padding=1), nn.ELU()]
        # Sequential indices 0, 2, 4, 6, 8 hold the convs, as in upstream's state dict.
        self.condnet = nn.Sequential(*layers)
        # ops.Linear: the per-frame input is a transposed (non-contiguous) view, where F.linear rounds
        # differently depending on whether parameters require grad; ops.Linear takes upstream's route.
        self.classifier = ops.Linear(config.cond_channels, config.num_class)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """mel (B, in_channels, T) -> f0 (B, T) in Hz (non-negative); (B, T, num_class) when num_class > 1."""
        if mel.dim() != 3 or mel.shape[1] != self.config.in_channels:
            raise InputError(f"the F0 predictor takes a mel of shape (batch, {self.config.in_channels}, frames), "
                             f"got {tuple(mel.shape)}")
        hidden = self.condnet(mel).transpose(1, 2)  # (B, T, cond): one row per frame
        return torch.abs(self.classifier(hidden).squeeze(-1))
