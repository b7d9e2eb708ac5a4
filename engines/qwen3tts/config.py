"""What a Qwen3-TTS model folder says about generation: `config.json` and `generation_config.json`.

`config.json` (`model_type: qwen3_tts`) describes the talker (the Qwen3 decoder that draws codebook 0
of each 12.5 Hz frame), its code predictor (a small Qwen3 decoder that draws codebooks 1..15 of the
same frame), and the control ids that frame a request. Missing entries take upstream's own defaults
(qwen_tts `Qwen3TTSTalkerConfig`, `Qwen3TTSTalkerCodePredictorConfig`, `Qwen3TTSConfig`), so a folder
reads here as upstream reads it. The speaker encoder and the codec are other modules' business.

`generation_config.json` holds the sampling defaults as plain JSON; a request's own value wins over
the file, and the file over upstream's hard defaults (`Qwen3TTSModel._merge_generate_kwargs`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from mizuoto.core.errors import CheckpointError
from mizuoto.nn.qwen import QwenConfig

MODEL_KINDS = ("base", "custom_voice", "voice_design")


@dataclass(frozen=True)
class DecoderShape:
    """The Qwen3 decoder stack of the talker or the predictor (transformers' Qwen3 meanings)."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    attention_bias: bool  # on q, k, v and o alike (Qwen3's attention_bias)
    # the positions the model was trained for (upstream computes RoPE for any position and checks nothing;
    # the engine refuses a prompt that leaves no room within them, and generates as upstream otherwise)
    max_position_embeddings: int = 32768

    def qwen(self) -> QwenConfig:
        return QwenConfig(hidden_size=self.hidden_size, intermediate_size=self.intermediate_size,
                          num_layers=self.num_layers, num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
                          head_dim=self.head_dim, rope_theta=self.rope_theta, rms_norm_eps=self.rms_norm_eps,
                          qk_norm=True, qkv_bias=self.attention_bias, o_bias=self.attention_bias, vocab_size=None)


@dataclass(frozen=True)
class PredictorConfig:
    """The code predictor: codebooks 1..num_code_groups-1, one embedding table (in the talker's width)
    and one head per codebook; `vocab_size` codes each."""

    decoder: DecoderShape
    vocab_size: int = 2048
    num_code_groups: int = 32  # upstream's default; released models have 16


@dataclass(frozen=True)
class TalkerConfig:
    """The talker: codebook 0 plus the control codes, over text embeddings projected to its width."""

    decoder: DecoderShape
    predictor: PredictorConfig
    vocab_size: int = 3072  # codec ids: codebook 0 (first 2048), control codes, speakers, languages
    text_vocab_size: int = 151936
    text_hidden_size: int = 2048
    num_code_groups: int = 32  # codebooks per frame; upstream's default, released models have 16
    codec_eos_token_id: int = 4198
    codec_think_id: int = 4202
    codec_nothink_id: int = 4203
    codec_think_bos_id: int = 4204
    codec_think_eos_id: int = 4205
    codec_pad_id: int = 4196
    codec_bos_id: int = 4197
    spk_id: dict = field(default_factory=dict)  # speaker name (lower case) -> codec id
    spk_is_dialect: dict = field(default_factory=dict)  # speaker -> False or a codec_language_id key
    codec_language_id: dict = field(default_factory=dict)  # language (lower case) -> codec id

    @property
    def suppressed(self) -> tuple[int, ...]:
        """What upstream never lets the talker draw: the top 1024 ids (control codes, speakers,
        languages) except EOS."""
        top = range(self.vocab_size - 1024, self.vocab_size)
        return tuple(i for i in top if i != self.codec_eos_token_id)


@dataclass(frozen=True)
class ModelConfig:
    talker: TalkerConfig
    kind: str = "custom_voice"  # tts_model_type: base (clone), custom_voice (speakers), voice_design
    size: str = ""  # tts_model_size: "0b6" or "1b7"
    tokenizer_type: str = ""  # the codec; only qwen3_tts_tokenizer_12hz is supported
    im_start_token_id: int = 151644
    im_end_token_id: int = 151645
    tts_pad_token_id: int = 151671
    tts_bos_token_id: int = 151672
    tts_eos_token_id: int = 151673

    @property
    def languages(self) -> tuple[str, ...]:
        """What a request may name (lower case): auto, then each language that is not a dialect."""
        return ("auto", *(name for name in self.talker.codec_language_id if "dialect" not in name))

    @property
    def speakers(self) -> tuple[str, ...]:
        return tuple(self.talker.spk_id)


