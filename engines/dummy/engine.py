"""Loading and speaking for the dummy engine."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from mizuoto.core.options import RuntimeOptions
from mizuoto.runtime.context import RequestContext

from . import checkpoint
from .config import PAD, DummyConfig, small
from .model import DummyModel, init_weights
from .synth import synthesise
from .text import encode

BUILTIN_WEIGHTS_SEED = 0


@dataclass
class DummyLoaded:
    model: DummyModel
    source: str

    @property
    def config(self) -> DummyConfig:
        return self.model.config

    @property
    def device(self) -> torch.device:
        return self.model.head.weight.device


def _empty_model(config: DummyConfig) -> DummyModel:
    # Built on the meta device, so constructing it draws nothing from the global generator.
    with torch.device("meta"):
        model = DummyModel(config)
    model.to_empty(device="cpu")
    model.reset_buffers()
    return model.eval()


def build(config: DummyConfig | None = None, weights_seed: int = BUILTIN_WEIGHTS_SEED) -> DummyModel:
    """A model with weights drawn from `weights_seed` (float32, on the CPU)."""
    model = _empty_model(config or small())
    init_weights(model, weights_seed)
    return model


def save(model: DummyModel, path) -> Path:
    return checkpoint.save(model, path)


def load(source: str | Path | None, device: torch.device, dtype: torch.dtype,
         options: RuntimeOptions) -> DummyLoaded:
    """Load a checkpoint written by `save`, or build the built-in weights when `source` is None."""
    if source is None:
        model = build()
        description = f"built-in weights (seed {BUILTIN_WEIGHTS_SEED})"
    else:
        path = Path(source)
        config, tensors = checkpoint.read(path)
        model = _empty_model(config)
        checkpoint.check_state(model, tensors, path)
        model.load_state_dict(tensors)
        description = str(path)
    # The synthesiser's rate is a load option, not part of the weights.
    rate = options.load_options.get("sample_rate", model.config.sample_rate)
    model.config = replace(model.config, sample_rate=rate)
    return DummyLoaded(model.to(device=device, dtype=dtype), description)


def batch_ids(texts: list[str], config: DummyConfig, device) -> torch.Tensor:
    """Encode texts into one right-padded (B, L) id tensor."""
    encoded = [encode(t, config) for t in texts]
    width = max(len(ids) for ids in encoded)
    return torch.tensor([ids + [PAD] * (width - len(ids)) for ids in encoded], device=device)


def frame_parameters(loaded: DummyLoaded, texts: list[str], ctx: RequestContext) -> list[torch.Tensor]:
    """The model's raw per-token outputs for each text (padding removed)."""
    ids = batch_ids(texts, loaded.config, loaded.device)
    with torch.inference_mode(), ctx.step():
        raw = loaded.model(ids)
    lengths = (ids != PAD).sum(dim=1).tolist()
    return [raw[i, :n] for i, n in enumerate(lengths)]


def speak(loaded: DummyLoaded, text: str, ctx: RequestContext, params: dict) -> tuple[torch.Tensor, int]:
    """Text -> (waveform (channels, samples) float32 on the CPU, sample rate)."""
    (raw,) = frame_parameters(loaded, [text], ctx)
    with torch.inference_mode(), ctx.step():
        wave = synthesise(raw, loaded.config, params["speed"], ctx.generator_for(loaded.device))
    return wave.cpu(), loaded.config.sample_rate
