"""The ComfyUI host adapter: progress, interruption and model folders, or their standalone stand-ins.

Nodes talk to the host only through this module. Every function looks the host up when called (never
at import: `mizuoto` must import without ComfyUI), and behaves like the standalone CLI when ComfyUI
is not in the process.
"""

from __future__ import annotations

import os
import sys
from typing import Callable

MODELS_FOLDER = "tts"  # models/tts/<engine>/


def present() -> bool:
    """Whether this process is a ComfyUI host (its modules are already imported)."""
    return "comfy.model_management" in sys.modules and "folder_paths" in sys.modules


def _module(name: str):
    return sys.modules.get(name) if present() else None


# -- progress and interruption ---------------------------------------------------------------------------

def progress(node_id: str | None = None) -> Callable[[int, int], None]:
    """A callback `(done, total)` that moves the node's progress bar.

    In ComfyUI every update is also an interruption point: the host's progress hook raises its
    InterruptProcessingException when Cancel was pressed, which stops generation between two steps.
    Standalone it only checks nothing and returns.
    """
    utils = _module("comfy.utils")
    if utils is None or not hasattr(utils, "ProgressBar"):
        return lambda done, total: None
    bars: dict[int, object] = {}

    def update(done: int, total: int) -> None:
        bar = bars.get(total)
        if bar is None:
            bar = bars[total] = utils.ProgressBar(total, node_id=node_id) if node_id is not None \
                else utils.ProgressBar(total)
        bar.update_absolute(done, total)

    return update


def interrupted() -> Callable[[], None]:
    """A check that raises the host's own interruption exception when Cancel was pressed."""
    management = _module("comfy.model_management")
    check = getattr(management, "throw_exception_if_processing_interrupted", None)
    return check if check is not None else (lambda: None)


# -- model folders ------------------------------------------------------------------------------------------

def register_model_folder() -> str | None:
    """Register `models/tts` with ComfyUI's folder_paths (users' extra_model_paths.yaml entries named
    `tts` add to it). Returns the default folder, or None without ComfyUI."""
    fp = _module("folder_paths")
    if fp is None:
        return None
    default = os.path.join(fp.models_dir, MODELS_FOLDER)
    if MODELS_FOLDER not in fp.folder_names_and_paths:
        fp.folder_names_and_paths[MODELS_FOLDER] = ([default], set(fp.supported_pt_extensions))
    elif default not in fp.folder_names_and_paths[MODELS_FOLDER][0]:
        fp.folder_names_and_paths[MODELS_FOLDER][0].append(default)
    return default


def model_folders() -> list[str]:
    """Every folder ComfyUI knows for `tts`, default first; empty without ComfyUI."""
    fp = _module("folder_paths")
    if fp is None or MODELS_FOLDER not in fp.folder_names_and_paths:
        return []
    return list(fp.get_folder_paths(MODELS_FOLDER))


def full_path(relative: str) -> str | None:
    fp = _module("folder_paths")
    return fp.get_full_path(MODELS_FOLDER, relative) if fp is not None else None


def default_model_folder(engine_id: str) -> str:
    """Where a user puts an engine's checkpoints: ComfyUI's models/tts/<engine>, or ./models/tts/<engine>."""
    folders = model_folders()
    base = folders[0] if folders else os.path.join("models", MODELS_FOLDER)
    return os.path.join(base, engine_id)


# -- model management -----------------------------------------------------------------------------------

def soft_empty_cache() -> None:
    """Give freed device memory back (ComfyUI's own helper when present)."""
    management = _module("comfy.model_management")
    if management is not None and hasattr(management, "soft_empty_cache"):
        management.soft_empty_cache()
        return
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def managed(module, device):
    """Hand a loaded model to ComfyUI's model management (a ModelPatcher), so that ComfyUI can move it
    off the GPU to make room for other models and `POST /free` unloads it. None when there is no host
    or the model runs on the CPU (nothing to manage)."""
    import torch

    patcher_module = sys.modules.get("comfy.model_patcher") if present() else None
    management = _module("comfy.model_management")
    if patcher_module is None or management is None or torch.device(device).type == "cpu":
        return None
    size = sum(t.numel() * t.element_size() for t in (*module.parameters(), *module.buffers()))
    return patcher_module.ModelPatcher(module, load_device=torch.device(device),
                                       offload_device=management.unet_offload_device(), size=size)


def ensure_loaded(patcher) -> None:
    """Before a request: have ComfyUI put the whole model back on its device (evicting others if it
    must). A model ComfyUI moved away comes back at new addresses, so its CUDA graphs are recaptured
    (ModelHandle compares weight signatures)."""
    if patcher is None:
        return
    management = _module("comfy.model_management")
    if management is not None:
        management.load_models_gpu([patcher], force_full_load=True)