@dataclass(frozen=True)
class GenerationSettings:
    """Sampling of the talker (codebook 0) and of the predictor (`subtalker_*`, codebooks 1..15).
    The talker's repetition penalty sees only the codes drawn so far; it also never stops before two
    frames (min_new_tokens 2, fixed upstream). The predictor has no penalty."""

    do_sample: bool = True
    top_k: int = 50
    top_p: float = 1.0
    temperature: float = 0.9
    repetition_penalty: float = 1.05
    subtalker_dosample: bool = True
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    subtalker_temperature: float = 0.9
    max_new_tokens: int = 2048  # talker draws, EOS included; the frames are at most one fewer

    @classmethod
    def from_dict(cls, data: dict) -> "GenerationSettings":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known and v is not None})

    def with_overrides(self, **values) -> "GenerationSettings":
        """These settings with a request's own values (None: keep)."""
        return replace(self, **{k: v for k, v in values.items() if v is not None})


# --------------------------------------------------------------------------------------------------
# Reading


def _decoder(d: dict, defaults: dict, where: str) -> DecoderShape:
    get = {**defaults, **{k: v for k, v in d.items() if v is not None}}.get
    act = get("hidden_act", "silu")
    if act != "silu":
        raise CheckpointError(f"{where}.hidden_act is {act!r}; only silu models are supported")
    rope = get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise CheckpointError(f"{where}.rope_scaling has rope_type {rope_type!r}; only default RoPE is supported")
    if get("use_sliding_window", False):
        raise CheckpointError(f"{where} uses sliding-window attention, which Qwen3-TTS models do not; "
                              f"set use_sliding_window to false")
    hidden, heads = int(get("hidden_size")), int(get("num_attention_heads"))
    kv_heads = get("num_key_value_heads")
    return DecoderShape(
        hidden_size=hidden, intermediate_size=int(get("intermediate_size")),
        num_layers=int(get("num_hidden_layers")), num_heads=heads,
        num_kv_heads=int(heads if kv_heads is None else kv_heads),
        head_dim=int(get("head_dim") or hidden // heads), rope_theta=float(get("rope_theta")),
        rms_norm_eps=float(get("rms_norm_eps")), attention_bias=bool(get("attention_bias", False)),
        max_position_embeddings=int(get("max_position_embeddings", 32768)))


# upstream's constructor defaults, used for entries a config.json leaves out
_TALKER_DEFAULTS = dict(vocab_size=3072, hidden_size=1024, intermediate_size=2048, num_hidden_layers=20,
                        num_attention_heads=16, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=10000.0)
_PREDICTOR_DEFAULTS = dict(vocab_size=2048, hidden_size=1024, intermediate_size=3072, num_hidden_layers=5,
                           num_attention_heads=16, num_key_value_heads=8, head_dim=128, rms_norm_eps=1e-6,
                           rope_theta=10000.0)


def model_config_from_dict(data: dict, where: str = "config.json") -> ModelConfig:
    """A ModelConfig from config.json's contents; a wrong value is a one-line CheckpointError."""
    if data.get("model_type") not in (None, "qwen3_tts"):
        raise CheckpointError(f"{where} describes a {data.get('model_type')!r} model, not qwen3_tts")
    try:
        t = dict(data.get("talker_config") or {})
        p = dict(t.get("code_predictor_config") or {})
        predictor = PredictorConfig(_decoder(p, _PREDICTOR_DEFAULTS, "code_predictor_config"),
                                    **{k: int(p[k]) for k in ("vocab_size", "num_code_groups") if p.get(k) is not None})
        simple = {f.name for f in fields(TalkerConfig)} - {"decoder", "predictor", "spk_id", "spk_is_dialect",
                                                            "codec_language_id"}
        talker = TalkerConfig(
            _decoder(t, _TALKER_DEFAULTS, "talker_config"), predictor,
            **{k: int(t[k]) for k in simple if t.get(k) is not None},
            spk_id={str(k).lower(): int(v) for k, v in (t.get("spk_id") or {}).items()},
            spk_is_dialect={str(k).lower(): v for k, v in (t.get("spk_is_dialect") or {}).items()},
            codec_language_id={str(k).lower(): int(v) for k, v in (t.get("codec_language_id") or {}).items()})
        ids = {f.name: int(data[f.name]) for f in fields(ModelConfig)
               if f.name.endswith("_token_id") and data.get(f.name) is not None}
        config = ModelConfig(talker, kind=str(data.get("tts_model_type") or ""),
                             size=str(data.get("tts_model_size") or ""),
                             tokenizer_type=str(data.get("tokenizer_type") or ""), **ids)
    except (TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"{where} has an unusable value ({' '.join(str(exc).split())[:120]})") from None
    _check(config, where)
    return config


def _check(config: ModelConfig, where: str) -> None:
    talker = config.talker
    if config.kind not in MODEL_KINDS:
        raise CheckpointError(f"{where} has tts_model_type {config.kind!r}; expected one of {', '.join(MODEL_KINDS)}")
    if config.tokenizer_type not in ("", "qwen3_tts_tokenizer_12hz"):
        raise CheckpointError(f"{where} is for the {config.tokenizer_type} codec; only the 12 Hz models are supported")
    if talker.num_code_groups != talker.predictor.num_code_groups:
        raise CheckpointError(f"{where}: the talker has {talker.num_code_groups} code groups but its code predictor "
                              f"{talker.predictor.num_code_groups}; they must agree")
    if talker.num_code_groups < 2:
        raise CheckpointError(f"{where}: num_code_groups must be at least 2, got {talker.num_code_groups}")
    if talker.vocab_size <= 1024:
        raise CheckpointError(f"{where}: talker vocab_size {talker.vocab_size} leaves nothing to draw below the "
                              f"1024 control ids upstream suppresses")
    for name in ("codec_eos_token_id", "codec_pad_id", "codec_bos_id", "codec_think_id", "codec_nothink_id",
                 "codec_think_bos_id", "codec_think_eos_id"):
        if not 0 <= getattr(talker, name) < talker.vocab_size:
            raise CheckpointError(f"{where}: talker {name} {getattr(talker, name)} is outside its vocabulary of "
                                  f"{talker.vocab_size}")


def read_model_config(folder: str | Path) -> ModelConfig:
    path = Path(folder) / "config.json"
    return model_config_from_dict(_read_json(path), str(path))


def read_generation_settings(folder: str | Path) -> GenerationSettings:
    """generation_config.json's sampling defaults; upstream's hard defaults when the file is absent."""
    path = Path(folder) / "generation_config.json"
    if not path.is_file():
        return GenerationSettings()
    try:
        return GenerationSettings.from_dict(_read_json(path))
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{path} has an unusable value ({exc})") from None


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise CheckpointError(f"{path} does not exist; a Qwen3-TTS model folder holds config.json beside "
                              f"model.safetensors")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{path} is not readable JSON ({' '.join(str(exc).split())[:120]})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} does not hold a JSON object")
    return data


