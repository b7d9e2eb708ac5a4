import json

import pytest
import torch

from mizuoto.core.errors import CheckpointError, InputError


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


NODES = {"MizuotoCosyVoiceLoader", "MizuotoCosyVoiceSpeak", "MizuotoDummyLoader", "MizuotoDummySpeak",
         "MizuotoAccelPolicy", "MizuotoDoctor", "MizuotoWhisperLoader",
         "MizuotoWhisperTranscribe", "MizuotoF5TTSLoader", "MizuotoF5TTSSpeak", "MizuotoQwen3TTSLoader",
         "MizuotoQwen3TTSSpeak", "MizuotoVoxCPMLoader", "MizuotoVoxCPMSpeak", "MizuotoSeedVCLoader",
         "MizuotoSeedVCConvert", "MizuotoGPTSoVITSLoader", "MizuotoGPTSoVITSSpeak", "MizuotoIndexTTSLoader",
         "MizuotoIndexTTSSpeak"}


def test_mappings_and_display_names(pack):
    assert set(pack.NODE_CLASS_MAPPINGS) == NODES
    assert pack.NODE_DISPLAY_NAME_MAPPINGS["MizuotoDummySpeak"] == "Mizuoto Dummy Speak"
    assert pack.NODE_DISPLAY_NAME_MAPPINGS["MizuotoAccelPolicy"] == "Mizuoto Accel Policy"
    assert pack.WEB_DIRECTORY == "./web"
    for cls in pack.NODE_CLASS_MAPPINGS.values():
        assert cls.CATEGORY.startswith("Mizuoto") and callable(getattr(cls, cls.FUNCTION))
        assert len(cls.RETURN_TYPES) == len(cls.RETURN_NAMES)


def test_loader_widgets(loader):
    w = widgets(type(loader))
    assert w["model"][0] == ["(built-in weights)"]  # no models/tts folder outside ComfyUI
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


def test_loader_with_policy_object_and_checkpoint_path(pack, loader, tmp_path):
    from mizuoto.engines.dummy import engine

    path = engine.save(engine.build(weights_seed=3), tmp_path / "d.safetensors")
    (policy,) = pack.NODE_CLASS_MAPPINGS["MizuotoAccelPolicy"]().choose("math", False, False, False)
    (model,) = loader.load(str(path), "cpu", "float32", policy=policy, sample_rate="24000")
    assert model.info.source == str(path) and model.info.attention == "math" and not model.info.cuda_graphs


def test_node_errors(loader, speaker, tmp_path):
    (model,) = loader.load("(built-in weights)", "cpu", "float32", sample_rate="24000")
    with pytest.raises(InputError, match="text is empty"):
        speaker.generate(model, "", 0, speed=1.0)
    with pytest.raises(CheckpointError, match="does not exist"):
        loader.load(str(tmp_path / "gone.safetensors"), "cpu", "float32", sample_rate="24000")
    with pytest.raises(InputError, match="not found in .*models/tts/dummy"):
        loader.load("dummy/relative.safetensors", "cpu", "float32", sample_rate="24000")
    with pytest.raises(InputError, match="unknown dtype"):
        loader.load("(built-in weights)", "cpu", "int4", sample_rate="24000")


def test_accel_policy_node(pack):
    node = pack.NODE_CLASS_MAPPINGS["MizuotoAccelPolicy"]
    widgets = node.INPUT_TYPES()["required"]
    assert widgets["policy"][0][:3] == ["auto", "host", "fast"] and "flash" in widgets["policy"][0]
    (choice,) = node().choose("fast", True, True, False)
    assert (choice.name, choice.strict, choice.overrides()) == ("fast", True, {"compute.compile": True,
                                                                               "compute.cuda_graphs": False})
    with pytest.raises(InputError, match="unknown attention policy 'turbo'"):
        node().choose("turbo", False, False, True)


def test_strict_policy_that_cannot_run_refuses_the_load(pack, loader):
    (choice,) = pack.NODE_CLASS_MAPPINGS["MizuotoAccelPolicy"]().choose("sdpa_flash", True, False, True)
    with pytest.raises(InputError, match="attention policy 'sdpa_flash' cannot run on cpu"):
        loader.load("(built-in weights)", "cpu", "float32", policy=choice, sample_rate="24000")


def test_policy_report_reaches_the_node_output(pack, loader, speaker):
    (choice,) = pack.NODE_CLASS_MAPPINGS["MizuotoAccelPolicy"]().choose("math", False, False, True)
    (model,) = loader.load("(built-in weights)", "cpu", "float32", policy=choice, sample_rate="24000")
    report = json.loads(speaker.generate(model, "policy", 1, speed=1.0)["result"][1])
    assert report["attention"]["policy"] == "math" and set(report["attention"]["used"]) == {"math"}


def test_doctor_node(pack):
    out = pack.NODE_CLASS_MAPPINGS["MizuotoDoctor"]().examine()
    report = json.loads(out["result"][0])
    assert out["ui"]["text"] == [out["result"][0]] and "acceleration" in report and report["engines"]["dummy"]


