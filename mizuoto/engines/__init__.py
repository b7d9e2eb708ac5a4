"""The engine registry: every engine package and its declaration, found without importing torch.

Engines are written as top-level packages under `engines/` in the repository and reached as
`mizuoto.engines.<id>`. A wheel installs them there directly; in a clone (a ComfyUI custom_nodes
checkout or an editable install) this package's search path is extended to the clone's `engines/`
folder. Either way `engines` itself never becomes an importable top-level name.

An engine is a package with a `declaration` module holding `ENGINE`, an `EngineSpec`.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from mizuoto.core.errors import InputError
from mizuoto.core.settings import Schema

from .spec import EngineSpec, Param

__all__ = ["EngineSpec", "Param", "all_engines", "get", "ids", "of_kind", "settings_schema"]


def _clone_engines_dir() -> Path | None:
    # This file is <root>/mizuoto/engines/__init__.py. In a clone <root> holds pyproject.toml and
    # the engines/ folder; in site-packages it holds neither (and an unrelated top-level
    # `engines` folder there must not be picked up), so both are required.
    root = Path(__file__).resolve().parents[2]
    folder = root / "engines"
    return folder if (root / "pyproject.toml").is_file() and folder.is_dir() else None


_clone = _clone_engines_dir()
if _clone is not None and str(_clone) not in __path__:
    __path__.append(str(_clone))

_SPECS: dict[str, EngineSpec] | None = None


def all_engines() -> dict[str, EngineSpec]:
    """Every engine's declaration by id, discovered once."""
    global _SPECS
    if _SPECS is None:
        specs = {}
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
            if not info.ispkg:
                continue
            try:
                declaration = importlib.import_module(f"{__name__}.{info.name}.declaration")
            except ModuleNotFoundError as exc:
                if exc.name == f"{__name__}.{info.name}.declaration":
                    continue  # a helper package, not an engine
                raise
            spec = declaration.ENGINE
            if spec.id != info.name:
                raise RuntimeError(f"engine package {info.name} declares id {spec.id!r}; they must match")
            specs[spec.id] = spec
        _SPECS = specs
    return _SPECS


def ids() -> tuple[str, ...]:
    return tuple(all_engines())


def of_kind(kind: str) -> dict[str, EngineSpec]:
    """The engines that speak (SPEAK) or that transcribe (TRANSCRIBE)."""
    return {i: spec for i, spec in all_engines().items() if spec.kind == kind}


def get(engine_id: str) -> EngineSpec:
    try:
        return all_engines()[engine_id]
    except KeyError:
        raise InputError(f"unknown engine '{engine_id}'; available engines: {', '.join(ids())}") from None


def settings_schema() -> Schema:
    return Schema.build(spec.settings() for spec in all_engines().values())