# --------------------------------------------------------------------------------------------------
# A tiny model for tests


def small_config(kind: str = "custom_voice", groups: int = 4, predictor_hidden: int = 32,
                 attention_bias: bool = False) -> dict:
    """config.json of a tiny model (talker 48 wide, 2 layers; predictor `predictor_hidden` wide; text
    vocabulary 200 with the tts ids at 190..192): what tests and parity scripts build, in upstream's
    layout so that upstream's own loader reads it too. The codec vocabulary (1088) exceeds the 1024
    suppressed control ids by the predictor's 64 codes, and every control id lies in the suppressed range."""
    return {
        "model_type": "qwen3_tts", "tts_model_type": kind, "tts_model_size": "1b7",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz", "tts_pad_token_id": 190, "tts_bos_token_id": 191,
        "tts_eos_token_id": 192, "im_start_token_id": 193, "im_end_token_id": 194,
        "speaker_encoder_config": {"mel_dim": 16, "enc_dim": 48, "enc_channels": [32, 32, 32, 32, 96],
                                   "enc_attention_channels": 8, "enc_se_channels": 8, "enc_res2net_scale": 4},
        "talker_config": {
            "vocab_size": 1088, "hidden_size": 48, "intermediate_size": 96, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12, "text_vocab_size": 200,
            "text_hidden_size": 40, "num_code_groups": groups, "rope_theta": 10000.0, "rms_norm_eps": 1e-6,
            "attention_bias": attention_bias, "hidden_act": "silu",
            "rope_scaling": {"rope_type": "default", "mrope_section": [2, 2, 2], "interleaved": True},
            "codec_eos_token_id": 1070, "codec_think_id": 1071, "codec_nothink_id": 1072, "codec_think_bos_id": 1073,
            "codec_think_eos_id": 1074, "codec_pad_id": 1075, "codec_bos_id": 1076,
            "spk_id": {"alice": 1080, "bob": 1081}, "spk_is_dialect": {"alice": False, "bob": "sichuan_dialect"},
            "codec_language_id": {"english": 1082, "chinese": 1083, "sichuan_dialect": 1084},
            "code_predictor_config": {
                "vocab_size": 64, "hidden_size": predictor_hidden, "intermediate_size": 64, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "num_code_groups": groups,
                "rope_theta": 1000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu"},
        },
    }
