"""The example workflows load as they are in the host: every node exists, every widget value lines up with the
widget the frontend makes for it and is one the node accepts, every link joins an output to an input of the
same type, the API graphs queue on our node classes, and each UI example is a template the browser can show.

The UI check mirrors how ComfyUI's pinned frontend (comfyui-frontend-package 1.27.10, the version in ComfyUI's
requirements.txt) lays out a node's widgets and saves them in `widgets_values`; read from that package's
bundle (static/assets/index-*.js, built from ComfyUI_frontend's src/):

* useLitegraphService `#addInputs` (src/services/litegraphService.ts): inputs are taken in the node's
  `input_order` (required, then optional; ComfyUI sends INPUT_TYPES' own order), and every input whose type
  has a widget constructor (ComfyWidgets in src/scripts/widgets.ts: INT, FLOAT, BOOLEAN, STRING, COMBO, the
  last also for a list of choices) gets a widget, unless it has `forceInput`. A widget input also gets a
  socket; linking something to it keeps the widget, and its value is still saved in `widgets_values`.
* useIntWidget (src/renderer/extensions/vueNodes/widgets/composables/useIntWidget.ts): an INT input gets a
  second "control_after_generate" widget right after it ("fixed", "increment", "decrement", "randomize")
  when its options say `control_after_generate`, or, with no such option, when it is named `seed` or
  `noise_seed`. useFloatWidget adds none. A COMBO with `control_after_generate` gets the control and a
  filter-list string (addValueControlWidgets in src/scripts/widgets.ts).
* LGraphNode.serialize (litegraph): `widgets_values[i]` is widget i's value; a widget with
  `serialize = false` (the audio player, PreviewAny's preview, our own run summary) leaves a hole at its
  index, which JSON writes as null when a later widget follows it and drops when it is last.
"""

import json
import struct
from pathlib import Path

import pytest

from mizuoto import engines

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
API = WORKFLOWS / "api"

# The UI examples, which ComfyUI lists as the pack's templates (every *.json directly in workflows/), by the name
# of their API graph (workflows/api/<name>.json): the engine's id, or <engine id>_<what> for an engine's further
# examples. The template browser shows nothing of a custom node's template but its file name: the name is the
# card's title and, with "-" and "_" turned into spaces, its description; the thumbnail is the same name + ".jpg".
TEMPLATES = {
    "cosyvoice": "CosyVoice - speak in the voice of a reference recording",
    "dummy": "Dummy - hum a sentence with the built-in test model, nothing to download",
    "f5tts": "F5-TTS - speak in the voice of a reference recording",
    "gpt_sovits": "GPT-SoVITS - speak Chinese and English in the voice of a reference recording",
    "indextts": "IndexTTS - speak in the voice of a reference recording with an emotion",
    "qwen3tts": "Qwen3-TTS - speak with one of the preset voices",
    "seedvc": "Seed-VC - convert a recording into the voice of another",
    "seedvc_singing": "Seed-VC - sing a song in the voice of another recording",
    "seedvc_v2": "Seed-VC - convert the voice and the speaking style with v2",
    "voxcpm": "VoxCPM - continue the voice of a reference recording",
    "whisper": "Whisper - transcribe a recording to text",
}
THUMBNAIL_MAX_BYTES = 30_000

WIDGET_TYPES = {"INT", "FLOAT", "STRING", "BOOLEAN", "COMBO"}
CONTROL_VALUES = ("fixed", "increment", "decrement", "randomize")
HOLE = object()  # a widget that is not saved (serialize = false) but keeps its index

# ComfyUI's own nodes our examples use, declared as in ComfyUI's comfy_extras/nodes_audio.py and
# nodes_preview_any.py: input types, output types, and the widget values the frontend saves for them.
# LoadAudio's audio combo lists the files in the user's input folder; the frontend's Comfy.AudioWidget adds
# an unsaved player (a hole) and Comfy.UploadAudio an upload button after it (saved, as null here).
CORE_NODES = {
    "LoadAudio": {"inputs": {}, "required": {"audio"}, "outputs": ["AUDIO"],
                  "widgets": [("audio", str), ("audioUI", HOLE), ("upload", object)]},
    "SaveAudio": {"inputs": {"audio": "AUDIO"}, "required": {"audio", "filename_prefix"}, "outputs": [],
                  "widgets": [("filename_prefix", str)]},
    "PreviewAudio": {"inputs": {"audio": "AUDIO"}, "required": {"audio"}, "outputs": [], "widgets": []},
    "PreviewAny": {"inputs": {"source": "*"}, "required": {"source"}, "outputs": [], "widgets": []},
}


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


