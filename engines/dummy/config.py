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
    min_frames: int = 2  # per code
    max_frames: int = 8
    f0_low: float = 90.0
    f0_high: float = 280.0
    # The autoregressive code decoder (a tiny Qwen3 on the shared QwenDecoder)
    codes: int = 64  # acoustic codebook; decoder ids: codes, then EOS_CODE, then START_CODE
    decoder_layers: int = 2
    decoder_heads: int = 4
    decoder_kv_heads: int = 2
    decoder_head_dim: int = 16
    decoder_mlp: int = 128
    min_codes_per_byte: int = 1
    max_codes_per_byte: int = 3

    @property
    def eos_code(self) -> int:
        return self.codes

    @property
    def start_code(self) -> int:
        return self.codes + 1

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
