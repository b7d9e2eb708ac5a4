"""mizuoto.host.comfy against a stand-in of ComfyUI's small surface (folder_paths, comfy.utils,
comfy.model_management), and its standalone behaviour without them."""

import sys
import types
from pathlib import Path

import pytest

from mizuoto.host import comfy


@pytest.fixture
def host(monkeypatch, tmp_path):
    fp = types.ModuleType("folder_paths")
    fp.models_dir = str(tmp_path / "models")
    fp.supported_pt_extensions = {".safetensors", ".pt"}
    fp.folder_names_and_paths = {}
    fp.get_folder_paths = lambda name: fp.folder_names_and_paths[name][0]

    def get_full_path(name, relative):
        for base in fp.folder_names_and_paths.get(name, ([],))[0]:
            path = tmp_path / "models" / name / relative if base.endswith(name) else None
            if path is not None and path.exists():
                return str(path)
        return None

    fp.get_full_path = get_full_path
    bars = []

    class ProgressBar:
        def __init__(self, total, node_id=None):
            self.total, self.node_id, self.values = total, node_id, []
            bars.append(self)

        def update_absolute(self, value, total=None, preview=None):
            self.values.append(value)

    utils = types.ModuleType("comfy.utils")
    utils.ProgressBar = ProgressBar
    management = types.ModuleType("comfy.model_management")

    class InterruptProcessingException(Exception):
        pass

    management.flag = False

    def throw():
        if management.flag:
            management.flag = False
            raise InterruptProcessingException()

    management.throw_exception_if_processing_interrupted = throw
    management.InterruptProcessingException = InterruptProcessingException
    management.emptied = []
    management.soft_empty_cache = lambda: management.emptied.append(1)
    for name, module in (("folder_paths", fp), ("comfy.utils", utils), ("comfy.model_management", management)):
        monkeypatch.setitem(sys.modules, name, module)
    return types.SimpleNamespace(fp=fp, bars=bars, management=management, root=tmp_path)


def test_standalone_without_comfyui():
    assert not comfy.present()
    comfy.progress("7")(1, 10)  # nothing to update, nothing raised
    comfy.interrupted()()
    assert comfy.register_model_folder() is None and comfy.model_folders() == []
    assert comfy.default_model_folder("dummy").endswith("models/tts/dummy")


def test_model_folder_registration(host):
    default = comfy.register_model_folder()
    assert default == str(host.root / "models" / "tts")
    assert comfy.model_folders() == [default]
    comfy.register_model_folder()  # idempotent
    assert comfy.model_folders() == [default]
    (host.root / "models" / "tts" / "dummy").mkdir(parents=True)
    (host.root / "models" / "tts" / "dummy" / "a.safetensors").write_bytes(b"x")
    assert comfy.full_path("dummy/a.safetensors").endswith("a.safetensors")
    assert comfy.default_model_folder("dummy") == str(host.root / "models" / "tts" / "dummy")


def test_progress_bar_per_node(host):
    update = comfy.progress("12")
    for done in range(4):
        update(done, 3)
    (bar,) = host.bars
    assert (bar.total, bar.node_id, bar.values) == (3, "12", [0, 1, 2, 3])


def test_interruption_raises_the_hosts_exception(host):
    check = comfy.interrupted()
    check()
    host.management.flag = True
    with pytest.raises(host.management.InterruptProcessingException):
        check()


def test_soft_empty_cache_uses_the_host(host):
    comfy.soft_empty_cache()
    assert host.management.emptied == [1]


