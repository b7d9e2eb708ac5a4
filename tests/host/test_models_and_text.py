"""What a new user meets first: where models go and how they are named (the loader's list, `say --model`,
`mizuoto models`), and text from a file or standard input."""

import io
import json
import shutil
import sys
import types
from importlib import import_module
from pathlib import Path

import pytest

from mizuoto import cli, engines
from mizuoto.core.errors import InputError
from mizuoto.host import catalog, download

QWEN_TINY = Path(__file__).resolve().parents[1] / "parity" / "data" / "qwen3tts" / "custom_voice"


def run_main(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def hub(monkeypatch):
    """A stand-in huggingface_hub whose snapshot_download copies the tiny Qwen3-TTS folder (no network here)."""
    calls = []
    module = types.ModuleType("huggingface_hub")

    def snapshot_download(repo_id, local_dir):
        calls.append(repo_id)
        shutil.copytree(QWEN_TINY, local_dir, dirs_exist_ok=True)

    module.snapshot_download = snapshot_download
    monkeypatch.setitem(sys.modules, "huggingface_hub", module)
    return calls


# -- the loader's list -----------------------------------------------------------------------------------------

def test_an_empty_list_names_the_folder_and_so_does_its_error(tmp_path, monkeypatch):
    """F5-TTS offers no download: with nothing installed its loader lists one entry that says where models go,
    and loading that entry is a one-line error naming the folder (not ComfyUI's 'not in []')."""
    monkeypatch.chdir(tmp_path)
    spec = engines.get("f5tts")
    nodes_models = import_module("mizuoto.nodes.models")
    (only,) = nodes_models.choices(spec)
    folder = str(tmp_path / "models" / "tts" / "f5tts")
    assert only == f"(no model installed: put one in {folder})"
    with pytest.raises(InputError) as error:
        nodes_models.resolve(spec, only)
    assert folder in str(error.value) and "\n" not in str(error.value) and "README's F5-TTS section" in str(error.value)
    loader = import_module("mizuoto.nodes").NODE_CLASS_MAPPINGS["MizuotoF5TTSLoader"]()
    with pytest.raises(InputError, match="licensed under"):  # the licence is asked first, as before
        loader.load(only, "cpu", "float32")
    with pytest.raises(InputError, match=f"put a model in {folder}"):
        loader.load(only, "cpu", "float32", accept_license=True)

    installed = tmp_path / "models" / "tts" / "f5tts" / "F5TTS_v1_Base"
    installed.mkdir(parents=True)
    (installed / "model_1250000.safetensors").write_bytes(b"")
    assert nodes_models.choices(spec) == ["f5tts/F5TTS_v1_Base"]


def test_downloadable_engines_list_their_repos_with_their_state(tmp_path):
    spec = engines.get("qwen3tts")
    offered = catalog.downloadable(spec, tmp_path)
    assert [e["choice"] for e in offered] == [f"hf:{repo}" for repo in spec.repos]
    assert not any(e["downloaded"] for e in offered)
    folder = download.folder_for("qwen3tts", spec.repos[1], str(tmp_path))
    folder.mkdir(parents=True)
    (folder / download.COMPLETE).write_text("")
    assert [e["downloaded"] for e in catalog.downloadable(spec, tmp_path)] == [False, True, False, False, False]


# -- say --model and --models-dir --------------------------------------------------------------------------------

def test_say_downloads_an_hf_id_into_the_models_dir_once(tmp_path, capsys, hub):
    """`--model hf:<repo>` fetches into <models-dir>/<engine>/<owner--name> (the loader's layout) and speaks;
    the second time it is used from there; `models` then lists it as installed and downloaded."""
    models = tmp_path / "models"
    argv = ["say", "Hello.", "--engine", "qwen3tts", "--model", "hf:Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice",
            "--models-dir", str(models), "--speaker", "Vivian", "--seed", "1", "--max-new-tokens", "8"]
    code, stdout, stderr = run_main(capsys, *argv, "-o", str(tmp_path / "a.wav"))
    assert code == 0, stderr
    folder = models / "qwen3tts" / "Qwen--Qwen3-TTS-12Hz-0.6B-CustomVoice"
    assert json.loads(stdout)["model"] == str(folder) and (folder / download.COMPLETE).is_file()
    assert run_main(capsys, *argv, "-o", str(tmp_path / "b.wav"))[0] == 0
    assert hub == ["Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"]  # fetched once

    code, stdout, _ = run_main(capsys, "models", "--engine", "qwen3tts", "--models-dir", str(models), "--json")
    listing = json.loads(stdout)["qwen3tts"]
    assert listing["folder"] == str(models / "qwen3tts")
    assert listing["installed"] == [{"name": "qwen3tts/Qwen--Qwen3-TTS-12Hz-0.6B-CustomVoice", "path": str(folder)}]
    assert {e["choice"]: e["downloaded"] for e in listing["downloadable"]}[
        "hf:Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"]
    code, stdout, _ = run_main(capsys, "models", "--engine", "qwen3tts", "--models-dir", str(models))
    assert code == 0 and "installed    --model qwen3tts/Qwen--Qwen3-TTS-12Hz-0.6B-CustomVoice" in stdout
    assert "downloaded   --model hf:Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice" in stdout
    assert "to download  --model hf:Qwen/Qwen3-TTS-12Hz-1.7B-Base" in stdout

    # the listed name works as --model, with or without the engine's prefix
    for name in ("qwen3tts/Qwen--Qwen3-TTS-12Hz-0.6B-CustomVoice", "Qwen--Qwen3-TTS-12Hz-0.6B-CustomVoice"):
        code, stdout, _ = run_main(capsys, *argv[:5], name, *argv[6:], "-o", str(tmp_path / "c.wav"))
        assert code == 0 and json.loads(stdout)["model"] == str(folder)


def test_an_unknown_model_name_is_one_line_naming_the_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, stderr = run_main(capsys, "say", "Hello.", "--engine", "qwen3tts", "--model", "Qwen3-TTS-0.6B",
                               "-o", str(tmp_path / "o.wav"))
    assert code == 2 and stderr.count("\n") == 1
    assert f"not found in {tmp_path / 'models' / 'tts' / 'qwen3tts'}" in stderr and "hf:Qwen/" in stderr
    code, _, stderr = run_main(capsys, "say", "Hello.", "--engine", "qwen3tts", "--model", "hf:no repo",
                               "-o", str(tmp_path / "o.wav"))
    assert code == 2 and "is not a Hugging Face repo id" in stderr
    assert not (tmp_path / "o.wav").exists() and not (tmp_path / "models").exists()


def test_a_failed_download_names_repo_folder_and_cause(tmp_path, capsys, monkeypatch):
    module = types.ModuleType("huggingface_hub")

    def offline(repo_id, local_dir):
        raise OSError("Cannot reach the Hub: name resolution failed for the host")

    module.snapshot_download = offline
    monkeypatch.setitem(sys.modules, "huggingface_hub", module)
    models = tmp_path / "models"
    code, _, stderr = run_main(capsys, "say", "Hello.", "--engine", "qwen3tts", "--model",
                               "hf:Qwen/Qwen3-TTS-12Hz-1.7B-Base", "--models-dir", str(models),
                               "-o", str(tmp_path / "o.wav"))
    assert code == 2 and stderr.count("\n") == 1
    assert "could not download Qwen/Qwen3-TTS-12Hz-1.7B-Base into " + str(models / "qwen3tts") in stderr
    assert "OSError: Cannot reach the Hub: name resolution failed for the host" in stderr
    assert not models.exists()  # nothing arrived: no empty folder left behind


def test_transcribe_takes_models_by_the_same_names(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    audio = tmp_path / "a.wav"
    import torch

    from mizuoto.audio import files

    files.write(audio, torch.zeros(1, 1600), 16000)
    code, _, stderr = run_main(capsys, "transcribe", str(audio), "--model", "whisper-tiny")
    assert code == 2 and "not found in" in stderr and "hf:openai/whisper-large-v3-turbo" in stderr


# -- text from a file or standard input --------------------------------------------------------------------------

def test_text_from_a_file_and_from_standard_input(tmp_path, capsys, monkeypatch):
    text_file = tmp_path / "t.txt"
    text_file.write_bytes("\ufeffHello from a file.".encode())  # a byte-order mark is not text
    code, stdout, _ = run_main(capsys, "say", "--text-file", str(text_file), "--engine", "dummy", "--seed", "2",
                               "-o", str(tmp_path / "a.wav"))
    from_file = json.loads(stdout)
    code_arg, stdout, _ = run_main(capsys, "say", "Hello from a file.", "--engine", "dummy", "--seed", "2",
                                   "-o", str(tmp_path / "b.wav"))
    assert code == code_arg == 0 and from_file["samples"] == json.loads(stdout)["samples"]
    assert (tmp_path / "a.wav").read_bytes() == (tmp_path / "b.wav").read_bytes()

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("Hello from a file.".encode())))
    code, stdout, _ = run_main(capsys, "say", "--text-file", "-", "--engine", "dummy", "--seed", "2",
                               "-o", str(tmp_path / "c.wav"))
    assert code == 0 and (tmp_path / "c.wav").read_bytes() == (tmp_path / "a.wav").read_bytes()


