"""The pack as an installed wheel: library, engines, CLI and nodes under the one name `mizuoto`."""

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

USE = r"""
import json, os, sys
import mizuoto
from mizuoto import engines
from mizuoto.host import load_model, speak
speech = speak(load_model("dummy", device="cpu"), "wheel", seed=1)
import mizuoto.nodes as nodes
print(json.dumps({
    "mizuoto": os.path.dirname(mizuoto.__file__),
    "engines": list(engines.ids()),
    "samples": speech.waveform.shape[-1],
    "nodes": sorted(nodes.NODE_CLASS_MAPPINGS),
    "web": os.path.isfile(os.path.join(nodes.WEB_DIRECTORY, "mizuoto.js")),
}))
"""


def expected_files(repo: Path) -> set[str]:
    files = {p.relative_to(repo).as_posix() for p in (repo / "mizuoto").rglob("*.py")}
    for folder, target in (("engines", "mizuoto/engines"), ("nodes", "mizuoto/nodes")):
        files |= {f"{target}/{p.relative_to(repo / folder).as_posix()}" for p in (repo / folder).rglob("*.py")}
    files |= {f"mizuoto/web/{p.name}" for p in (repo / "web").glob("*.js")}
    # Engines' data (vocabularies, filter banks) travel in each engine's assets/ folder, the shared code's in its
    # package's (mizuoto/audio/assets: resampy's filter table).
    files |= {p.relative_to(repo).as_posix() for p in (repo / "mizuoto").glob("*/assets/*") if p.is_file()}
    files |= {f"mizuoto/engines/{p.relative_to(repo / 'engines').as_posix()}"
              for p in (repo / "engines").glob("*/assets/*") if p.is_file()}
    return {f for f in files if "__pycache__" not in f}


@pytest.mark.slow
def test_wheel_contains_everything_and_works(repo, tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "dist"), str(repo)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("mizuoto-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        site = tmp_path / "site"
        z.extractall(site)
    contents = {n for n in names if ".dist-info/" not in n}
    # Every engine, node module and library module is packaged (a new engine folder that is not listed
    # in pyproject.toml fails here), and nothing else: no tests, no top-level nodes/engines.
    assert contents == expected_files(repo)
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    requires = [line for line in (site / metadata).read_text().splitlines() if line.startswith("Requires-Dist")]
    assert not any(pkg in line for line in requires for pkg in ("torch", "torchaudio", "torchvision"))

    out = subprocess.run([sys.executable, "-c", USE], capture_output=True, text=True, cwd=tmp_path, check=True,
                         env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["mizuoto"] == str(site / "mizuoto")
    assert result["engines"] == ["cosyvoice", "dummy", "f5tts", "gpt_sovits", "indextts", "qwen3tts", "seedvc",
                                 "voxcpm", "whisper"]
    assert result["samples"] > 1000
    assert result["nodes"] == ["MizuotoAccelPolicy", "MizuotoCosyVoiceLoader", "MizuotoCosyVoiceSpeak", "MizuotoDoctor",
                               "MizuotoDummyLoader", "MizuotoDummySpeak",
                               "MizuotoF5TTSLoader", "MizuotoF5TTSSpeak", "MizuotoGPTSoVITSLoader",
                               "MizuotoGPTSoVITSSpeak", "MizuotoIndexTTSLoader", "MizuotoIndexTTSSpeak",
                               "MizuotoQwen3TTSLoader",
                               "MizuotoQwen3TTSSpeak", "MizuotoSeedVCConvert", "MizuotoSeedVCLoader",
                               "MizuotoVoxCPMLoader", "MizuotoVoxCPMSpeak",
                               "MizuotoWhisperLoader", "MizuotoWhisperTranscribe"]
    assert result["web"]
