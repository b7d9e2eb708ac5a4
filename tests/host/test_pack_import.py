"""The pack loaded as ComfyUI loads it: a package named after its folder, from custom_nodes/."""

import json
import subprocess
import sys

LOAD = r"""
import importlib.util, json, os, sys, types
pack_dir = sys.argv[1]
name = os.path.basename(pack_dir)
# ComfyUI has already imported its own `nodes` module when custom nodes load.
host_nodes = types.ModuleType("nodes")
sys.modules["nodes"] = host_nodes
before = set(sys.modules)
spec = importlib.util.spec_from_file_location(name, os.path.join(pack_dir, "__init__.py"),
                                              submodule_search_locations=[pack_dir])
module = importlib.util.module_from_spec(spec)
sys.modules[name] = module
spec.loader.exec_module(module)
added = sorted(set(sys.modules) - before)
real = os.path.realpath(pack_dir)
def ours(path):
    # A virtual environment inside the checkout (as CI makes one) holds installed packages, not ours.
    return path.startswith(real) and "site-packages" not in path


def inside(module):
    paths = getattr(module, "__path__", None)
    paths = list(paths) if isinstance(paths, (list, tuple)) or type(paths).__name__ == "_NamespacePath" else []
    file = getattr(module, "__file__", None)
    return (isinstance(file, str) and ours(file)) or any(ours(os.path.realpath(p)) for p in paths)
ours_added = [m for m in added if inside(sys.modules[m])]
print(json.dumps({
    "top_level_added": sorted({m.split(".")[0] for m in ours_added}),
    "nodes_is_host": sys.modules["nodes"] is host_nodes,
    "forbidden": [m for m in added if m.split(".")[0] in ("nodes", "engines", "tests", "utils")],
    "pack_on_sys_path": any(os.path.realpath(p or ".") == real for p in sys.path),
    "mappings": sorted(module.NODE_CLASS_MAPPINGS),
    "web": os.path.isfile(os.path.join(pack_dir, module.WEB_DIRECTORY, "mizuoto.js")),
    "mizuoto_from": os.path.dirname(sys.modules["mizuoto"].__file__),
}))
"""


def test_pack_adds_only_mizuoto(repo, tmp_path):
    custom_nodes = tmp_path / "custom_nodes"
    custom_nodes.mkdir()
    pack = custom_nodes / "ComfyUI-Mizuoto_test pack"
    pack.symlink_to(repo, target_is_directory=True)
    # Run from an unrelated folder, as ComfyUI does, so the repository is not on sys.path.
    out = subprocess.run([sys.executable, "-c", LOAD, str(pack)], capture_output=True, text=True,
                         cwd=tmp_path, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["forbidden"] == []
    assert result["nodes_is_host"]
    assert result["top_level_added"] == sorted(["ComfyUI-Mizuoto_test pack", "mizuoto"])
    assert not result["pack_on_sys_path"]
    assert result["mappings"] == ["MizuotoAccelPolicy", "MizuotoCosyVoiceLoader", "MizuotoCosyVoiceSpeak",
                                  "MizuotoDoctor", "MizuotoDummyLoader", "MizuotoDummySpeak",
                                  "MizuotoF5TTSLoader", "MizuotoF5TTSSpeak", "MizuotoGPTSoVITSLoader",
                                  "MizuotoGPTSoVITSSpeak", "MizuotoIndexTTSLoader", "MizuotoIndexTTSSpeak",
                                  "MizuotoQwen3TTSLoader",
                                  "MizuotoQwen3TTSSpeak", "MizuotoSeedVCConvert", "MizuotoSeedVCLoader",
                                  "MizuotoVoxCPMLoader", "MizuotoVoxCPMSpeak",
                                  "MizuotoWhisperLoader", "MizuotoWhisperTranscribe"]
    assert result["web"]
    assert result["mizuoto_from"] == str(pack / "mizuoto")


def test_entry_imported_as_a_lone_module(repo):
    # pytest imports the repository root's __init__.py this way when the folder's name is not a
    # Python identifier (as in CI's clone); it must not fail, and it registers nothing.
    code = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('__init__', sys.argv[1]); "
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); print(m.NODE_CLASS_MAPPINGS)")
    out = subprocess.run([sys.executable, "-c", code, str(repo / "__init__.py")], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "{}"
