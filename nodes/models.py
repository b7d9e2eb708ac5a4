"""What a loader lists and loads: models/tts/<engine>/ in ComfyUI (mizuoto.host.catalog), or an absolute
path."""

from __future__ import annotations

from mizuoto.engines.spec import EngineSpec
from mizuoto.host import catalog


def choices(spec: EngineSpec) -> list[str]:
    return catalog.choices(spec)


def resolve(spec: EngineSpec, choice: str) -> str | None:
    """A loader's model choice -> a checkpoint path (downloaded first for a repo), or None for the built-in
    weights; the placeholder of an empty list is a one-line error naming the folder."""
    return catalog.resolve(spec, choice)


def companion_choices(spec: EngineSpec) -> list[str]:
    return catalog.companion_choices(spec)


def resolve_companion(spec: EngineSpec, choice: str | None) -> str:
    return catalog.resolve_companion(spec, choice)


def tooltip(spec: EngineSpec) -> str:
    return f"a model from {catalog.folder(spec)}; put files there and press R to refresh the list"
