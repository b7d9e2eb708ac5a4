"""The settings in force now: every engine's declaration, the settings file and the environment."""

from __future__ import annotations

import os
from typing import Any, Mapping

from mizuoto import engines
from mizuoto.core import settings as core_settings


def current(file: str | os.PathLike | None = None,
            overrides: Mapping[str, Any] | None = None) -> core_settings.Settings:
    """Read afresh on every call, so a model load always sees the latest file and environment."""
    return core_settings.load(engines.settings_schema(), file=file, environ=os.environ,
                              overrides=overrides)
