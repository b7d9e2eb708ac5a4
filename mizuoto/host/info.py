"""LoadedModelInfo: what a model was loaded with, as reported in every output."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class LoadedModelInfo:
    engine: str
    source: str
    device: str
    dtype: str
    attention: str  # the policy name; 'auto' runs every site's reference
    strict: bool
    compile: bool
    cuda_graphs: bool  # the setting
    graphs: bool  # whether CUDA graphs can be used for this model on its device
    fused_projections: bool
    fast: tuple[str, ...]
    load_options: dict[str, Any] = field(default_factory=dict)
    # what the engine's load chose that changes its output and no setting names (the engine state's `details`:
    # CosyVoice's text normaliser, wetext when it is installed)
    details: dict[str, Any] = field(default_factory=dict)

    def report(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "model": self.source,
            "device": self.device,
            "dtype": self.dtype,
            "params": {
                "fast": list(self.fast),
                "compile": self.compile,
                "cuda_graphs": self.cuda_graphs,
                "graphs": self.graphs,
                "fused_projections": self.fused_projections,
                "load_options": dict(self.load_options),
            },
            "details": dict(self.details),
        }