@pytest.mark.parametrize("argv, message", [
    (["--text-file", "t.txt", "also text"], "either as an argument or with --text-file, not both"),
    ([], "no text: give it as an argument, or with --text-file FILE"),
    (["--text-file", "missing.txt"], "cannot read the text file missing.txt"),
    (["--text-file", "latin1.txt"], "is not UTF-8 text (byte 5); save it as UTF-8"),
])
def test_text_input_errors_are_one_line(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.txt").write_text("hi")
    (tmp_path / "latin1.txt").write_bytes("Hello\xe9".encode("latin-1"))
    code, _, stderr = run_main(capsys, "say", *argv, "--engine", "dummy", "-o", "o.wav")
    assert code == 2 and stderr.count("\n") == 1 and message in stderr
    assert not (tmp_path / "o.wav").exists()


def test_a_200_kb_text_file_is_no_shell_limit_and_the_dummy_names_its_own(tmp_path, capsys):
    """200 KB cannot go through the shell's argument list, but goes through --text-file; the dummy engine (no
    upstream, a 1022-byte model) then refuses it in one line that names its limit."""
    text_file = tmp_path / "long.txt"
    text_file.write_text("The quick brown fox jumps over the lazy dog. " * 4600)
    assert text_file.stat().st_size > 200_000
    code, _, stderr = run_main(capsys, "say", "--text-file", str(text_file), "--engine", "dummy",
                               "-o", str(tmp_path / "o.wav"))
    assert code == 2 and stderr.count("\n") == 1 and "text is too long for the dummy engine" in stderr
    assert "1022" in stderr and not (tmp_path / "o.wav").exists()


def test_doctor_text_is_the_readable_report(capsys):
    code, stdout, _ = run_main(capsys, "doctor", "--text")
    assert code == 0 and stdout.startswith("Mizuoto Doctor")
    for heading in ("What runs here", "Engines and their models", "Settings in force"):
        assert heading in stdout
    assert "put models in:" in stdout and "hf:openai/whisper-tiny" in stdout
