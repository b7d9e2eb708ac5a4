"""The AudioVAE's configuration: the `audio_vae_config` entry of a VoxCPM checkpoint's config.json.

Two generations exist, picked by the checkpoint's `architecture`, not by the entry itself:

- v1 (`"voxcpm"`: VoxCPM 0.5B and 1.5): 16 kHz (0.5B) or 44.1 kHz (1.5) in and out. VoxCPM-0.5B's
  config.json carries no `audio_vae_config`; upstream then builds the class defaults below.
- v2 (`"voxcpm2"`): 16 kHz in, 48 kHz out; the decoder is conditioned on the output sample rate
  (bucketed by `sr_bin_boundaries`). The released VoxCPM2 uses the class defaults.

Upstream reads the entry with pydantic: a missing field takes the class default, an unknown one is
ignored (so a v1 entry naming `out_sample_rate` still decodes at `sample_rate`), and an explicit
`"sr_bin_boundaries": null` turns the sample-rate conditioning off. `from_dict` does the same and
refuses, in one line, values upstream could not build a model from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import ClassVar

from mizuoto.core.errors import CheckpointError

COND_TYPES = ("scale_bias", "scale_bias_init", "add", "concat")


@dataclass(frozen=True)
class AudioVAEConfig:
    """v1. Defaults are upstream's `audiovae.audio_vae.AudioVAEConfig` (VoxCPM-0.5B's VAE)."""

    version: ClassVar[int] = 1

    # encoder: a kernel-7 conv to encoder_dim, then one block per rate, each doubling the width and
    # downsampling by its rate; latent_dim channels per frame out.
    encoder_dim: int = 128
    encoder_rates: tuple[int, ...] = (2, 5, 8, 8)
    latent_dim: int = 64
    # decoder: latent_dim -> decoder_dim, then one block per rate, each halving the width and
    # upsampling by its rate; one channel out.
    decoder_dim: int = 1536
    decoder_rates: tuple[int, ...] = (8, 8, 5, 2)
    depthwise: bool = True  # residual units (and the decoder's first conv) grouped per channel
    sample_rate: int = 16000
    use_noise_block: bool = False  # after each upsampling: x + randn(B, 1, T) * conv1x1(x)

    def __post_init__(self):
        for name in ("encoder_rates", "decoder_rates"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    # -- what the rest of the engine reads -----------------------------------------------------------

    @property
    def encode_sample_rate(self) -> int:
        """The rate `encode` takes audio at."""
        return self.sample_rate

    @property
    def output_sample_rate(self) -> int:
        """The rate `decode` gives audio at."""
        return self.sample_rate

    @property
    def chunk_size(self) -> int:
        """Input samples per latent frame (upstream's `chunk_size` / `hop_length`)."""
        return math.prod(self.encoder_rates)

    @property
    def decode_chunk_size(self) -> int:
        """Output samples per latent frame. Upstream's v1 model has no such attribute and cuts decoded
        audio by `chunk_size`; the two are equal in every released v1 configuration."""
        return math.prod(self.decoder_rates)

    @property
    def conditioned(self) -> bool:
        """Whether the decoder takes the output sample rate (v2 with sr_bin_boundaries)."""
        return False

    # -- reading -------------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: dict | None, source: str = "audio_vae_config"):
        """From the parsed `audio_vae_config` entry; None (no entry) gives the defaults, as upstream."""
        if data is None:
            config = cls()
        else:
            if not isinstance(data, dict):
                raise CheckpointError(f"{source} must be a JSON object, got {type(data).__name__}")
            values = {}
            for f in fields(cls):
                if f.name in data:
                    values[f.name] = _coerce(f.name, data[f.name], cls._kind(f.name), source)
            config = cls(**values)
        config.check(source)
        return config

    @staticmethod
    def _kind(name: str) -> str:
        return {"encoder_rates": "ints", "decoder_rates": "ints", "depthwise": "bool", "use_noise_block": "bool",
                "cond_out_layer": "bool", "cond_type": "str", "sr_bin_boundaries": "ints?"}.get(name, "int")

    def check(self, source: str = "audio_vae_config") -> None:
        """Raise CheckpointError for values upstream's AudioVAE could not be built from (or would build
        into something that cannot run)."""
        problems = []
        for name in ("encoder_dim", "latent_dim", "decoder_dim", "sample_rate"):
            if getattr(self, name) < 1:
                problems.append(f"{name} {getattr(self, name)} (must be at least 1)")
        if not self.decoder_rates:
            problems.append("empty decoder_rates (the decoder needs at least one block)")
        if any(r < 1 for r in self.encoder_rates + self.decoder_rates):
            problems.append("a rate below 1")
        if self.decoder_dim >> len(self.decoder_rates) < 1:
            problems.append(f"decoder_dim {self.decoder_dim} too small to halve {len(self.decoder_rates)} times")
        problems += self._more_problems()
        if problems:
            raise CheckpointError(f"{source} is not usable: {'; '.join(problems)}")

    def _more_problems(self) -> list[str]:
        return []


@dataclass(frozen=True)
class AudioVAEV2Config(AudioVAEConfig):
    """v2. Defaults are upstream's `audiovae.audio_vae_v2.AudioVAEConfig` (the released VoxCPM2's VAE)."""

    version: ClassVar[int] = 2

    decoder_dim: int = 2048
    decoder_rates: tuple[int, ...] = (8, 6, 5, 2, 2, 2)
    out_sample_rate: int = 48000
    # Output-rate conditioning before each decoder block: the rate's bucket (torch.bucketize over these
    # boundaries) picks an embedding row. None: no conditioning (and no sr_cond_model tensors).
    sr_bin_boundaries: tuple[int, ...] | None = (20000, 30000, 40000)
    cond_type: str = "scale_bias"  # scale_bias / scale_bias_init: x * scale + bias; add: x + e; concat
    cond_dim: int = 128  # embedding width for "concat"
    cond_out_layer: bool = False  # Snake + 1x1 conv after the conditioning

    def __post_init__(self):
        super().__post_init__()
        if self.sr_bin_boundaries is not None:
            object.__setattr__(self, "sr_bin_boundaries", tuple(self.sr_bin_boundaries))

    @property
    def output_sample_rate(self) -> int:
        return self.out_sample_rate

    @property
    def conditioned(self) -> bool:
        return self.sr_bin_boundaries is not None

    @property
    def sr_buckets(self) -> int:
        return len(self.sr_bin_boundaries) + 1 if self.sr_bin_boundaries is not None else 0

    def _more_problems(self) -> list[str]:
        problems = []
        if self.out_sample_rate < 1:
            problems.append(f"out_sample_rate {self.out_sample_rate} (must be at least 1)")
        if self.conditioned:
            bounds = self.sr_bin_boundaries
            if any(b < -2 ** 31 or b >= 2 ** 31 for b in bounds):
                problems.append("sr_bin_boundaries outside int32 (upstream stores them as int32)")
            if list(bounds) != sorted(bounds):
                problems.append(f"sr_bin_boundaries {list(bounds)} not ascending (torch.bucketize needs them sorted)")
            if self.cond_type not in COND_TYPES:
                problems.append(f"cond_type {self.cond_type!r} (known: {', '.join(COND_TYPES)})")
            if self.cond_type == "concat" and not self.cond_out_layer:
                problems.append("cond_type 'concat' without cond_out_layer (upstream requires it)")
            if self.cond_type == "concat" and self.cond_dim < 1:
                problems.append(f"cond_dim {self.cond_dim} (must be at least 1)")
        return problems


def audio_vae_config(architecture: str, data: dict | None, source: str = "audio_vae_config") -> AudioVAEConfig:
    """The VAE configuration of a checkpoint whose config.json names `architecture` ("voxcpm" or
    "voxcpm2", any case, as upstream lowercases it; upstream's default when absent is "voxcpm") and
    carries `data` as its audio_vae_config (None when absent)."""
    kinds = {"voxcpm": AudioVAEConfig, "voxcpm2": AudioVAEV2Config}
    architecture = architecture.lower() if isinstance(architecture, str) else architecture
    if architecture not in kinds:
        raise CheckpointError(f"unknown VoxCPM architecture {architecture!r} (known: {', '.join(kinds)})")
    return kinds[architecture].from_dict(data, source)


def _coerce(name: str, value, kind: str, source: str):
    """pydantic's lax reading for the kinds of field the configs have: ints may come as integral floats,
    booleans as 0 / 1."""
    where = f"{source}.{name}"
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise CheckpointError(f"{where} must be an integer, got {value!r}")
        return int(value)
    if kind == "bool":
        if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            return bool(value)
        raise CheckpointError(f"{where} must be true or false, got {value!r}")
    if kind == "str":
        if not isinstance(value, str):
            raise CheckpointError(f"{where} must be a string, got {value!r}")
        return value
    if value is None and kind == "ints?":
        return None
    if not isinstance(value, (list, tuple)):
        raise CheckpointError(f"{where} must be a list of integers, got {value!r}")
    return tuple(_coerce(name, v, "int", source) for v in value)
