"""Where a loader finds checkpoints: models/tts/<engine>/ in ComfyUI, or an absolute path."""

from __future__ import annotations

import os

from mizuoto.core.errors import InputError
from mizuoto.engines.spec import EngineSpec
from mizuoto.host import comfy, download

from .types import BUILTIN_WEIGHTS


def choices(spec: EngineSpec) -> list[str]:
    names = [BUILTIN_WEIGHTS] if spec.builtin_weights else []
    names += [download.choice_for(repo) for repo in spec.repos]
    for base in comfy.model_folders():
        folder = os.path.join(base, spec.id)
        if os.path.isdir(folder):
            # files with the engine's suffixes, and model folders (Hugging Face's with a config.json, or
            # a folder holding such a file, as F5-TTS's are published)
            names += sorted(f"{spec.id}/{n}" for n in os.listdir(folder)
                            if n.lower().endswith(spec.checkpoint_suffixes)
                            or _is_model_folder(os.path.join(folder, n), spec))
    return names


def _is_model_folder(path: str, spec: EngineSpec) -> bool:
    if not os.path.isdir(path):
        return False
    return os.path.isfile(os.path.join(path, "config.json")) or any(
        n.lower().endswith(spec.checkpoint_suffixes) for n in os.listdir(path))


def resolve(spec: EngineSpec, choice: str) -> str | None:
    """A loader's model choice -> a checkpoint path, or None for the built-in weights."""
    if choice == BUILTIN_WEIGHTS:
        return None
    if download.is_choice(choice):
        base = (comfy.model_folders() or [os.path.dirname(comfy.default_model_folder(spec.id))])[0]
        return str(download.fetch(spec.id, download.repo_of(choice), base))
    if os.path.isabs(choice):
        return choice
    path = comfy.full_path(choice)
    if path is None:  # a Hugging Face folder: folder_paths resolves files only
        path = next((os.path.join(base, choice) for base in comfy.model_folders()
                     if os.path.isdir(os.path.join(base, choice))), None)
    if path is None:
        raise InputError(f"checkpoint '{choice}' was not found in {comfy.default_model_folder(spec.id)}; "
                         f"put it there or pick another one")
    return path
