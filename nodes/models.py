"""Where a loader finds checkpoints: ComfyUI's models/tts/<engine>/ folder when the host is there."""

from __future__ import annotations

import os

from mizuoto.core.errors import InputError
from mizuoto.engines.spec import EngineSpec

from .types import BUILTIN_WEIGHTS


def _folder_paths():
    try:
        import folder_paths  # ComfyUI's module; absent when the nodes run without the host
    except ImportError:
        return None
    return folder_paths


def choices(spec: EngineSpec) -> list[str]:
    names = [BUILTIN_WEIGHTS] if spec.builtin_weights else []
    fp = _folder_paths()
    if fp is not None:
        for base in fp.get_folder_paths("tts") if "tts" in fp.folder_names_and_paths else []:
            folder = os.path.join(base, spec.id)
            if os.path.isdir(folder):
                names += sorted(f"{spec.id}/{n}" for n in os.listdir(folder)
                                if n.lower().endswith(spec.checkpoint_suffixes))
    return names


def resolve(spec: EngineSpec, choice: str) -> str | None:
    """A loader's model choice -> a checkpoint path, or None for the built-in weights."""
    if choice == BUILTIN_WEIGHTS:
        return None
    if os.path.isabs(choice):
        return choice
    fp = _folder_paths()
    path = fp.get_full_path("tts", choice) if fp is not None else None
    if path is None:
        raise InputError(f"checkpoint '{choice}' was not found in models/tts/{spec.id}/; put it there "
                         f"or pick another one")
    return path
