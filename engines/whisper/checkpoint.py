"""Whisper checkpoints: openai's `.pt` files and the Hugging Face layout, without either package.

- openai: a torch pickle `{"dims": {...}, "model_state_dict": {...}}` (loaded with weights_only, so a
  checkpoint cannot run code);
- Hugging Face: a folder with `config.json` and `model.safetensors` (or `pytorch_model.bin`), with
  transformers' Whisper parameter names, mapped here to openai's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from mizuoto.core.errors import CheckpointError

from .model import Dims, Whisper, sinusoids

# transformers' names -> openai's, per layer part (after "model.encoder.layers.N." / "model.decoder.layers.N.")
_LAYER_PARTS = {
    "self_attn.q_proj": "attn.query", "self_attn.k_proj": "attn.key", "self_attn.v_proj": "attn.value",
    "self_attn.out_proj": "attn.out", "self_attn_layer_norm": "attn_ln",
    "encoder_attn.q_proj": "cross_attn.query", "encoder_attn.k_proj": "cross_attn.key",
    "encoder_attn.v_proj": "cross_attn.value", "encoder_attn.out_proj": "cross_attn.out",
    "encoder_attn_layer_norm": "cross_attn_ln", "fc1": "mlp.0", "fc2": "mlp.2", "final_layer_norm": "mlp_ln",
}
_TOP = {
    "model.encoder.conv1": "encoder.conv1", "model.encoder.conv2": "encoder.conv2",
    "model.encoder.layer_norm": "encoder.ln_post", "model.decoder.embed_tokens": "decoder.token_embedding",
    "model.decoder.layer_norm": "decoder.ln",
}
_LAYER = re.compile(r"^model\.(encoder|decoder)\.layers\.(\d+)\.(.+)\.(weight|bias)$")


def hf_to_openai(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for name, tensor in state.items():
        name = name.removeprefix("whisper.")  # some exports nest the model one level deeper
        match = _LAYER.match(name)
        if match:
            side, index, part, kind = match.groups()
            if part not in _LAYER_PARTS:
                raise CheckpointError(f"unexpected Whisper parameter {name}")
            out[f"{side}.blocks.{index}.{_LAYER_PARTS[part]}.{kind}"] = tensor
        elif name == "model.decoder.embed_positions.weight":
            out["decoder.positional_embedding"] = tensor
        elif name == "model.encoder.embed_positions.weight":
            out["encoder.positional_embedding"] = tensor
        elif name == "proj_out.weight":
            continue  # tied to the token embedding
        else:
            base, _, kind = name.rpartition(".")
            if base not in _TOP:
                raise CheckpointError(f"unexpected Whisper parameter {name}")
            out[f"{_TOP[base]}.{kind}"] = tensor
    return out


def dims_from_hf(config: dict) -> Dims:
    try:
        return Dims(n_mels=config["num_mel_bins"], n_audio_ctx=config["max_source_positions"],
                    n_audio_state=config["d_model"], n_audio_head=config["encoder_attention_heads"],
                    n_audio_layer=config["encoder_layers"], n_vocab=config["vocab_size"],
                    n_text_ctx=config["max_target_positions"], n_text_state=config["d_model"],
                    n_text_head=config["decoder_attention_heads"], n_text_layer=config["decoder_layers"])
    except KeyError as exc:
        raise CheckpointError(f"config.json is not a Whisper configuration (no {exc.args[0]})") from None


def read(path: str | Path) -> tuple[Dims, dict[str, torch.Tensor], str]:
    """(dims, openai-named state dict, layout) from a `.pt` file or a Hugging Face folder."""
    path = Path(path)
    if path.is_dir():
        config_path = path / "config.json"
        if not config_path.is_file():
            raise CheckpointError(f"{path} has no config.json; give a Whisper .pt file or a Hugging Face folder")
        config = json.loads(config_path.read_text())
        if config.get("model_type") not in (None, "whisper"):
            raise CheckpointError(f"{path} holds a {config.get('model_type')} model, not Whisper")
        weights = sorted(path.glob("*.safetensors"))
        if weights:
            from safetensors.torch import load_file

            state = {}
            for file in weights:
                state.update(load_file(str(file)))
        elif (path / "pytorch_model.bin").is_file():
            state = torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)
        else:
            raise CheckpointError(f"{path} has no model.safetensors or pytorch_model.bin")
        return dims_from_hf(config), hf_to_openai(state), "huggingface"
    if not path.is_file():
        raise CheckpointError(f"Whisper checkpoint {path} does not exist")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a pickle torch refuses, a truncated file: all the same to the user
        raise CheckpointError(f"{path} is not a readable Whisper checkpoint ({type(exc).__name__})") from None
    if not isinstance(data, dict) or "dims" not in data or "model_state_dict" not in data:
        raise CheckpointError(f"{path} is not an openai-whisper checkpoint (no dims / model_state_dict)")
    return Dims(**data["dims"]), data["model_state_dict"], "openai"


def load(path: str | Path, device="cpu", dtype=torch.float32) -> Whisper:
    dims, state, _ = read(path)
    with torch.device("meta"):
        model = Whisper(dims)
    model.to_empty(device="cpu")
    state = dict(state)
    # The encoder's positions are fixed sinusoids; HF files store them, openai files do too (a buffer).
    state.setdefault("encoder.positional_embedding", sinusoids(dims.n_audio_ctx, dims.n_audio_state))
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if m != "decoder.mask"]
    if missing or unexpected:
        raise CheckpointError(f"{path} does not match Whisper {dims}: missing {missing[:3]}, "
                              f"unexpected {unexpected[:3]}")
    with torch.no_grad():
        model.decoder.mask.copy_(torch.empty_like(model.decoder.mask).fill_(-float("inf")).triu_(1))
    return model.to(device=device, dtype=dtype).eval()
