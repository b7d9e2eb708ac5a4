"""Loading models and running requests, for the CLI and for the ComfyUI nodes alike."""

from .local import LoadedModel, Speech, load_model, speak

__all__ = ["LoadedModel", "Speech", "load_model", "speak"]
