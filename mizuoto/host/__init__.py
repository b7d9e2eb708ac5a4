"""Loading models and running requests, for the CLI and for the ComfyUI nodes alike."""

from . import comfy
from .local import ConvertStream, LoadedModel, Speech, convert, convert_stream, load_model, speak

__all__ = ["ConvertStream", "LoadedModel", "Speech", "comfy", "convert", "convert_stream", "load_model", "speak"]