def declared(cls) -> dict:
    """Required then optional inputs, in INPUT_TYPES order (hidden ones are never widgets or sockets)."""
    types = cls.INPUT_TYPES()
    return {**types.get("required", {}), **types.get("optional", {})}


def kind_of(spec) -> str:
    kind = spec[0]
    return "COMBO" if isinstance(kind, (list, tuple)) else kind


def options_of(spec) -> dict:
    return spec[1] if len(spec) > 1 and isinstance(spec[1], dict) else {}


def widget_layout(cls) -> list:
    """(name, spec) for each value the pinned frontend saves in widgets_values, in order; control widgets
    are ("control_after_generate", None) and a combo control's filter list ("control_filter_list", None)."""
    layout = []
    for name, spec in declared(cls).items():
        kind, opts = kind_of(spec), options_of(spec)
        if kind not in WIDGET_TYPES or opts.get("forceInput"):
            continue  # a socket only
        layout.append((name, spec))
        if kind == "INT" and opts.get("control_after_generate", name in ("seed", "noise_seed")):
            layout.append(("control_after_generate", None))
        elif kind == "COMBO" and opts.get("control_after_generate"):
            layout += [("control_after_generate", None), ("control_filter_list", None)]
    return layout


def value_problem(name, spec, value, user_choice=False):
    """Why the backend would refuse `value` for this input (None when it accepts it)."""
    kind, opts = kind_of(spec), options_of(spec)
    if kind == "INT":
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{name}={value!r} is not an INT"
    elif kind == "FLOAT":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return f"{name}={value!r} is not a FLOAT"
    elif kind == "BOOLEAN":
        if not isinstance(value, bool):
            return f"{name}={value!r} is not a BOOLEAN"
    elif kind == "STRING":
        if not isinstance(value, str):
            return f"{name}={value!r} is not a STRING"
    elif kind == "COMBO":
        choices = spec[0] if isinstance(spec[0], (list, tuple)) else opts.get("options", [])
        if value not in choices and not (user_choice and isinstance(value, str)):
            return f"{name}={value!r} is not one of {list(choices)[:6]}"
    if kind in ("INT", "FLOAT"):
        if "min" in opts and value < opts["min"]:
            return f"{name}={value!r} is below its min {opts['min']}"
        if "max" in opts and value > opts["max"]:
            return f"{name}={value!r} is above its max {opts['max']}"
    return None


def is_user_choice(class_type, name) -> bool:
    """A loader's `model` lists the user's own checkpoints (or the ones found at start-up), so an example may
    name one that is not installed here; everything else must be a value the node offers."""
    return name == "model" and class_type.endswith("Loader")


def known(mappings, class_type) -> bool:
    return class_type in CORE_NODES or class_type in mappings


def input_types(mappings, class_type) -> dict:
    if class_type in CORE_NODES:
        return dict(CORE_NODES[class_type]["inputs"])
    return {name: kind_of(spec) for name, spec in declared(mappings[class_type]).items()}


def output_types(mappings, class_type) -> list:
    if class_type in CORE_NODES:
        return CORE_NODES[class_type]["outputs"]
    return list(mappings[class_type].RETURN_TYPES)


def required_inputs(mappings, class_type) -> set:
    if class_type in CORE_NODES:
        return set(CORE_NODES[class_type]["required"])
    return set(mappings[class_type].INPUT_TYPES().get("required", {}))


def accepts(input_type, link_type) -> bool:
    return input_type == "*" or link_type == "*" or input_type == link_type


def ui(engine_id) -> dict:
    return json.loads((WORKFLOWS / f"{TEMPLATES[engine_id]}.json").read_text())


def api(engine_id) -> dict:
    return json.loads((API / f"{engine_id}.json").read_text())