def test_models_on_a_gpu_are_handed_to_model_management(host, monkeypatch):
    """With ComfyUI present, a CUDA model gets a ModelPatcher and is loaded through load_models_gpu
    before every request; CPU models are left alone. (Faked: no GPU here.)"""
    import torch

    from mizuoto.host import load_model, local, speak

    created, loads = [], []

    class ModelPatcher:
        def __init__(self, model, load_device, offload_device, size):
            created.append((model, load_device, offload_device, size))

    patcher_module = types.ModuleType("comfy.model_patcher")
    patcher_module.ModelPatcher = ModelPatcher
    monkeypatch.setitem(sys.modules, "comfy.model_patcher", patcher_module)
    host.management.unet_offload_device = lambda: torch.device("cpu")
    host.management.load_models_gpu = lambda patchers, force_full_load=False: loads.append((patchers, force_full_load))

    cpu_model = load_model("dummy", device="cpu")
    assert cpu_model.patcher is None
    module = cpu_model.state.handle.modules
    patcher = comfy.managed(module, "cuda:0")
    ((model, load_device, offload_device, size),) = created
    assert model is module and load_device == torch.device("cuda:0") and offload_device == torch.device("cpu")
    assert size == sum(p.numel() * p.element_size() for p in (*module.parameters(), *module.buffers()))
    cpu_model.patcher = patcher
    speak(cpu_model, "managed", seed=1)
    assert loads == [([patcher], True)]
    assert local.comfy is comfy


def test_repo_downloads(monkeypatch, tmp_path):
    """A repo id downloads once into models/tts/<engine>/<org--name> and is marked complete; failures
    and a missing huggingface_hub name the folder to fill by hand."""
    from mizuoto.core.errors import CheckpointError
    from mizuoto.host import download

    calls = []
    hub = types.ModuleType("huggingface_hub")

    def snapshot_download(repo_id, local_dir):
        calls.append((repo_id, local_dir))
        (tmp_path / "tts" / "dummy" / "org--voice" / "model.safetensors").write_bytes(b"x")

    hub.snapshot_download = snapshot_download
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    folder = download.fetch("dummy", "org/voice", str(tmp_path / "tts"))
    assert folder == tmp_path / "tts" / "dummy" / "org--voice" and (folder / download.COMPLETE).is_file()
    download.fetch("dummy", "org/voice", str(tmp_path / "tts"))
    assert len(calls) == 1  # complete: not fetched again

    cause = ("We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the "
             "cached files. Check your connection or see the documentation for offline mode.")

    def offline(repo_id, local_dir):
        (Path(local_dir) / ".cache" / "huggingface").mkdir(parents=True)  # the hub's bookkeeping, no file yet
        raise OSError(cause)

    hub.snapshot_download = offline
    fresh = tmp_path / "fresh"
    with pytest.raises(CheckpointError) as error:
        download.fetch("dummy", "org/other", str(fresh / "tts"))
    message = str(error.value)
    # the repo, the folder and the cause in full, on one line; no empty folder left behind
    assert "could not download org/other into " + str(fresh / "tts" / "dummy" / "org--other") in message
    assert f"OSError: {cause}" in message and "download org/other by hand into" in message
    assert "\n" not in message and not fresh.exists()

    def partial(repo_id, local_dir):
        (Path(local_dir) / "config.json").write_text("{}")
        raise ConnectionError("the connection dropped")

    hub.snapshot_download = partial
    with pytest.raises(CheckpointError, match="ConnectionError: the connection dropped"):
        download.fetch("dummy", "org/half", str(tmp_path / "tts"))
    half = tmp_path / "tts" / "dummy" / "org--half"
    assert (half / "config.json").is_file() and not (half / download.COMPLETE).exists()  # kept, to resume
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(CheckpointError, match="huggingface_hub is not installed; pip install huggingface_hub"):
        download.fetch("dummy", "org/third", str(tmp_path / "tts"))


def test_loader_offers_repo_ids(monkeypatch):
    import dataclasses
    from importlib import import_module

    from mizuoto import engines

    spec = dataclasses.replace(engines.get("dummy"), repos=("org/voice",))
    models = import_module("mizuoto.nodes.models")  # the nodes as the installed package lays them out
    assert models.choices(spec) == ["(built-in weights)", "hf:org/voice"]
    fetched = []
    from mizuoto.host import download

    monkeypatch.setattr(download, "fetch", lambda engine, repo, base, files=(): fetched.append((engine, repo)) or base)
    models.resolve(spec, "hf:org/voice")
    assert fetched == [("dummy", "org/voice")]
