"""Loading models and running requests, for the CLI and for the ComfyUI nodes alike."""

from . import comfy
from .local import LoadedModel, Speech, convert, load_model, speak

__all__ = ["LoadedModel", "Speech", "comfy", "convert", "load_model", "speak"]
