"""The doctor's JSON keeps its keys and adds each engine's models and each optional kernel once; the Doctor
node sends its summary to the front end; GET /mizuoto/doctor?format=readable carries the dialog's sections.
The attention probe (a child process, seconds) is replaced by a fixed answer."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from mizuoto import doctor
from mizuoto.runtime.accel import report as accel_report

REPO = Path(__file__).resolve().parents[2]
CPU = [{"device": "cpu", "name": "cpu", "backends": {"math": {"ok": True, "error": 0.0}}}]


@pytest.fixture
def quick_probe(monkeypatch):
    monkeypatch.setattr(accel_report, "probe_in_subprocess", lambda timeout=300.0: CPU)


@pytest.fixture(scope="module")
def pack_doctor():
    """nodes/doctor.py, loaded through the pack's entry as ComfyUI loads a custom_nodes folder."""
    name = "mizuoto_pack_under_test"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "__init__.py",
                                                      submodule_search_locations=[str(REPO)])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return importlib.import_module(f"{name}.nodes.doctor")



def test_report_keeps_its_keys_and_adds_models_and_kernels(quick_probe):
    rep = doctor.report()
    assert {"mizuoto", "torch", "cpu", "cuda", "packages", "audio_files", "settings", "engines",
            "attention_sites", "acceleration"} <= set(rep)
    assert json.loads(json.dumps(rep)) == rep  # plain JSON
    for engine_id, engine in rep["engines"].items():
        assert {"name", "weights_license", "models"} <= set(engine), engine_id
        models = engine["models"]
        assert isinstance(models, dict)
        assert "error" in models or {"folder", "installed", "downloadable"} <= set(models), models
    kernels = rep["acceleration"]["kernels"]
    assert [k["package"] for k in kernels] == list(rep["acceleration"]["packages"])
    assert all(k["version"] or k["install"] for k in kernels if k["backend"] != "xformers")
    assert rep["acceleration"]["devices"] == CPU


def test_models_come_from_the_catalogue():
    pytest.importorskip("mizuoto.host.catalog", reason="mizuoto/host/catalog.py is not there yet")
    from mizuoto import engines

    spec = engines.get("qwen3tts")
    models = doctor.models(spec)
    assert "error" not in models, models
    assert isinstance(models["folder"], str) and isinstance(models["installed"], list)
    assert all(d["choice"].startswith("hf:") for d in models["downloadable"])


def test_a_broken_catalogue_is_reported_not_raised(monkeypatch):
    catalog = pytest.importorskip("mizuoto.host.catalog", reason="mizuoto/host/catalog.py is not there yet")

    def broken(spec, bases=None):
        raise OSError("models folder unreadable")

    monkeypatch.setattr(catalog, "engine_report", broken)
    from mizuoto import engines

    assert doctor.models(engines.get("dummy")) == {"error": "OSError: models folder unreadable"}


def test_doctor_node_shows_a_summary_and_outputs_the_json(quick_probe, pack_doctor):
    out = pack_doctor.MizuotoDoctor().examine()
    rep = json.loads(out["result"][0])
    assert out["ui"]["text"] == [out["result"][0]] and rep["engines"]["dummy"]
    (summary,) = out["ui"]["summary"]
    assert summary.startswith(f"torch {rep['torch']} · ") and "attention on cpu: math" in summary
    assert summary.endswith("Full report: Mizuoto → Mizuoto Doctor in the menu")


def test_readable_answer_carries_title_sections_text_and_report(quick_probe, pack_doctor):
    answer = json.loads(pack_doctor.readable_json())
    assert answer["title"] == "Mizuoto Doctor"
    assert [s["title"] for s in answer["sections"]] == ["What runs here", "Engines and their models",
                                                         "Settings in force"]
    assert answer["text"].startswith("Mizuoto Doctor (Mizuoto ") and "Engines and their models" in answer["text"]
    assert answer["report"]["acceleration"]["devices"] == CPU and answer["summary"]
