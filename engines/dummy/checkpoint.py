"""Dummy checkpoints: safetensors files that carry the engine id and the configuration."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from mizuoto.core.errors import CheckpointError
from mizuoto.core.files import atomic_write

from .config import DummyConfig
from .model import DummyModel

ENGINE_KEY, CONFIG_KEY, FORMAT_KEY = "mizuoto.engine", "mizuoto.config", "mizuoto.format"
FORMAT = "2"  # 2: the autoregressive code decoder


def save(model: DummyModel, path: str | os.PathLike) -> Path:
    """Write `model` to `path` atomically: a failed write leaves no file behind."""
    from safetensors.torch import save_file

    path = Path(path)
    if not path.parent.is_dir():
        raise CheckpointError(f"folder {path.parent} does not exist; create it first")
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in model.state_dict().items()}
    metadata = {ENGINE_KEY: "dummy", CONFIG_KEY: model.config.to_json(), FORMAT_KEY: FORMAT}
    return atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata=metadata))


def read(path: str | os.PathLike) -> tuple[DummyConfig, dict[str, torch.Tensor]]:
    """Read and check a checkpoint; every problem is a one-line CheckpointError."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"model file {path} does not exist")
    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            tensors = {name: f.get_tensor(name) for name in f.keys()}
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path} is not a readable safetensors file ({exc})") from None
    engine = metadata.get(ENGINE_KEY)
    if engine != "dummy":
        owner = f"belongs to engine '{engine}'" if engine else "is not a Mizuoto dummy checkpoint"
        raise CheckpointError(f"{path} {owner}; load it with the engine it was made for")
    if metadata.get(FORMAT_KEY) != FORMAT:
        raise CheckpointError(f"{path} has checkpoint format {metadata.get(FORMAT_KEY)!r}; "
                              f"this Mizuoto reads format {FORMAT}")
    try:
        config = DummyConfig.from_json(metadata[CONFIG_KEY])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path} has no usable configuration ({exc})") from None
    return config, tensors


def check_state(model: DummyModel, tensors: dict[str, torch.Tensor], path: Path) -> None:
    expected = model.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise CheckpointError(f"{path} does not match the dummy model: missing {missing[:3]}, "
                              f"unexpected {unexpected[:3]}")
    for name, tensor in tensors.items():
        if tensor.shape != expected[name].shape:
            raise CheckpointError(f"{path}: tensor {name} has shape {tuple(tensor.shape)}, "
                                  f"the model needs {tuple(expected[name].shape)}")
