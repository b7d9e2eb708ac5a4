"""The 12 Hz codec decoder's configuration, read from `speech_tokenizer/config.json`.

The file is upstream's `Qwen3TTSTokenizerV2Config` (model_type `qwen3_tts_tokenizer_12hz`): top-level
rates plus an `encoder_config` (a transformers MimiConfig, unused here) and a `decoder_config`. A field
missing from `decoder_config` takes the default of upstream's `Qwen3TTSTokenizerV2DecoderConfig`, as
transformers would fill it in; `codebook_dim` has no default there (upstream fails without it), and
`head_dim` falls back to hidden_size // num_attention_heads.

The released tokenizer's decoder_config also carries `num_semantic_quantizers` (1),
`semantic_codebook_size` (4096), `vector_quantization_hidden_dimension` (512) and
`max_position_embeddings` (8000): upstream's decoder reads none of them (one semantic quantizer and
`codebook_size` entries per codebook are built in), and neither does this port.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from pathlib import Path

from mizuoto.core.errors import CheckpointError

MODEL_TYPE = "qwen3_tts_tokenizer_12hz"
SUPPORTED_ACTIVATIONS = ("silu", "swish")


@dataclass(frozen=True)
class CodecDecoderConfig:
    """Defaults are upstream's class defaults; `released()` gives Qwen3-TTS-Tokenizer-12Hz's values."""

    # codes -> vectors: num_quantizers codebooks of codebook_size entries, each codebook_dim // 2 wide,
    # summed per group (1 semantic + the rest) and projected to codebook_dim by a 1x1 conv per group.
    codebook_size: int = 2048
    num_quantizers: int = 16
    codebook_dim: int = 512
    # pre_conv (kernel 3) widens codebook_dim to latent_dim, the width the transformer reads and writes
    # and the upsampling stage (ConvTranspose + ConvNeXt per ratio) works at.
    latent_dim: int = 1024
    # the transformer: hidden_size wide inside, num_hidden_layers layers, sliding-window attention
    # over the last `sliding_window` frames, RoPE with rope_theta, SwiGLU MLP of intermediate_size.
    hidden_size: int = 1024
    num_hidden_layers: int = 8
    num_attention_heads: int = 16
    num_key_value_heads: int = 16
    head_dim: int | None = None  # None: hidden_size // num_attention_heads
    intermediate_size: int = 3072
    hidden_act: str = "silu"
    attention_bias: bool = False
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    sliding_window: int = 72
    # upsampling: each ratio a causal ConvTranspose (kernel = stride = ratio) at latent_dim; then a
    # kernel-7 conv to decoder_dim and one SnakeBeta decoder block per rate, each halving the width.
    upsampling_ratios: tuple[int, ...] = (2, 2)
    upsample_rates: tuple[int, ...] = (8, 5, 4, 3)
    decoder_dim: int = 1536
    # top level of config.json
    output_sample_rate: int = 24000
    decode_upsample_rate: int = 1920  # samples per frame kept per utterance by the batch decode

    def __post_init__(self):
        if self.head_dim is None:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        object.__setattr__(self, "upsampling_ratios", tuple(int(r) for r in self.upsampling_ratios))
        object.__setattr__(self, "upsample_rates", tuple(int(r) for r in self.upsample_rates))

    @property
    def samples_per_frame(self) -> int:
        """Output samples per code frame: the product of every upsampling factor (1920 released)."""
        return math.prod(self.upsample_rates + self.upsampling_ratios)

    @classmethod
    def released(cls) -> "CodecDecoderConfig":
        """Qwen/Qwen3-TTS-Tokenizer-12Hz (and every 12Hz model's speech_tokenizer/) as published."""
        return cls(codebook_size=2048, num_quantizers=16, codebook_dim=512, latent_dim=1024, hidden_size=512,
                   num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=16, head_dim=64,
                   intermediate_size=1024, rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=72,
                   upsampling_ratios=(2, 2), upsample_rates=(8, 5, 4, 3), decoder_dim=1536)

    @classmethod
    def from_dict(cls, data: dict, source: str = "config.json") -> "CodecDecoderConfig":
        """From the parsed config.json (the whole file, with decoder_config inside)."""
        if not isinstance(data, dict):
            raise CheckpointError(f"{source} is not a JSON object")
        model_type = data.get("model_type")
        if model_type != MODEL_TYPE:
            raise CheckpointError(f"{source} describes a {model_type!r} model, not the 12 Hz speech tokenizer "
                                  f"({MODEL_TYPE}); only 12 Hz Qwen3-TTS models are supported")
        decoder = data.get("decoder_config")
        if not isinstance(decoder, dict):
            raise CheckpointError(f"{source} has no decoder_config")
        if "codebook_dim" not in decoder:
            raise CheckpointError(f"{source} decoder_config lacks codebook_dim")
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in decoder.items() if k in known}
        for key in ("output_sample_rate", "decode_upsample_rate"):
            if key in data:
                values[key] = data[key]
        rope = decoder.get("rope_scaling")
        if isinstance(rope, dict) and rope.get("rope_type", rope.get("type", "default")) != "default":
            raise CheckpointError(f"{source} asks for {rope.get('rope_type', rope.get('type'))!r} RoPE scaling; "
                                  f"only the default RoPE is supported")
        try:
            config = cls(**values)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"{source} decoder_config is not usable ({exc})") from None
        config.check(source)
        return config

    def check(self, source: str = "config") -> None:
        """Raise CheckpointError for values upstream's decoder could not be built from."""
        problems = []
        if self.hidden_act not in SUPPORTED_ACTIVATIONS:
            problems.append(f"hidden_act {self.hidden_act!r} (supported: {', '.join(SUPPORTED_ACTIVATIONS)})")
        if self.num_quantizers < 2:
            problems.append(f"num_quantizers {self.num_quantizers} (needs at least 2: 1 semantic + acoustic)")
        if self.num_attention_heads % self.num_key_value_heads:
            problems.append(f"{self.num_attention_heads} attention heads for {self.num_key_value_heads} "
                            f"key/value heads")
        if self.head_dim % 2 or self.codebook_dim % 2:
            problems.append(f"odd head_dim {self.head_dim} or codebook_dim {self.codebook_dim}")
        if self.sliding_window < 1 or min(self.upsample_rates + self.upsampling_ratios, default=1) < 1:
            problems.append("a sliding window or an upsampling factor below 1")
        if self.decoder_dim >> len(self.upsample_rates) < 1:
            problems.append(f"decoder_dim {self.decoder_dim} too small for {len(self.upsample_rates)} blocks")
        if problems:
            raise CheckpointError(f"{source} decoder_config is not usable: {'; '.join(problems)}")


def read_config(folder: Path) -> CodecDecoderConfig:
    path = folder / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{folder} has no config.json: not a Qwen3-TTS speech tokenizer folder")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{path} is not readable JSON ({' '.join(str(exc).split())[:120]})") from None
    return CodecDecoderConfig.from_dict(data, str(path))
