"""F5-TTS checkpoints: upstream's published files (safetensors, or `.pt` with `ema_model_state_dict`
or `model_state_dict`), with their architecture from a config file beside them or from the weights.

A model folder holds one checkpoint, optionally upstream's training YAML (`F5TTS_v1_Base.yaml`, ...)
or a `config.json` with the same `model.arch` entries, optionally a `vocab.txt` (else the vocabulary
upstream ships, which every released model uses), and optionally the Vocos vocoder in `vocos/`.

Shapes give everything but two switches that old and new models share shapes for: whether filler
text positions are masked (`text_mask_padding`) and how many heads RoPE turns (`pe_attn_head`).
Those come from the config file, else from the name (F5TTS_Base: the old model), else v1's values.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from torch import nn

from mizuoto.core.errors import CheckpointError

from .dit import DiT, DiTConfig
from .unett import UNetT, UNetTConfig

SUFFIXES = (".safetensors", ".pt")  # as the engine declares them: the host checks a file's suffix too
ARCHITECTURES = ("auto", "F5TTS_v1_Base", "F5TTS_Base", "E2TTS_Base")
# the switches that shapes cannot tell apart, per released model
SWITCHES = {"F5TTS_v1_Base": dict(text_mask_padding=True, pe_attn_head=None),
            "F5TTS_Base": dict(text_mask_padding=False, pe_attn_head=1),
            "E2TTS_Base": dict(text_mask_padding=False, pe_attn_head=1)}
DROPPED = ("initted", "step", "mel_spec.mel_stft.mel_scale.fb", "mel_spec.mel_stft.spectrogram.window")


def find_checkpoint(source: Path) -> Path:
    if source.is_file():
        return source
    found = sorted(p for p in source.iterdir() if p.suffix.lower() in SUFFIXES and p.is_file())
    if not found:
        raise CheckpointError(f"{source} holds no F5-TTS checkpoint (a {', '.join(SUFFIXES)} file)")
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise CheckpointError(f"{source} holds several checkpoints ({names}); keep one, or pass the file itself")
    return found[0]


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The DiT's weights (keys as in `DiT`), from any of upstream's layouts."""
    if path.suffix.lower() == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            state = load_file(str(path))
        except (SafetensorError, OSError) as exc:
            raise CheckpointError(f"{path} is not a readable safetensors file ({exc})") from None
    else:
        try:
            raw = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
        except Exception as exc:
            raise CheckpointError(f"{path} is not a readable torch checkpoint ({type(exc).__name__})") from None
        state = raw.get("ema_model_state_dict") or raw.get("model_state_dict") if isinstance(raw, dict) else None
        if not isinstance(state, dict):
            raise CheckpointError(f"{path} has neither ema_model_state_dict nor model_state_dict: not an F5-TTS "
                                  f"checkpoint")
    weights = {}
    for key, value in state.items():
        key = key.replace("ema_model.", "")
        if key in DROPPED or key.startswith("mel_spec."):
            continue
        if not key.startswith("transformer."):
            raise CheckpointError(f"{path} has a weight {key!r} outside the transformer: not an F5-TTS checkpoint")
        weights[key[len("transformer."):]] = value
    if backbone(weights) is None or "proj_out.weight" not in weights:
        raise CheckpointError(f"{path} is neither an F5-TTS (DiT) nor an E2-TTS (UNetT) checkpoint (MMDiT models "
                              f"are not supported)")
    return weights


def backbone(weights: dict) -> str | None:
    if "transformer_blocks.0.attn_norm.linear.weight" in weights:
        return "DiT"
    if "layers.0.1.g" in weights:
        return "UNetT"
    return None


def _config_file_arch(folder: Path) -> dict | None:
    """`model.arch` (and the model name) from upstream's YAML or a config.json beside the weights."""
    candidates = [folder / "config.json", *sorted(folder.glob("*.yaml")), *sorted(folder.glob("*.yml"))]
    for path in candidates:
        if not path.is_file():
            continue
        import yaml

        try:
            data = json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())
        except (ValueError, yaml.YAMLError) as exc:
            reason = " ".join(str(exc).split())[:120]
            raise CheckpointError(f"{path} is not readable ({reason}); fix or remove it") from None
        model = (data or {}).get("model") if isinstance(data, dict) else None
        if isinstance(model, dict) and isinstance(model.get("arch"), dict):
            if model.get("backbone", "DiT") not in ("DiT", "UNetT"):
                raise CheckpointError(f"{path} describes a {model['backbone']} model; only DiT (F5-TTS) and UNetT "
                                      f"(E2-TTS) are supported")
            vocoder = (model.get("mel_spec") or {}).get("mel_spec_type", "vocos")
            if vocoder != "vocos":
                raise CheckpointError(f"{path} describes a model for the {vocoder} vocoder; only Vocos models "
                                      f"(mel_spec_type: vocos) are supported")
            return {"name": model.get("name"), **model["arch"]}
    return None


