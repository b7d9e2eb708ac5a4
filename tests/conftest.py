"""Shared test setup: no test reads the developer's own settings or MIZUOTO_* environment."""

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _isolated_settings(monkeypatch, tmp_path_factory):
    for name in list(os.environ):
        if name.startswith("MIZUOTO_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def python() -> str:
    return sys.executable