def test_speak_node_rejects_another_engines_model(speaker):
    with pytest.raises(InputError, match="connect a Dummy Loader"):
        speaker.generate(object(), "hello", 0, speed=1.0)


def test_license_acceptance(monkeypatch):
    import dataclasses

    from mizuoto import engines
    from mizuoto.engines.spec import EngineSpec

    real = engines.get("dummy")
    fake = dataclasses.replace(real, license_acceptance=True, weights_license="CC-BY-NC-4.0")
    from importlib import import_module

    pack_nodes = import_module("mizuoto_pack_under_test.nodes.engine_nodes")
    loader = pack_nodes.make_loader(fake)()
    assert "accept_license" in loader.INPUT_TYPES()["required"]
    assert "CC-BY-NC-4.0" in loader.INPUT_TYPES()["required"]["accept_license"][1]["tooltip"]
    with pytest.raises(InputError, match="licensed under CC-BY-NC-4.0; turn on accept_license"):
        loader.load("(built-in weights)", "cpu", "float32", sample_rate="24000")
    (model,) = loader.load("(built-in weights)", "cpu", "float32", accept_license=True, sample_rate="24000")
    assert isinstance(fake, EngineSpec) and model.info.engine == "dummy"


def test_progress_and_cancel_then_the_same_audio(pack, loader, speaker, monkeypatch):
    """Cancel stops within one step and leaks nothing: the next run with the same seed gives the
    same audio as an uninterrupted one."""
    from mizuoto.host import comfy

    (model,) = loader.load("(built-in weights)", "cpu", "float32", sample_rate="24000")
    updates = []
    monkeypatch.setattr(comfy, "progress", lambda node_id: lambda done, total: updates.append((done, total)))
    uninterrupted = speaker.generate(model, "cancel me", 4, speed=1.0)["result"][0]["waveform"]
    assert updates[0][0] == 0 and updates[-1][0] == updates[-1][1] and len(updates) > 5

    class Interrupt(Exception):
        pass

    calls = []

    def interrupted():
        calls.append(1)
        if len(calls) == 4:
            raise Interrupt("cancelled from the page")

    monkeypatch.setattr(comfy, "interrupted", lambda: interrupted)
    with pytest.raises(Interrupt):
        speaker.generate(model, "cancel me", 4, speed=1.0)
    assert len(calls) == 4
    monkeypatch.setattr(comfy, "interrupted", lambda: (lambda: None))
    again = speaker.generate(model, "cancel me", 4, speed=1.0)["result"][0]["waveform"]
    assert torch.equal(again, uninterrupted)


def test_speak_node_reference_audio(speaker, loader):
    widgets_ = type(speaker).INPUT_TYPES()
    assert widgets_["optional"]["reference_audio"][0] == "AUDIO"
    assert "reference_text" not in widgets_["optional"]  # the dummy reads no transcript
    (model,) = loader.load("(built-in weights)", "cpu", "float32", sample_rate="24000")
    t = torch.arange(16000) / 16000
    audio = {"waveform": (0.5 * torch.sin(2 * torch.pi * 90 * t))[None, None].repeat(1, 2, 1), "sample_rate": 16000}
    with_ref = speaker.generate(model, "ref", 3, reference_audio=audio, speed=1.0)["result"][0]["waveform"]
    plain = speaker.generate(model, "ref", 3, speed=1.0)["result"][0]["waveform"]
    assert with_ref.shape == plain.shape and not torch.equal(with_ref, plain)
    short = {"waveform": torch.zeros(1, 1, 800), "sample_rate": 16000}
    with pytest.raises(InputError, match="reference audio is 0.05 s long"):
        speaker.generate(model, "ref", 3, reference_audio=short, speed=1.0)


@pytest.mark.parametrize("waveform, rate, message", [
    (torch.full((1, 1, 16000), float("nan")), 16000, "NaN or infinite"),
    (torch.full((1, 2, 16000), float("inf")), 16000, "NaN or infinite"),
    (torch.zeros(1, 1, 16000), 0, "sample rate is 0"),
    (torch.zeros(1, 1, 0), 16000, "empty"),
])
def test_bad_audio_values_are_one_line_errors_in_the_host(speaker, loader, waveform, rate, message):
    """What ComfyUI's Load Audio hands over is checked like a file: one line for the host's error dialog."""
    from mizuoto.host.local import _mono_at

    (model,) = loader.load("(built-in weights)", "cpu", "float32", sample_rate="24000")
    audio = {"waveform": waveform, "sample_rate": rate}
    with pytest.raises(InputError, match=message) as caught:
        speaker.generate(model, "ref", 3, reference_audio=audio, speed=1.0)
    assert "\n" not in str(caught.value)
    with pytest.raises(InputError, match=message):  # the Transcribe node's path to Whisper
        _mono_at(waveform, rate, 16000)


