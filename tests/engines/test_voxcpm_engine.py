"""The VoxCPM engine around the generation: requests that do not fit the model, the loader's errors, CUDA
graphs (emulated on the CPU), the attention sites, cancellation, compile, rebinding and the CLI. The
parity with upstream is tests/parity/test_voxcpm.py; these tests use the same tiny folders."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from mizuoto import host
from mizuoto.audio import files
from mizuoto.core.errors import Cancelled, CheckpointError, InputError
from mizuoto.engines.voxcpm import engine
from mizuoto.runtime.context import RequestContext

DATA = Path(__file__).resolve().parents[1] / "parity" / "data" / "voxcpm" / "e2e"
SHORT = {"max_len": 6, "min_len": 6, "retry_badcase": False}  # six patches, whatever the stop head says


@pytest.fixture(scope="module")
def models():
    return {kind: host.load_model("voxcpm", DATA / kind, device="cpu") for kind in ("v1", "v2")}


def recording(name: str = "prompt16.wav"):
    return files.read(DATA / name)


def say(loaded, text="hello world", seed=3, params=None, **kwargs):
    return host.speak(loaded, text, seed=seed, params={**SHORT, **(params or {})}, **kwargs)


# --- requests -------------------------------------------------------------------------------------------


def test_fixed_length_and_rates(models):
    for kind, per_patch in (("v1", 2 * 32), ("v2", 4 * 96)):
        speech = say(models[kind])
        assert speech.waveform.shape == (1, 6 * per_patch)
        assert speech.sample_rate == {"v1": 16000, "v2": 48000}[kind]
        assert speech.report["speak"]["clone_mode"] == "continuation"


@pytest.mark.parametrize("kind,params,kwargs,message", [
    ("v1", {"clone_mode": "reference"}, {"reference": True}, "clone_mode reference needs a VoxCPM2 model"),
    ("v1", {"control": "calm"}, {}, "control \\(voice design\\) needs a VoxCPM2 model"),
    ("v2", {"control": "calm"}, {"reference": True, "reference_text": "a prompt"}, "control cannot be combined"),
    ("v2", {}, {"text": "   "}, "the text is empty"),
])
def test_requests_that_do_not_fit(models, kind, params, kwargs, message):
    kwargs = dict(kwargs)
    if kwargs.get("reference"):
        kwargs["reference"] = recording()
    text = kwargs.pop("text", "hello")
    with pytest.raises(InputError, match=message):
        say(models[kind], text, params=params, **kwargs)


def test_the_transcript_is_asked_for_only_when_it_is_read(models):
    with pytest.raises(InputError, match="needs the reference audio's transcript"):
        say(models["v2"], reference=recording())
    speech = say(models["v2"], params={"clone_mode": "reference"}, reference=recording())  # voice only
    assert speech.waveform.shape[-1] == 6 * 4 * 96


def test_control_is_upstreams_voice_design_prefix(models):
    """VoxCPM2's control text goes in front of the text in brackets, as upstream's CLI builds it."""
    state = models["v2"].state
    ctx = RequestContext(0)
    with_control = engine.request(state, "hello", ctx, {"control": "calm"})
    spelled = engine.request(state, "(calm)hello", ctx, {})
    assert torch.equal(with_control.prefill.tokens, spelled.prefill.tokens)
    assert with_control.target_tokens == spelled.target_tokens


def test_a_prompt_longer_than_the_model_is_refused(models):
    long = "hello world " * 30  # 360 characters, more than the tiny model's 256 positions
    with pytest.raises(InputError, match="more than this model's max_length 256"):
        say(models["v2"], long)


def test_streamed_pieces_one_per_patch(models):
    for kind, per_patch in (("v1", 64), ("v2", 384)):
        loaded = models[kind]
        values = loaded.spec.check_speak_params(SHORT)
        pieces = list(engine.speak_stream(loaded.state, "hello", RequestContext(5), values))
        assert [p.shape for p in pieces] == [(1, per_patch)] * 6


# --- loading --------------------------------------------------------------------------------------------


def copy_model(tmp_path, kind="v2") -> Path:
    folder = tmp_path / kind
    shutil.copytree(DATA / kind, folder)
    return folder


def test_loader_errors(tmp_path):
    folder = copy_model(tmp_path)
    (folder / "model.safetensors").rename(folder / "elsewhere.safetensors")
    with pytest.raises(CheckpointError, match="holds neither model.safetensors nor pytorch_model.bin"):
        host.load_model("voxcpm", folder, device="cpu")
    (folder / "elsewhere.safetensors").rename(folder / "model.safetensors")
    config = json.loads((folder / "config.json").read_text())
    config["lm_config"]["hidden_size"] = 48
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="has shape .* config.json implies"):
        host.load_model("voxcpm", folder, device="cpu")
    config["architecture"] = "voxcpm3"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="architecture 'voxcpm3' is not a VoxCPM model"):
        host.load_model("voxcpm", folder, device="cpu")
    (folder / "tokenizer.json").unlink()
    config["architecture"] = "voxcpm2"
    config["lm_config"]["hidden_size"] = 64
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="has no tokenizer.json"):
        host.load_model("voxcpm", folder, device="cpu")


def test_a_truncated_weight_file_is_refused(tmp_path):
    folder = copy_model(tmp_path)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="ends inside .*download it again"):
        host.load_model("voxcpm", folder, device="cpu")


def test_weights_are_fresh_aligned_allocations(models):
    """Read with readinto into new tensors (core of the exactness: upstream's parameters are its own
    allocations), never views of a memory map."""
    for p in models["v2"].state.net.parameters():
        assert p.data_ptr() % 64 == 0


def test_pytorch_model_bin_loads_the_same(tmp_path, models):
    from safetensors.torch import load_file

    folder = copy_model(tmp_path)
    torch.save(load_file(str(folder / "model.safetensors")), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    loaded = host.load_model("voxcpm", folder, device="cpu")
    assert torch.equal(say(loaded).waveform, say(models["v2"]).waveform)


# --- runtime ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fail", [(), (3,)], ids=["captured", "a capture fails"])
def test_graphs_give_the_eager_samples(models, monkeypatch, fail):
    """The LM steps as LayerSteps segments and each patch's sampler as one graph, emulated on the CPU
    (each 'graph' re-runs its function into its static outputs, as a replay does): bit for bit the eager
    wave, also when a capture fails and that part runs eagerly from then on."""
    from helpers import EmulatedGraphs

    loaded = models["v2"]
    eager = say(loaded, seed=11).waveform
    emulated = EmulatedGraphs(fail=fail)
    monkeypatch.setattr(loaded.state.handle, "graphs_for", lambda option: emulated)
    graphed = say(loaded, seed=11).waveform
    assert torch.equal(graphed, eager)
    assert emulated.captures > 0
    again = say(loaded, seed=11).waveform  # replays only
    assert torch.equal(again, eager)


def test_all_attention_sites_dispatch(models, monkeypatch):
    """The base and residual LMs (prefill and each step) go through voxcpm.lm, the local encoder and the
    DiT through voxcpm.local."""
    from mizuoto.engines.voxcpm import minicpm
    from mizuoto.runtime.accel import sdpa_reference

    calls = {}
    for site in (minicpm.LM_SITE, minicpm.LOCAL_SITE):
        def counted(*args, n=site.name, **kwargs):
            calls[n] = calls.get(n, 0) + 1
            return sdpa_reference(*args, **kwargs)

        monkeypatch.setattr(site, "reference", counted)
    loaded = models["v2"]
    baseline = say(loaded, seed=2).waveform
    config = loaded.state.net
    lm_layers = len(config.base_lm.layers) + len(config.residual_lm.layers)
    assert calls["voxcpm.lm"] == lm_layers * 6  # the prefill and five steps (none after the last patch)
    assert calls["voxcpm.local"] > 0
    monkeypatch.undo()
    assert torch.equal(say(loaded, seed=2).waveform, baseline)


def test_cancel_between_patches(models):
    loaded = models["v2"]
    values = loaded.spec.check_speak_params(SHORT)
    seen = []

    def progress(done, total):
        seen.append(done)
        if done == 2:
            ctx.cancel()

    ctx = RequestContext(1, progress=progress)
    with pytest.raises(Cancelled):
        engine.speak(loaded.state, "hello", ctx, values)
    assert seen == [1, 2]


def test_compile_runs_the_compiled_dit_and_vae(models, monkeypatch):
    """compute.compile: every DiT call of the sampler and every VAE decode go through their compiled forms
    (a recording stand-in for torch.compile here); a rebind with compile off goes back to the modules."""
    from helpers import record_compiles

    calls = record_compiles(monkeypatch)
    compiled = host.load_model("voxcpm", DATA / "v2", device="cpu", overrides={"compute.compile": True})
    wave = say(compiled, seed=4).waveform
    assert calls.count("LocalDiT") == 6 * 9  # six patches, nine guided steps each (the first has zero velocity)
    assert calls.count("VAEDecoder") == 1
    assert torch.equal(wave, say(models["v2"], seed=4).waveform)
    plain = engine.rebind(compiled.state, models["v2"].state.options)
    assert plain.dit is None and plain.vae_decoder is None and plain.net is compiled.state.net


def test_rebind_shares_the_weights(models):
    state = models["v2"].state
    again = engine.rebind(state, state.options)
    assert again.net is state.net and again.handle is state.handle and again.vae is state.vae


def test_cli_say(tmp_path, capsys):
    from mizuoto import cli

    out = tmp_path / "out.wav"
    code = cli.main(["say", "hello world", "--engine", "voxcpm", "--model", str(DATA / "v1"), "--seed", "9",
                     "--ref-audio", str(DATA / "prompt16.wav"), "--ref-text", "a prompt", "--cfg-value", "1.5",
                     "--inference-timesteps", "4", "--max-len", "5", "-o", str(out)])
    assert code == 0
    written, rate = files.read(out)
    assert rate == 16000 and written.shape[-1] > 0


# --- nodes ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pack():
    """The pack's entry module, loaded the way ComfyUI loads a custom_nodes folder."""
    from helpers import load_pack

    return load_pack("mizuoto_pack_voxcpm")