def _named_switches(path: Path, kind: str) -> dict:
    if kind == "UNetT":
        return SWITCHES["E2TTS_Base"]
    name = " ".join(path.parts[-3:])
    if re.search(r"F5-?TTS_Base", name, re.IGNORECASE):
        return SWITCHES["F5TTS_Base"]
    return SWITCHES["F5TTS_v1_Base"]


def _sizes(weights: dict, kind: str) -> dict:
    """What the shapes say: widths, depth, heads, vocabulary, text blocks, qk norm."""
    dim = weights["proj_out.weight"].shape[1]
    dim_head = 2 * weights["rotary_embed.inv_freq"].shape[0]
    blocks = {k.split(".")[2] for k in weights if k.startswith("text_embed.text_blocks.")}
    prefix, attn, ff = ("transformer_blocks", "attn", "ff") if kind == "DiT" else ("layers", "2", "4")
    sizes = dict(
        dim=dim, dim_head=dim_head,
        depth=len({k.split(".")[1] for k in weights if k.startswith(prefix + ".")}),
        heads=weights[f"{prefix}.0.{attn}.to_q.weight"].shape[0] // dim_head,
        ff_mult=weights[f"{prefix}.0.{ff}.ff.0.0.weight"].shape[0] / dim,
        text_dim=weights["text_embed.text_embed.weight"].shape[1],
        text_num_embeds=weights["text_embed.text_embed.weight"].shape[0] - 1,
        conv_layers=len(blocks),
        qk_norm="rms_norm" if f"{prefix}.0.{attn}.q_norm.weight" in weights else None,
        mel_dim=weights["proj_out.weight"].shape[0],
    )
    if sizes["ff_mult"] == int(sizes["ff_mult"]):
        sizes["ff_mult"] = int(sizes["ff_mult"])
    if kind == "DiT":
        sizes["long_skip_connection"] = "long_skip_connection.weight" in weights
    else:
        last = sizes["depth"] - 1
        sizes["skip_connect_type"] = "concat" if f"layers.{last}.0.weight" in weights else "add"
    return sizes


def config_for(weights: dict[str, torch.Tensor], checkpoint: Path,
               architecture: str = "auto") -> DiTConfig | UNetTConfig:
    """The model's configuration: sizes from the shapes, switches as the module docstring says."""
    kind = backbone(weights)
    sizes = _sizes(weights, kind)
    arch = _config_file_arch(checkpoint.parent) if architecture == "auto" else None
    if architecture != "auto":
        if (architecture == "E2TTS_Base") != (kind == "UNetT"):
            raise CheckpointError(f"{checkpoint} holds a {kind} model, not {architecture}; set architecture to auto")
        switches = SWITCHES[architecture]
    elif arch is not None:
        switches = dict(text_mask_padding=arch.get("text_mask_padding", kind == "DiT"),
                        pe_attn_head=arch.get("pe_attn_head", None if kind == "DiT" else 1))
        if kind == "UNetT" and "skip_connect_type" in arch:
            sizes["skip_connect_type"] = arch["skip_connect_type"]
    else:
        switches = _named_switches(checkpoint, kind)
    if kind == "UNetT":
        if arch is not None and arch.get("text_dim") is None:
            sizes["text_dim"] = None  # upstream's default: the mel size (the same number)
        return UNetTConfig(**sizes, **switches)
    return DiTConfig(**sizes, **switches)


def load(source: Path, device, dtype, architecture: str = "auto") -> DiT | UNetT:
    """The flow model of a model folder or checkpoint file, on `device` in `dtype`."""
    path = find_checkpoint(Path(source))
    weights = read_state_dict(path)
    try:
        config = config_for(weights, path, architecture)
    except KeyError as exc:
        raise CheckpointError(f"{path} lacks {exc.args[0]}: not an F5-TTS checkpoint") from None
    with torch.device("meta"):
        model = UNetT(config) if isinstance(config, UNetTConfig) else DiT(config)
    missing, unexpected = _compare(model, weights)
    if missing or unexpected:
        detail = f"missing {missing[0]}" if missing else f"unexpected {unexpected[0]}"
        raise CheckpointError(f"{path} does not fit the {type(model).__name__} it describes ({detail}; "
                              f"{len(missing)} missing, {len(unexpected)} unexpected weights)")
    model = model.to_empty(device=device)
    model.load_state_dict(weights, strict=False)
    model.text_embed.reset_buffers()  # non-persistent: computed, not loaded
    return model.to(dtype).eval()


def _compare(model: nn.Module, weights: dict) -> tuple[list[str], list[str]]:
    expected = set(model.state_dict())
    return sorted(expected - set(weights)), sorted(set(weights) - expected)
