"""Model configuration of the dummy engine."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

PAD, BOS, EOS = 256, 257, 258  # after the 256 byte values


@dataclass(frozen=True)
class DummyConfig:
    vocab_size: int = 259
    dim: int = 64
    heads: int = 4
    layers: int = 2
    mlp_hidden: int = 256
    max_tokens: int = 1024  # longest text in bytes, BOS and EOS included
    harmonics: int = 8
    sample_rate: int = 24000
    frame_ms: int = 10
    min_frames: int = 3  # per token
    max_frames: int = 14
    f0_low: float = 90.0
    f0_high: float = 280.0

    @property
    def hop(self) -> int:
        return self.sample_rate * self.frame_ms // 1000

    @property
    def frame_params(self) -> int:
        # f0, energy, noise, duration, then one weight per harmonic
        return 4 + self.harmonics

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "DummyConfig":
        return cls(**json.loads(text))


def small(**changes) -> DummyConfig:
    """The configuration tests use (also the built-in default)."""
    return DummyConfig(**changes)