def ui_problems(mappings, graph) -> list:
    problems = []
    nodes = {n["id"]: n for n in graph["nodes"]}
    links = {link[0]: link for link in graph["links"]}
    assert len(nodes) == len(graph["nodes"]) and len(links) == len(graph["links"]), "duplicate ids"
    if graph.get("last_node_id", 0) < max(nodes) or graph.get("last_link_id", 0) < max(links, default=0):
        problems.append("last_node_id/last_link_id below the ids in use (new nodes would reuse them)")

    for node in graph["nodes"]:
        where, class_type = f"node {node['id']} {node['type']}", node["type"]
        if not known(mappings, class_type):
            problems.append(f"{where}: no such node")
            continue
        values = node.get("widgets_values", [])
        if class_type in CORE_NODES:
            layout = CORE_NODES[class_type]["widgets"]
            if len(values) != len(layout):
                problems.append(f"{where}: {len(values)} widget values, the frontend saves {len(layout)}")
            for (name, check), value in zip(layout, values, strict=False):  # the length is checked above
                if check is HOLE and value is not None or check is str and not isinstance(value, str):
                    problems.append(f"{where}: {name}={value!r}")
        else:
            layout = widget_layout(mappings[class_type])
            if len(values) != len(layout):
                problems.append(f"{where}: {len(values)} widget values for {len(layout)} widgets "
                                f"({', '.join(n for n, _ in layout)}); every value after the gap would shift")
            for (name, spec), value in zip(layout, values, strict=False):  # the length is checked above
                if spec is None:
                    if name == "control_after_generate" and value not in CONTROL_VALUES:
                        problems.append(f"{where}: control_after_generate={value!r}")
                    continue
                problem = value_problem(name, spec, value, is_user_choice(class_type, name))
                if problem:
                    problems.append(f"{where}: {problem}")

        # Sockets: the saved inputs are the node's, with their types; each one linked here is linked back.
        types = input_types(mappings, class_type)
        for slot, inp in enumerate(node.get("inputs", [])):
            if inp["name"] not in types:
                problems.append(f"{where}: input {inp['name']} is not declared")
            elif not accepts(types[inp["name"]], inp["type"]):
                problems.append(f"{where}: input {inp['name']} saved as {inp['type']}, declared {types[inp['name']]}")
            link = links.get(inp.get("link")) if inp.get("link") is not None else None
            if inp.get("link") is not None and (link is None or link[3] != node["id"] or link[4] != slot):
                problems.append(f"{where}: input {inp['name']} names link {inp.get('link')}, which ends elsewhere")
        linked = {i["name"] for i in node.get("inputs", []) if i.get("link") is not None}
        widget_names = {n for n, _ in (CORE_NODES[class_type]["widgets"] if class_type in CORE_NODES
                                       else widget_layout(mappings[class_type]))}
        for name in required_inputs(mappings, class_type) - widget_names - linked:
            problems.append(f"{where}: required input {name} is not connected (queueing would refuse it)")
        outs = output_types(mappings, class_type)
        for slot, out in enumerate(node.get("outputs", [])):
            if slot >= len(outs) or out["type"] != outs[slot]:
                problems.append(f"{where}: output {slot} saved as {out['type']}, declared {outs[slot:slot + 1]}")
            for link_id in out.get("links") or []:
                if link_id not in links or links[link_id][1] != node["id"] or links[link_id][2] != slot:
                    problems.append(f"{where}: output {slot} names link {link_id}, which starts elsewhere")

    for link_id, origin, origin_slot, target, target_slot, link_type in graph["links"]:
        where = f"link {link_id}"
        if origin not in nodes or target not in nodes:
            problems.append(f"{where}: joins a missing node")
            continue
        source, sink = nodes[origin], nodes[target]
        outs = output_types(mappings, source["type"]) if known(mappings, source["type"]) else []
        if origin_slot >= len(outs) or outs[origin_slot] != link_type:
            problems.append(f"{where}: {source['type']} output {origin_slot} is not {link_type}")
        listed = source["outputs"][origin_slot].get("links") or [] if origin_slot < len(source["outputs"]) else []
        if link_id not in listed:
            problems.append(f"{where}: not listed on {source['type']} output {origin_slot}")
        inputs = sink.get("inputs", [])
        if target_slot >= len(inputs) or inputs[target_slot].get("link") != link_id:
            problems.append(f"{where}: not the link of {sink['type']} input {target_slot}")
        elif known(mappings, sink["type"]):
            declared_type = input_types(mappings, sink["type"]).get(inputs[target_slot]["name"])
            if declared_type is None or not accepts(declared_type, link_type):
                problems.append(f"{where}: {link_type} into {sink['type']}.{inputs[target_slot]['name']} "
                                f"({declared_type})")
    return problems


