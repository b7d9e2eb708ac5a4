"""RuntimeOptions: the settings one model load runs with, read afresh at every load.

A change to a settings file or an environment variable therefore affects the models loaded after
it, never a model already loaded (its CUDA graphs and compiled modules were built for the old ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from .settings import Settings


@dataclass(frozen=True)
class RuntimeOptions:
    engine: str
    attention: str
    compile: bool
    cuda_graphs: bool
    fast: tuple[str, ...]
    load_options: Mapping[str, Any]

    @classmethod
    def read(cls, engine: str, settings: Settings) -> "RuntimeOptions":
        return cls(
            engine=engine,
            attention=settings[f"engines.{engine}.attention"],
            compile=settings["compute.compile"],
            cuda_graphs=settings["compute.cuda_graphs"],
            fast=settings["compute.fast"],
            load_options=MappingProxyType(settings.under(f"engines.{engine}.load_options")),
        )

    def report(self) -> dict[str, Any]:
        """The JSON-able form listed in run reports."""
        return {
            "attention": self.attention,
            "compile": self.compile,
            "cuda_graphs": self.cuda_graphs,
            "fast": list(self.fast),
            "load_options": dict(self.load_options),
        }