def test_example_workflow_runs_on_the_node_classes(pack, models):
    """workflows/api/voxcpm.json on the node classes: the loader pointed at the tiny VoxCPM2 in float32,
    LoadAudio standing in with a recording, six patches for time. SaveAudio gets what the library gives
    for the same request."""
    graph = json.loads((Path(__file__).resolve().parents[2] / "workflows" / "api" / "voxcpm.json").read_text())
    loader = next(n for n in graph.values() if n["class_type"] == "MizuotoVoxCPMLoader")
    speaker = next(n for n in graph.values() if n["class_type"] == "MizuotoVoxCPMSpeak")
    assert {k: speaker["inputs"][k] for k in ("cfg_value", "inference_timesteps", "clone_mode")} == {
        "cfg_value": 2.0, "inference_timesteps": 10, "clone_mode": "continuation"}
    loader["inputs"].update(model=str(DATA / "v2"), device="cpu", dtype="float32")
    speaker["inputs"].update(SHORT)
    wave, rate = recording()
    from helpers import saved_audio

    saved = saved_audio(pack, graph, lambda name: (wave, rate))
    params = {k: v for k, v in speaker["inputs"].items() if k in {p.name for p in models["v2"].spec.speak_params}}
    want = host.speak(models["v2"], speaker["inputs"]["text"], seed=speaker["inputs"]["seed"], params=params,
                      reference=(wave, rate), reference_text=speaker["inputs"]["reference_text"]).waveform
    assert saved["sample_rate"] == 48000 and torch.equal(saved["waveform"][0], want)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_real_cuda_graphs_give_the_eager_wave(dtype):
    """On a GPU: the LM steps' segment graphs and the per-patch sampler graph give the eager wave bit for bit,
    a second request replays them, and a continuation clone does too."""
    eager = host.load_model("voxcpm", DATA / "v2", device="cuda", dtype=dtype,
                            overrides={"compute.cuda_graphs": False})
    graphed = host.load_model("voxcpm", DATA / "v2", device="cuda", dtype=dtype)
    assert graphed.info.graphs and not eager.info.graphs
    for kwargs in ({}, {"reference": recording(), "reference_text": "a prompt"}):
        want = say(eager, seed=5, **kwargs).waveform
        for _ in range(2):  # captured, then replayed
            assert torch.equal(say(graphed, seed=5, **kwargs).waveform, want)
