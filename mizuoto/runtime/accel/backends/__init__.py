"""Every attention backend, by name, in one registry.

The order of REGISTRY is the order policies and the doctor list them. Importing this package does
not import torch or any optional kernel package.
"""

from __future__ import annotations

from .base import Backend

REGISTRY: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    if backend.name in REGISTRY:
        raise ValueError(f"attention backend '{backend.name}' is registered twice")
    REGISTRY[backend.name] = backend
    return backend


def get(name: str) -> Backend:
    return REGISTRY[name]


# Each module registers its backends: torch's own first, so REGISTRY's order is the settings' order.
from . import sdpa  # noqa: E402,F401,I001
from . import optional  # noqa: E402,F401