def test_changing_the_policy_does_not_reload_the_weights(pack, loader):
    policy = pack.NODE_CLASS_MAPPINGS["MizuotoAccelPolicy"]()
    (auto,) = loader.load("(built-in weights)", "cpu", "float32", policy=policy.choose("auto", False, False, True)[0],
                          sample_rate="24000")
    (math_,) = loader.load("(built-in weights)", "cpu", "float32", policy=policy.choose("math", False, False, False)[0],
                           sample_rate="24000")
    assert math_.state.model is auto.state.model  # same weights, not reloaded
    assert (auto.info.attention, math_.info.attention) == ("auto", "math")
    assert math_.state.options.cuda_graphs is False and auto.state.options.cuda_graphs is True
    (other_rate,) = loader.load("(built-in weights)", "cpu", "float32", sample_rate="16000")
    assert other_rate.state.model is not auto.state.model  # a load option the weights depend on: reloaded


def test_speak_nodes_of_transcript_reading_engines_take_a_transcriber(pack):
    import dataclasses
    from importlib import import_module

    from mizuoto import engines
    from mizuoto.engines.spec import Reference

    factory = import_module("mizuoto_pack_under_test.nodes.engine_nodes")
    reading = dataclasses.replace(engines.get("dummy"), reference=Reference(0.5, 30.0, transcript=True))
    optional = factory.make_speaker(reading).INPUT_TYPES()["optional"]
    assert optional["reference_text"][0] == "STRING" and optional["transcriber"][0] == "MIZUOTO_MODEL"
    assert "transcriber" not in factory.make_speaker(engines.get("dummy")).INPUT_TYPES()["optional"]


def test_the_transcriber_is_evaluated_only_when_it_will_transcribe(pack):
    """The transcriber input is lazy: ComfyUI runs the Whisper loader feeding it (which may download a model)
    only when check_lazy_status asks, i.e. with a reference and no transcript (and, for VoxCPM, a clone mode
    that reads the transcript)."""
    classes = pack.NODE_CLASS_MAPPINGS
    for name in ("MizuotoF5TTSSpeak", "MizuotoVoxCPMSpeak"):
        node, inputs = classes[name](), classes[name].INPUT_TYPES()
        assert inputs["optional"]["transcriber"][1]["lazy"] is True
        params = {k: (v[1]["default"] if v[0] != "MIZUOTO_MODEL" else None)
                  for k, v in inputs["required"].items() if k not in ("model", "text", "seed")}
        audio = {"waveform": None, "sample_rate": 24000}
        assert node.check_lazy_status(None, "hi", 0, reference_audio=audio, reference_text="", **params) == \
            ["transcriber"]
        assert node.check_lazy_status(None, "hi", 0, reference_audio=audio, reference_text="Said.", **params) == []
        assert node.check_lazy_status(None, "hi", 0, reference_audio=None, reference_text="", **params) == []
    voxcpm = classes["MizuotoVoxCPMSpeak"]()
    params = {k: v[1]["default"] for k, v in classes["MizuotoVoxCPMSpeak"].INPUT_TYPES()["required"].items()
              if k not in ("model", "text", "seed")}
    params["clone_mode"] = "reference"  # the voice alone: no transcript read
    assert voxcpm.check_lazy_status(None, "hi", 0, reference_audio={"waveform": None}, reference_text="",
                                    **params) == []
    assert not hasattr(classes["MizuotoDummySpeak"](), "check_lazy_status")  # no transcriber input


def test_weights_are_reused_while_any_load_of_them_lives(pack, loader):
    """ComfyUI drops a loader's old output when its policy changes (the rebind lives on), and a
    workflow may drop a rebind while the first load lives: either way the next load reuses the weights."""
    import gc

    policy = pack.NODE_CLASS_MAPPINGS["MizuotoAccelPolicy"]()
    math_policy = policy.choose("math", False, False, False)[0]
    (first,) = loader.load("(built-in weights)", "cpu", "float32", sample_rate="22050")
    weights = first.state.model
    (rebound,) = loader.load("(built-in weights)", "cpu", "float32", policy=math_policy, sample_rate="22050")
    del first
    gc.collect()
    (again,) = loader.load("(built-in weights)", "cpu", "float32", sample_rate="22050")
    assert again.state.model is weights  # the rebind kept them
    del rebound, again
    gc.collect()
    (first,) = loader.load("(built-in weights)", "cpu", "float32", sample_rate="44100")
    (rebound,) = loader.load("(built-in weights)", "cpu", "float32", policy=math_policy, sample_rate="44100")
    del rebound
    gc.collect()
    (again,) = loader.load("(built-in weights)", "cpu", "float32", sample_rate="44100")
    assert again.state.model is first.state.model  # the first load kept them


def test_a_non_finite_node_parameter_is_a_one_line_error(speaker, loader):
    (model,) = loader.load("(built-in weights)", "cpu", "float32", sample_rate="24000")
    with pytest.raises(InputError, match="speed must be a finite number, got nan"):
        speaker.generate(model, "hi", 3, speed=float("nan"))
