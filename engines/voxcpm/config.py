"""A VoxCPM folder's config.json, read as upstream's pydantic `VoxCPMConfig` reads it.

One file describes both families; its `architecture` picks the model (upstream's `VoxCPM.__init__`):
"voxcpm" is VoxCPM 0.5B and 1.5 (`VoxCPMModel`: the LM and residual hidden states are summed into the
DiT's condition, AudioVAE v1), "voxcpm2" is VoxCPM2 (`VoxCPM2Model`: they are concatenated, a fusion
projection feeds the residual LM, reference-audio voice cloning, AudioVAE v2 with 48 kHz output).

The defaults below are upstream's field defaults for each family, used when a file leaves a field out.
The sub-models (residual LM, local encoder, local DiT) are the LM's config with a few fields replaced,
exactly as upstream derives them; `minicpm.MiniCPMConfig` holds the result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mizuoto.core.errors import CheckpointError

ARCHITECTURES = ("voxcpm", "voxcpm2")

# upstream's VoxCPMConfig field defaults, per family (voxcpm.py / voxcpm2.py)
_DEFAULTS = {
    "voxcpm": {"patch_size": 2, "feat_dim": 64, "residual_lm_num_layers": 6, "scalar_quantization_latent_dim": 256,
               "scalar_quantization_scale": 9, "max_length": 4096, "dtype": "bfloat16"},
    "voxcpm2": {"patch_size": 4, "feat_dim": 64, "residual_lm_num_layers": 8, "scalar_quantization_latent_dim": 512,
                "scalar_quantization_scale": 9, "max_length": 8192, "dtype": "bfloat16"},
}
_SMALL_DEFAULTS = {"hidden_dim": 1024, "ffn_dim": 4096, "num_heads": 16, "num_layers": 4, "kv_channels": None}
DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
          "float32": "float32", "fp32": "float32"}


@dataclass(frozen=True)
class SmallTransformer:
    """The local encoder's or DiT's shape (upstream's VoxCPMEncoderConfig / VoxCPMDitConfig)."""

    hidden_dim: int
    ffn_dim: int
    num_heads: int
    num_layers: int
    kv_channels: int | None


@dataclass(frozen=True)
class VoxCPMConfig:
    architecture: str
    lm: dict[str, Any]  # the raw lm_config (MiniCPMConfig.from_dict reads it)
    patch_size: int
    feat_dim: int
    residual_lm_num_layers: int
    residual_lm_no_rope: bool
    fsq_latent_dim: int
    fsq_scale: int
    encoder: SmallTransformer
    dit: SmallTransformer
    dit_mean_mode: bool
    cfm: dict[str, Any]
    audio_vae: dict[str, Any] | None  # None: the VAE's own defaults
    max_length: int
    dtype: str  # the checkpoint's dtype, which upstream runs in

    @property
    def version(self) -> int:
        return 2 if self.architecture == "voxcpm2" else 1

    @property
    def hidden_size(self) -> int:
        return int(self.lm["hidden_size"])


def _small(raw: Any, what: str) -> SmallTransformer:
    if not isinstance(raw, dict):
        raise CheckpointError(f"config.json: {what} must be an object with hidden_dim, ffn_dim, num_heads, num_layers")
    values = {**_SMALL_DEFAULTS, **{k: raw[k] for k in _SMALL_DEFAULTS if k in raw}}
    return SmallTransformer(**values)


def parse_config(raw: dict, source: str = "config.json") -> VoxCPMConfig:
    architecture = str(raw.get("architecture", "voxcpm")).lower()  # upstream's default is the first family
    if architecture not in ARCHITECTURES:
        raise CheckpointError(f"{source}: architecture {raw.get('architecture')!r} is not a VoxCPM model "
                              f"(expected one of {', '.join(ARCHITECTURES)})")
    for key in ("lm_config", "encoder_config", "dit_config"):
        if not isinstance(raw.get(key), dict):
            raise CheckpointError(f"{source}: missing {key}; is this a VoxCPM model folder?")
    if not isinstance(raw["dit_config"].get("cfm_config"), dict):
        raise CheckpointError(f"{source}: dit_config has no cfm_config; is this a VoxCPM model folder?")
    values = {**_DEFAULTS[architecture], **raw}
    dtype = DTYPES.get(str(values["dtype"]).lower())
    if dtype is None:
        raise CheckpointError(f"{source}: dtype {values['dtype']!r} is not one of {', '.join(sorted(DTYPES))}")
    # v1 keeps the mean-mode flag at the top level, v2 inside dit_config; v1 has no residual NoPE switch
    # (its residual LM copies lm_config's no_rope)
    if architecture == "voxcpm2":
        mean_mode = bool(raw["dit_config"].get("dit_mean_mode", False))
        residual_no_rope = bool(values.get("residual_lm_no_rope", False))
    else:
        mean_mode = bool(values.get("dit_mean_mode", False))
        residual_no_rope = bool(raw["lm_config"].get("no_rope", False))
    vae = raw.get("audio_vae_config")
    return VoxCPMConfig(
        architecture=architecture, lm=dict(raw["lm_config"]), patch_size=int(values["patch_size"]),
        feat_dim=int(values["feat_dim"]), residual_lm_num_layers=int(values["residual_lm_num_layers"]),
        residual_lm_no_rope=residual_no_rope, fsq_latent_dim=int(values["scalar_quantization_latent_dim"]),
        fsq_scale=int(values["scalar_quantization_scale"]), encoder=_small(raw["encoder_config"], "encoder_config"),
        dit=_small(raw["dit_config"], "dit_config"), dit_mean_mode=mean_mode, cfm=dict(raw["dit_config"]["cfm_config"]),
        audio_vae=dict(vae) if isinstance(vae, dict) else None, max_length=int(values["max_length"]), dtype=dtype,
    )


def read_config(folder: Path) -> VoxCPMConfig:
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{folder} has no config.json; point the model at a VoxCPM model folder")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{path} is not readable JSON ({error}); download the model folder again") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path} is not a JSON object; download the model folder again")
    return parse_config(raw, str(path))
