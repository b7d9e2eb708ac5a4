"""Loading models and running requests, for the CLI and for the ComfyUI nodes alike."""

from . import comfy
from .local import LoadedModel, Speech, load_model, speak

__all__ = ["LoadedModel", "Speech", "comfy", "load_model", "speak"]