def api_problems(mappings, graph) -> list:
    problems = []
    for node_id, node in graph.items():
        class_type, where = node["class_type"], f"node {node_id} {node['class_type']}"
        if not known(mappings, class_type):
            problems.append(f"{where}: no such node")
            continue
        types = input_types(mappings, class_type)
        specs = {} if class_type in CORE_NODES else declared(mappings[class_type])
        if class_type in CORE_NODES:
            types.update({name: "STRING" for name, check in CORE_NODES[class_type]["widgets"] if check is str})
        for name in required_inputs(mappings, class_type) - set(node["inputs"]):
            problems.append(f"{where}: required input {name} is missing")
        for name, value in node["inputs"].items():
            if name not in types:
                problems.append(f"{where}: input {name} is not declared")
            elif isinstance(value, list):  # a link: [node id, output slot]
                if len(value) != 2 or value[0] not in graph:
                    problems.append(f"{where}: {name} links to {value!r}, not a node here")
                    continue
                origin = graph[value[0]]["class_type"]
                outs = output_types(mappings, origin) if known(mappings, origin) else []
                if value[1] >= len(outs) or not accepts(types[name], outs[value[1]]):
                    problems.append(f"{where}: {name} ({types[name]}) links to output {value[1]} of "
                                    f"{graph[value[0]]['class_type']} ({outs[value[1]:value[1] + 1]})")
            elif name in specs:
                if kind_of(specs[name]) not in WIDGET_TYPES:
                    problems.append(f"{where}: {name} is a {kind_of(specs[name])} socket, given a value")
                problem = value_problem(name, specs[name], value, is_user_choice(class_type, name))
                if problem:
                    problems.append(f"{where}: {problem}")
            elif not isinstance(value, str):
                problems.append(f"{where}: {name}={value!r} is not a STRING")
    return problems


def engine_of(example: str) -> str:
    return example.partition("_")[0] if example not in engines.ids() else example


def test_one_example_pair_per_engine():
    assert {engine_of(name) for name in TEMPLATES} == set(engines.ids()) and set(engines.ids()) <= set(TEMPLATES)
    for engine_id, title in TEMPLATES.items():
        assert (WORKFLOWS / f"{title}.json").is_file() and (API / f"{engine_id}.json").is_file(), engine_id
    # Everything ComfyUI lists (the .json files directly in workflows/) is one of these templates.
    assert {p.stem for p in WORKFLOWS.glob("*.json")} == set(TEMPLATES.values())


@pytest.mark.parametrize("engine_id", sorted(TEMPLATES))
def test_template_has_a_title_description_and_thumbnail(engine_id):
    """What the template browser can show of a custom node's template (comfyui-frontend-package 1.27.10 and
    1.58.x, useWorkflowTemplatesStore and useTemplateWorkflows): its title is the file name, its description
    the file name with "-" and "_" as spaces, its thumbnail GET /api/workflow_templates/<pack>/<name>.jpg."""
    title = TEMPLATES[engine_id]
    name, _, description = title.partition(" - ")
    assert name and description, "a title of the form '<engine> - <what it does>'"
    assert len(title) <= 80 and not set(title) & set('<>:"/\\|?*#%&'), "a file name every system and URL keeps"
    thumbnail = WORKFLOWS / f"{title}.jpg"
    data = thumbnail.read_bytes()
    assert data[:3] == b"\xff\xd8\xff", "a JPEG, as the browser asks for .jpg"
    assert len(data) <= THUMBNAIL_MAX_BYTES
    width, height = jpeg_size(data)
    assert width == height and width >= 256, "a square card, as the browser shows it"


