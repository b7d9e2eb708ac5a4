"""Shared test setup: no test reads the developer's own settings or MIZUOTO_* environment."""

import os
import sys
from pathlib import Path

import pytest

from mizuoto.runtime.accel import dispatch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/helpers.py
import helpers  # noqa: E402,F401  (reads its MIZUOTO_PARITY_* settings before tests clear MIZUOTO_*)

# Small-engine tests run with the dispatcher's DEBUG checks: every call that passes a mask_info has it
# compared with its dense mask.
dispatch.DEBUG = True


def pytest_sessionfinish(session, exitstatus):
    """With MIZUOTO_TEST_ACCEL=count, fail the run when a declared attention site of an engine never
    went through the dispatcher (a call site that bypasses accel.attention, or an untested one)."""
    if helpers.PARITY_CENSUS:  # census.py write reads how each set was compared
        import json

        census = helpers.parity_module("census")
        (Path(helpers.PARITY_CENSUS) / census.MODES_FILE).write_text(json.dumps(helpers.PARITY_MODES))
    if not dispatch.COUNT:
        return
    from mizuoto import engines
    from mizuoto.runtime.accel import REGISTRY

    for spec in engines.all_engines().values():
        spec.implementation_module()  # declares the engine's sites
    # Sites of the engines and of the shared blocks they run on (the Qwen decoder).
    shipped = ("mizuoto.engines.", "mizuoto.nn.")
    declared = {name for name, site in REGISTRY.items() if site.declared_in.startswith(shipped)}
    missing = sorted(declared - dispatch.SEEN)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if missing:
        reporter.write_line(f"\nMIZUOTO_TEST_ACCEL=count: attention sites never dispatched: {', '.join(missing)}",
                            red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    else:
        reporter.write_line(f"\nMIZUOTO_TEST_ACCEL=count: all {len(declared)} engine attention sites dispatched")


def pytest_terminal_summary(terminalreporter):
    """Say how each stored reference set was compared (tests/parity/README.md): exactly against the committed
    files, exactly against a set written here by upstream, or within the fallback's tolerances."""
    from helpers import PARITY_MODES

    if PARITY_MODES:
        terminalreporter.write_sep("-", "parity references")
        for name, mode in sorted(PARITY_MODES.items()):
            terminalreporter.write_line(f"{name}: {mode}")


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
