"""Whisper checkpoints: openai's `.pt` files and the Hugging Face layout, without either package.

- openai: a torch pickle `{"dims": {...}, "model_state_dict": {...}}` (loaded with weights_only, so a
  checkpoint cannot run code);
- Hugging Face: a folder with `config.json` and `model.safetensors` (or `pytorch_model.bin`), with
  transformers' Whisper parameter names, mapped here to openai's.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from mizuoto.core.errors import CheckpointError
from mizuoto.nn.whisper_encoder import Dims, dims_from_hf, hf_to_openai, sinusoids

from .model import Whisper


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
