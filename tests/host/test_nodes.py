import json

import pytest
import torch

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.runtime.accel import policy_for


@pytest.fixture(scope="module")
def pack():
    """The pack's entry module, loaded the way ComfyUI loads a custom_nodes folder."""
    import importlib.util
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    name = "mizuoto_pack_under_test"
    spec = importlib.util.spec_from_file_location(name, root / "__init__.py",
                                                  submodule_search_locations=[str(root)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def loader(pack):
    return pack.NODE_CLASS_MAPPINGS["MizuotoDummyLoader"]()


@pytest.fixture
def speaker(pack):
    return pack.NODE_CLASS_MAPPINGS["MizuotoDummySpeak"]()


def widgets(cls):
    types = cls.INPUT_TYPES()
    return {**types.get("required", {}), **types.get("optional", {})}


def test_mappings_and_display_names(pack):
    assert set(pack.NODE_CLASS_MAPPINGS) == {"MizuotoDummyLoader", "MizuotoDummySpeak"}
    assert pack.NODE_DISPLAY_NAME_MAPPINGS["MizuotoDummySpeak"] == "Mizuoto Dummy Speak"
    assert pack.WEB_DIRECTORY == "./web"
    for cls in pack.NODE_CLASS_MAPPINGS.values():
        assert cls.CATEGORY == "Mizuoto/Dummy" and callable(getattr(cls, cls.FUNCTION))
        assert len(cls.RETURN_TYPES) == len(cls.RETURN_NAMES)


def test_loader_widgets(loader):
    w = widgets(type(loader))
    assert w["model"][0] == ["(built-in weights)"]
    assert w["dtype"][0] == ["float32", "bfloat16", "float16"]
    assert w["sample_rate"][0] == ["16000", "22050", "24000", "44100", "48000"]
    assert w["sample_rate"][1]["default"] == "24000"
    assert w["policy"][0] == "MIZUOTO_POLICY"
    assert type(loader).RETURN_TYPES == ("MIZUOTO_MODEL",)


def test_speak_widgets(speaker):
    w = widgets(type(speaker))
    assert w["model"] == ("MIZUOTO_MODEL",)
    assert w["text"][1]["multiline"] is True
    assert w["seed"][1]["max"] == 2**64 - 1 and w["seed"][1]["control_after_generate"] is True
    assert w["speed"] == ("FLOAT", {"default": 1.0, "tooltip": "speaking rate: 2.0 is twice as fast",
                                    "min": 0.25, "max": 4.0, "step": 0.05})
    assert type(speaker).RETURN_TYPES == ("AUDIO", "STRING")


def test_load_and_speak(loader, speaker):
    (model,) = loader.load("(built-in weights)", "cpu", "float32", sample_rate="16000")
    out = speaker.generate(model, "Hello from a node.", 42, speed=1.0)
    audio, report_text = out["result"]
    assert out["ui"]["report"] == [report_text]
    assert set(audio) == {"waveform", "sample_rate"} and audio["sample_rate"] == 16000
    wave = audio["waveform"]
    assert wave.dtype == torch.float32 and wave.dim() == 3 and wave.shape[:2] == (1, 1)
    assert wave.abs().max() <= 1.0
    report = json.loads(report_text)
    assert report["seed"] == 42 and report["samples"] == wave.shape[-1]
    again = speaker.generate(model, "Hello from a node.", 42, speed=1.0)["result"][0]["waveform"]
    assert torch.equal(again, wave)


def test_node_and_cli_give_the_same_samples(loader, speaker):
    from mizuoto.host import load_model, speak

    (model,) = loader.load("(built-in weights)", "cpu", "float32", sample_rate="24000")
    node = speaker.generate(model, "same", 9, speed=1.25)["result"][0]["waveform"][0]
    lib = speak(load_model("dummy", device="cpu"), "same", seed=9, params={"speed": 1.25}).waveform
    assert torch.equal(node, lib)


def test_loader_with_policy_object_and_checkpoint_path(loader, tmp_path):
    from mizuoto.engines.dummy import engine

    path = engine.save(engine.build(weights_seed=3), tmp_path / "d.safetensors")
    (model,) = loader.load(str(path), "cpu", "float32", policy=policy_for("auto"), sample_rate="24000")
    assert model.info.source == str(path) and model.info.attention == "auto"


def test_node_errors(loader, speaker, tmp_path):
    (model,) = loader.load("(built-in weights)", "cpu", "float32", sample_rate="24000")
    with pytest.raises(InputError, match="text is empty"):
        speaker.generate(model, "", 0, speed=1.0)
    with pytest.raises(CheckpointError, match="does not exist"):
        loader.load(str(tmp_path / "gone.safetensors"), "cpu", "float32", sample_rate="24000")
    with pytest.raises(InputError, match="not found in models/tts/dummy/"):
        loader.load("dummy/relative.safetensors", "cpu", "float32", sample_rate="24000")
    with pytest.raises(InputError, match="unknown dtype"):
        loader.load("(built-in weights)", "cpu", "int4", sample_rate="24000")
