"""The example workflows load as they are: every node exists, every input is one the node declares
with an allowed value, the UI format's widgets line up, and the API graph runs on our node classes."""

import json
from pathlib import Path

import pytest

from mizuoto import engines

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
CORE_NODES = {"PreviewAudio", "SaveAudio", "LoadAudio", "PreviewAny"}  # ComfyUI's own, not ours


@pytest.fixture(scope="module")
def mappings():
    import importlib.util
    import sys

    root = WORKFLOWS.parent
    name = "mizuoto_pack_for_workflows"
    spec = importlib.util.spec_from_file_location(name, root / "__init__.py", submodule_search_locations=[str(root)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module.NODE_CLASS_MAPPINGS


def widgets(cls) -> dict:
    types = cls.INPUT_TYPES()
    return {**types.get("required", {}), **types.get("optional", {})}


def test_one_workflow_pair_per_engine():
    for engine_id in engines.ids():
        assert (WORKFLOWS / f"{engine_id}.json").is_file() and (WORKFLOWS / "api" / f"{engine_id}.json").is_file()


@pytest.mark.parametrize("engine_id", engines.ids())
def test_api_workflow_inputs_are_declared_and_allowed(mappings, engine_id):
    graph = json.loads((WORKFLOWS / "api" / f"{engine_id}.json").read_text())
    for node_id, node in graph.items():
        if node["class_type"] in CORE_NODES:
            continue
        declared = widgets(mappings[node["class_type"]])
        assert set(node["inputs"]) <= set(declared), node_id
        assert {k for k, v in mappings[node["class_type"]].INPUT_TYPES()["required"].items()} <= set(node["inputs"])
        for name, value in node["inputs"].items():
            kind = declared[name][0]
            if isinstance(value, list):  # a link: [node id, output slot]
                assert value[0] in graph
            elif isinstance(kind, list) and name != "model":  # checkpoints are the user's files
                assert value in kind, (node_id, name, value)


@pytest.mark.parametrize("engine_id", [i for i, spec in engines.all_engines().items() if spec.builtin_weights])
def test_api_workflow_runs_on_the_node_classes(mappings, engine_id):
    graph = json.loads((WORKFLOWS / "api" / f"{engine_id}.json").read_text())
    outputs = {}

    def run(node_id):
        if node_id not in outputs:
            node = graph[node_id]
            inputs = {k: (run(v[0])[v[1]] if isinstance(v, list) else v) for k, v in node["inputs"].items()}
            if node["class_type"] in CORE_NODES:
                outputs[node_id] = (inputs,)
            else:
                if inputs.get("device") == "auto":
                    inputs["device"] = "cpu"
                cls = mappings[node["class_type"]]
                result = getattr(cls(), cls.FUNCTION)(**inputs)
                outputs[node_id] = result["result"] if isinstance(result, dict) else result
        return outputs[node_id]

    for node_id, node in graph.items():
        if node["class_type"] in CORE_NODES:
            (inputs,) = run(node_id)
            assert inputs["audio"]["waveform"].dim() == 3 and inputs["audio"]["sample_rate"] > 0


@pytest.mark.parametrize("engine_id", engines.ids())
def test_ui_workflow_widgets_line_up(mappings, engine_id):
    ui = json.loads((WORKFLOWS / f"{engine_id}.json").read_text())
    ids = {n["id"] for n in ui["nodes"]}
    for link in ui["links"]:
        assert link[1] in ids and link[3] in ids
    for node in ui["nodes"]:
        if node["type"] in CORE_NODES:
            continue
        declared = widgets(mappings[node["type"]])
        linked = {i["name"] for i in node["inputs"]}
        names = [n for n, spec in declared.items() if n not in linked and isinstance(spec, tuple)
                 and (isinstance(spec[0], list) or spec[0] in ("INT", "FLOAT", "STRING", "BOOLEAN"))]
        # A seed widget with control_after_generate carries one more value (fixed/randomize/...).
        extra = sum(1 for n in names if declared[n][1:] and declared[n][1].get("control_after_generate"))
        assert len(node["widgets_values"]) == len(names) + extra, node["type"]


@pytest.mark.parametrize("engine_id", engines.ids())
def test_no_example_accepts_a_licence_for_the_user(mappings, engine_id):
    """A workflow someone downloads must not accept non-commercial or custom weights licences on their behalf:
    every loader's accept_license ships off, in the API graph and in the UI file's widget values."""
    api = json.loads((WORKFLOWS / "api" / f"{engine_id}.json").read_text())
    for node in api.values():
        assert node["inputs"].get("accept_license", False) is False, node["class_type"]
    ui = json.loads((WORKFLOWS / f"{engine_id}.json").read_text())
    for node in ui["nodes"]:
        if node["type"] in CORE_NODES:
            continue
        declared = widgets(mappings[node["type"]])
        if "accept_license" not in declared:
            continue
        linked = {i["name"] for i in node["inputs"]}
        values, names = iter(node["widgets_values"]), []
        for name, spec in declared.items():
            if name in linked or not isinstance(spec, tuple):
                continue
            if isinstance(spec[0], list) or spec[0] in ("INT", "FLOAT", "STRING", "BOOLEAN"):
                names.append((name, next(values)))
                if spec[1:] and spec[1].get("control_after_generate"):
                    next(values)
        assert dict(names)["accept_license"] is False, node["type"]