def jpeg_size(data: bytes) -> tuple:
    i = 2
    while i < len(data):
        marker, length = data[i + 1], struct.unpack(">H", data[i + 2:i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[i + 5:i + 9])
            return width, height
        i += 2 + length
    raise AssertionError("no frame header")


def test_widget_layout_mirrors_the_frontend(mappings):
    """The layout rules on the nodes they matter for: a seed gets its control widget whether or not the node
    asks for one, a socket-only input is no widget, and an optional widget input follows the required ones."""
    whisper = [n for n, _ in widget_layout(mappings["MizuotoWhisperTranscribe"])]
    assert whisper[:3] == ["seed", "control_after_generate", "language"] and "model" not in whisper
    assert "audio" not in whisper and whisper[-1] == "without_timestamps"
    f5 = [n for n, _ in widget_layout(mappings["MizuotoF5TTSSpeak"])]
    assert f5[-1] == "reference_text" and "reference_audio" not in f5 and "transcriber" not in f5

    class Forced:
        @classmethod
        def INPUT_TYPES(cls):
            return {"required": {"noise_seed": ("INT", {}), "text": ("STRING", {"forceInput": True}),
                                 "pick": (["a", "b"], {"control_after_generate": True}),
                                 "seed": ("INT", {"control_after_generate": False}), "x": ("FLOAT", {})}}

    assert [n for n, _ in widget_layout(Forced)] == [
        "noise_seed", "control_after_generate", "pick", "control_after_generate", "control_filter_list", "seed", "x"]


def test_no_float_asks_for_a_control_the_frontend_would_not_add(mappings):
    for class_type, cls in mappings.items():
        for name, spec in declared(cls).items():
            assert not (kind_of(spec) == "FLOAT" and options_of(spec).get("control_after_generate")), (class_type, name)


@pytest.mark.parametrize("engine_id", sorted(TEMPLATES))
def test_ui_workflow_loads_as_the_host_lays_it_out(mappings, engine_id):
    assert ui_problems(mappings, ui(engine_id)) == []


def test_the_check_catches_a_missing_seed_control(mappings):
    """whisper.json once saved no control value after the seed: language read "transcribe", task 0, ..."""
    graph = ui("whisper")
    node = next(n for n in graph["nodes"] if n["type"] == "MizuotoWhisperTranscribe")
    del node["widgets_values"][1]
    problems = ui_problems(mappings, graph)
    assert any("widget values" in p for p in problems) and any("language='transcribe'" in p for p in problems)


@pytest.mark.parametrize("engine_id", sorted(TEMPLATES))
def test_api_workflow_inputs_are_declared_and_allowed(mappings, engine_id):
    assert api_problems(mappings, api(engine_id)) == []


@pytest.mark.parametrize("engine_id", sorted(TEMPLATES))
def test_ui_and_api_examples_agree(mappings, engine_id):
    """The two formats of one example hold the same nodes with the same values. The API graph may leave out
    a node that only feeds optional inputs (the voice-cloning examples' Whisper transcriber, unused while
    reference_text is filled in), with its links."""
    graph, prompt = ui(engine_id), api(engine_id)
    optional_only = set()
    for node in graph["nodes"]:
        targets = [(link[3], link[4]) for link in graph["links"] if link[1] == node["id"]]
        if str(node["id"]) not in prompt and targets and all(
                nodes_input_is_optional(mappings, graph, target, slot) for target, slot in targets):
            optional_only.add(node["id"])
    assert sorted(str(n["id"]) for n in graph["nodes"] if n["id"] not in optional_only) == sorted(prompt)
    for node in graph["nodes"]:
        if node["id"] in optional_only:
            continue
        api_node = prompt[str(node["id"])]
        assert api_node["class_type"] == node["type"]
        if node["type"] in CORE_NODES:
            layout = [(name, check) for name, check in CORE_NODES[node["type"]]["widgets"] if check is str]
            values = dict(zip([n for n, _ in CORE_NODES[node["type"]]["widgets"]], node["widgets_values"], strict=True))
            assert {n: values[n] for n, _ in layout} == {n: api_node["inputs"][n] for n, _ in layout}
        else:
            pairs = zip(widget_layout(mappings[node["type"]]), node["widgets_values"], strict=True)
            values = {n: v for (n, spec), v in pairs if spec is not None}
            assert values == {n: v for n, v in api_node["inputs"].items() if not isinstance(v, list)}, node["type"]
        origins = {link[0]: [str(link[1]), link[2]] for link in graph["links"] if link[1] not in optional_only}
        links = {i["name"]: i["link"] for i in node.get("inputs", []) if i.get("link") in origins}
        assert {n: origins[lid] for n, lid in links.items()} == \
            {n: v for n, v in api_node["inputs"].items() if isinstance(v, list)}, node["type"]


def nodes_input_is_optional(mappings, graph, node_id, slot) -> bool:
    node = next(n for n in graph["nodes"] if n["id"] == node_id)
    name = node["inputs"][slot]["name"]
    return node["type"] in mappings and name in mappings[node["type"]].INPUT_TYPES().get("optional", {})


@pytest.mark.parametrize("engine_id", [i for i, spec in engines.all_engines().items() if spec.builtin_weights])
def test_api_workflow_runs_on_the_node_classes(mappings, engine_id):
    graph = api(engine_id)
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


@pytest.mark.parametrize("engine_id", sorted(TEMPLATES))
def test_no_example_accepts_a_licence_for_the_user(mappings, engine_id):
    """A workflow someone downloads must not accept non-commercial or custom weights licences on their behalf:
    every loader's accept_license ships off, in the API graph and in the UI file's widget values."""
    for node in api(engine_id).values():
        assert node["inputs"].get("accept_license", False) is False, node["class_type"]
    for node in ui(engine_id)["nodes"]:
        if node["type"] in CORE_NODES:
            continue
        values = dict(zip([n for n, _ in widget_layout(mappings[node["type"]])], node["widgets_values"], strict=True))
        assert values.get("accept_license", False) is False, node["type"]
