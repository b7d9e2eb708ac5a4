"""What `speech_tokenizer/config.json` says about the 12 Hz codec's encoder (the voice-clone side).

The codec's encoder is a transformers `MimiModel` (4.57.3) without its decoder half; its settings are
the `encoder_config` block (a `MimiConfig`: entries left out take MimiConfig's defaults), plus three
top-level entries of the tokenizer (`Qwen3TTSTokenizerV2Config`): how many quantizers the codes keep
(`encoder_valid_num_quantizers`), the samples per code frame used to trim the codes
(`encode_downsample_rate`) and the input rate (`input_sample_rate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from mizuoto.core.errors import CheckpointError

PAD_MODES = ("constant", "replicate", "reflect")


@dataclass(frozen=True)
class MimiEncoderConfig:
    # MimiConfig's fields the encoder uses, with MimiConfig's defaults
    sampling_rate: int = 24000
    frame_rate: float | None = None  # the JSON's "_frame_rate"; None: sampling_rate / frame_size
    audio_channels: int = 1
    hidden_size: int = 512
    num_filters: int = 64
    num_residual_layers: int = 1
    upsampling_ratios: tuple = (8, 6, 5, 4)  # the encoder downsamples by these in reverse order
    kernel_size: int = 7
    last_kernel_size: int = 3
    residual_kernel_size: int = 3
    dilation_growth_rate: int = 2
    use_causal_conv: bool = True
    pad_mode: str = "constant"
    compress: int = 2
    codebook_size: int = 2048
    codebook_dim: int = 256
    num_quantizers: int = 32
    use_conv_shortcut: bool = False
    vector_quantization_hidden_dimension: int = 256
    num_semantic_quantizers: int = 1
    num_hidden_layers: int = 8
    intermediate_size: int = 2048
    num_attention_heads: int = 8
    num_key_value_heads: int = 8
    head_dim: int | None = None  # None: hidden_size // num_attention_heads
    hidden_act: str = "gelu"
    norm_eps: float = 1e-5
    use_streaming: bool = False
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    sliding_window: int = 250  # read, but a whole-reference encode never applies it (see mimi_transformer)
    attention_bias: bool = False
    # Qwen3TTSTokenizerV2Config's entries
    encoder_valid_num_quantizers: int = 16
    encode_downsample_rate: int = 1920
    input_sample_rate: int = 24000

    # -- derived, as MimiConfig derives them --------------------------------------------------------

    @property
    def attention_head_dim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def hop_length(self) -> int:
        """Samples per latent frame of the convolutional encoder (before the transformer)."""
        return math.prod(self.upsampling_ratios)

    @property
    def encodec_frame_rate(self) -> int:
        return math.ceil(self.sampling_rate / self.hop_length)

    @property
    def effective_frame_rate(self) -> float:
        if self.frame_rate is not None:
            return self.frame_rate
        # MimiConfig.frame_size: every stride of the encoder (all 1 but the ratios) times the downsample's 2
        return self.sampling_rate / (self.hop_length * 2)

    @property
    def downsample_kernel(self) -> int:
        return 2 * int(self.encodec_frame_rate / self.effective_frame_rate)

    # -- reading ------------------------------------------------------------------------------------

    @classmethod
    def from_tokenizer_config(cls, data: dict, where: str = "speech_tokenizer/config.json") -> "MimiEncoderConfig":
        """From the whole tokenizer config.json (its `encoder_config` block and top-level entries)."""
        if data.get("model_type") not in (None, "qwen3_tts_tokenizer_12hz"):
            raise CheckpointError(f"{where} describes a {data.get('model_type')!r} codec; only the 12 Hz tokenizer "
                                  f"(qwen3_tts_tokenizer_12hz) has a Mimi encoder")
        encoder = dict(data.get("encoder_config") or {})
        if "_frame_rate" in encoder:
            encoder.setdefault("frame_rate", encoder.pop("_frame_rate"))
        top = {k: data[k] for k in ("encoder_valid_num_quantizers", "encode_downsample_rate", "input_sample_rate")
               if data.get(k) is not None}
        return cls.from_dict({**encoder, **top}, where)

    @classmethod
    def from_dict(cls, data: dict, where: str = "encoder_config") -> "MimiEncoderConfig":
        types = {f.name: f.type for f in fields(cls)}
        values = {}
        try:
            for key, value in data.items():
                if key not in types or value is None:
                    continue
                kind = types[key]
                if key == "upsampling_ratios":
                    value = tuple(int(v) for v in value)
                elif key == "rope_scaling":
                    value = dict(value)
                elif "float" in kind:
                    value = float(value)
                elif kind == "bool":
                    value = bool(value)
                elif "int" in kind:
                    value = int(value)
                else:
                    value = str(value)
                values[key] = value
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"{where} has an unusable value ({' '.join(str(exc).split())[:120]})") from None
        config = cls(**values)
        config.check(where)
        return config

    def check(self, where: str = "encoder_config") -> None:
        if self.audio_channels != 1:
            raise CheckpointError(f"{where}: audio_channels {self.audio_channels}; Qwen3-TTS references are mono")
        if self.pad_mode not in PAD_MODES:
            raise CheckpointError(f"{where}: pad_mode {self.pad_mode!r} is not one of {', '.join(PAD_MODES)}")
        if self.use_streaming and not self.use_causal_conv:
            raise CheckpointError(f"{where}: streaming encoders need causal convolutions (transformers refuses others)")
        if self.use_streaming and self.pad_mode == "reflect":
            raise CheckpointError(f"{where}: streaming encoders cannot use reflect padding (transformers refuses it)")
        if self.hidden_act != "gelu":
            raise CheckpointError(f"{where}: hidden_act {self.hidden_act!r}; only gelu Mimi encoders are supported")
        rope_type = (self.rope_scaling or {}).get("rope_type", (self.rope_scaling or {}).get("type", "default"))
        if rope_type != "default":
            raise CheckpointError(f"{where}: rope_scaling {rope_type!r}; only default RoPE is supported")
        if self.num_attention_heads % self.num_key_value_heads:
            raise CheckpointError(f"{where}: {self.num_attention_heads} attention heads do not share "
                                  f"{self.num_key_value_heads} key/value heads evenly")
        if self.effective_frame_rate == self.encodec_frame_rate:
            raise CheckpointError(f"{where}: the frame rate equals the convolutional rate, so the encoder has no "
                                  f"downsampling layer, which qwen-tts's encode needs")
        if not 0 < self.num_semantic_quantizers < self.num_quantizers:
            raise CheckpointError(f"{where}: num_semantic_quantizers {self.num_semantic_quantizers} must be positive "
                                  f"and below num_quantizers {self.num_quantizers}")
        if not self.num_semantic_quantizers <= self.encoder_valid_num_quantizers <= self.num_quantizers:
            raise CheckpointError(f"{where}: encoder_valid_num_quantizers {self.encoder_valid_num_quantizers} must lie "
                                  f"between num_semantic_quantizers {self.num_semantic_quantizers} and "
                                  f"num_quantizers {self.num_quantizers}")
        if self.encode_downsample_rate <= 0:
            raise CheckpointError(f"{where}: encode_downsample_rate must be positive")
