"""UnifiedVoice v2's conditioning (upstream's indextts/gpt/model_v2.py at ee40fa7, `condition_type
"conformer_perceiver"`): what the GPT's prompt starts with.

    speaker:  features (B, T, 1024) -> conditioning_encoder (Conformer) -> (B, T', D_c), mask (B, 1, T')
              -> perceiver_encoder(model_dim, 32 latents; key mask = 32 Trues + the frame mask)      (B, 32, model_dim)
    emotion:  features -> emo_conditioning_encoder -> emo_perceiver_encoder(1024, 1 latent)          (B, 1024)
              -> emovec_layer (1024 -> model_dim) -> emo_layer (model_dim -> model_dim)            (B, model_dim)
    merge:    base + alpha * (emo - base), base = the emotion path run on the speaker's features  (merge_emovec)
    prefix:   [speaker latents + emovec, speed_emb(1), speed_emb(0)]                              (B, 34, model_dim)

Upstream's get_conditioning, get_emo_conditioning, get_emovec, merge_emovec and the `conds_latent` of
inference_speech. infer_v2 passes the lengths `infer_v2_lengths` builds (1024 per row: every frame valid), and
always an emotion vector (merge_emovec's) to inference_speech; its positional call puts the emotion features in
`langs`, so inference_speech's own fallback (no emotion vector) would take the speaker's features: `prefix(speaker(f),
emovec(f))`.

Attribute and parameter names are upstream's (gpt.pth's `conditioning_encoder.`, `perceiver_encoder.`,
`emo_conditioning_encoder.`, `emo_perceiver_encoder.`, `emovec_layer.`, `emo_layer.`, `speed_emb.`), so gpt.pth's
subset with those prefixes loads strictly (`PREFIXES`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from mizuoto.core.errors import InputError

from .conformer import ConformerConfig, ConformerEncoder, infer_v2_lengths
from .perceiver import PerceiverConfig, PerceiverResampler

__all__ = ["PREFIXES", "ConditionModule", "Conditioning", "ConditioningConfig", "infer_v2_lengths"]

PREFIXES = ("conditioning_encoder", "perceiver_encoder", "speed_emb", "emo_conditioning_encoder",
            "emo_perceiver_encoder", "emo_layer", "emovec_layer")
FEATURES = 1024  # w2v-BERT's width: hard-coded upstream (the Conformers' input, emovec_layer, the emo perceiver)


@dataclass(frozen=True)
class ConditionModule:
    """config.yaml's gpt.condition_module / gpt.emo_condition_module."""

    output_size: int = 512
    linear_units: int = 2048
    attention_heads: int = 8
    num_blocks: int = 6
    input_layer: str = "conv2d2"
    perceiver_mult: float = 2

    @classmethod
    def from_dict(cls, values: dict) -> "ConditionModule":
        unknown = set(values) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown condition_module keys: {', '.join(sorted(unknown))}")
        return cls(**values)

    def conformer(self) -> ConformerConfig:
        return ConformerConfig(FEATURES, self.output_size, self.attention_heads, self.linear_units, self.num_blocks,
                               self.input_layer)


@dataclass(frozen=True)
class ConditioningConfig:
    model_dim: int = 1280
    condition_module: ConditionModule = field(default_factory=ConditionModule)
    emo_condition_module: ConditionModule = field(
        default_factory=lambda: ConditionModule(512, 1024, 4, 4, "conv2d2", 2))
    condition_num_latent: int = 32


class Conditioning(nn.Module):
    def __init__(self, config: ConditioningConfig = ConditioningConfig()):
        super().__init__()
        self.config = config
        spk, emo, dim = config.condition_module, config.emo_condition_module, config.model_dim
        self.conditioning_encoder = ConformerEncoder(spk.conformer())
        self.perceiver_encoder = PerceiverResampler(PerceiverConfig(
            dim, spk.output_size, config.condition_num_latent, spk.attention_heads, spk.perceiver_mult))
        self.speed_emb = nn.Embedding(2, dim)
        self.emo_conditioning_encoder = ConformerEncoder(emo.conformer())
        self.emo_perceiver_encoder = PerceiverResampler(PerceiverConfig(
            FEATURES, emo.output_size, 1, emo.attention_heads, emo.perceiver_mult))
        self.emo_layer = nn.Linear(dim, dim)
        self.emovec_layer = nn.Linear(FEATURES, dim)

    @staticmethod
    def _lengths(features: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
        return infer_v2_lengths(features) if lengths is None else lengths

    def speaker(self, features: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """get_conditioning: features (B, T, 1024) -> (B, 32, model_dim). `lengths` None: infer_v2's."""
        frames, mask = self.conditioning_encoder(features, self._lengths(features, lengths))
        keys = torch.cat((mask.new_ones(mask.shape[0], self.config.condition_num_latent), mask[:, 0]), dim=1)
        return self.perceiver_encoder(frames, keys)

    def emotion(self, features: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """get_emo_conditioning: features (B, T, 1024) -> (B, 1024)."""
        frames, mask = self.emo_conditioning_encoder(features, self._lengths(features, lengths))
        keys = torch.cat((mask.new_ones(mask.shape[0], 1), mask[:, 0]), dim=1)
        return self.emo_perceiver_encoder(frames, keys).squeeze(1)

    def emovec(self, features: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """get_emovec: the emotion path through emovec_layer and emo_layer -> (B, model_dim)."""
        return self.emo_layer(self.emovec_layer(self.emotion(features, lengths)))

    def merge_emovec(self, speaker: torch.Tensor, emotion: torch.Tensor, speaker_lengths: torch.Tensor | None = None,
                     emotion_lengths: torch.Tensor | None = None, alpha: float = 1.0) -> torch.Tensor:
        """merge_emovec: base + alpha * (emo - base), base the emotion vector of the speaker's own features."""
        emo = self.emovec(emotion, emotion_lengths)
        base = self.emovec(speaker, speaker_lengths)
        return base + alpha * (emo - base)

    def prefix(self, speaker_latents: torch.Tensor, emovec: torch.Tensor) -> torch.Tensor:
        """inference_speech's conds_latent: (B, 32, D) latents + (B, D) emovec -> (B, 34, D), the speed rows
        speed_emb(1) then speed_emb(0)."""
        dim = self.config.model_dim
        if speaker_latents.dim() != 3 or speaker_latents.size(-1) != dim or emovec.shape != (
                speaker_latents.size(0), dim):
            raise InputError(f"the GPT prompt takes speaker latents (batch, latents, {dim}) and an emotion vector "
                             f"(batch, {dim}), got {tuple(speaker_latents.shape)} and {tuple(emovec.shape)}")
        rows = torch.zeros(speaker_latents.size(0), dtype=torch.long, device=speaker_latents.device)
        speed, speed_half = self.speed_emb(rows), self.speed_emb(torch.ones_like(rows))
        return torch.cat((speaker_latents + emovec.unsqueeze(1), speed_half.unsqueeze(1), speed.unsqueeze(1)), 1)
