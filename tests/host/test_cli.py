import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf
import torch

from mizuoto import cli
from mizuoto.audio import files


def run_main(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_say_writes_wav_and_prints_report(tmp_path, capsys):
    out = tmp_path / "out.wav"
    code, stdout, _ = run_main(capsys, "say", "Hello from Mizuoto", "--engine", "dummy", "--seed", "3",
                               "--device", "cpu", "-o", str(out))
    assert code == 0
    report = json.loads(stdout)
    assert report["seed"] == 3 and report["output"] == str(out) and report["engine"] == "dummy"
    waveform, rate = files.read(out)
    assert rate == report["sample_rate"] and waveform.shape == (1, report["samples"])


def test_same_seed_same_file_float_format(tmp_path, capsys):
    paths = [tmp_path / "a.wav", tmp_path / "b.wav", tmp_path / "c.wav"]
    for path, seed in zip(paths, (5, 5, 6), strict=True):
        assert run_main(capsys, "say", "hi", "--engine", "dummy", "--seed", str(seed), "--format", "float32",
                        "-o", str(path))[0] == 0
    a, b, c = (files.read(p)[0] for p in paths)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_engine_parameters_and_model_file(tmp_path, capsys):
    model = tmp_path / "d.safetensors"
    assert run_main(capsys, "save-dummy", str(model), "--weights-seed", "2")[0] == 0
    code, stdout, _ = run_main(capsys, "say", "hi", "--engine", "dummy", "--model", str(model), "--speed", "1.5",
                               "-o", str(tmp_path / "o.wav"))
    report = json.loads(stdout)
    assert code == 0 and report["model"] == str(model) and report["speak"]["speed"] == 1.5


def test_settings_file_option(tmp_path, capsys):
    settings = tmp_path / "s.toml"
    settings.write_text("[engines.dummy.load_options]\nsample_rate = 16000\n")
    code, stdout, _ = run_main(capsys, "say", "hi", "--engine", "dummy", "--settings", str(settings),
                               "-o", str(tmp_path / "o.wav"))
    assert code == 0 and json.loads(stdout)["sample_rate"] == 16000


@pytest.mark.parametrize("args,message", [
    (["--engine", "nope"], "unknown engine 'nope'; available engines: cosyvoice, dummy"),
    (["--engine", "dummy", "--policy", "turbo"], "unknown attention policy 'turbo'"),
    (["--engine", "dummy", "--model", "/nonexistent/m.safetensors"], "does not exist"),
    (["--engine", "dummy", "--seed", "-4"], "seed must be an integer"),
    (["--engine", "dummy", "--device", "cuda:7"], "CUDA"),
    (["--engine", "dummy", "--dtype", "int8"], "unknown dtype 'int8'"),
    (["--engine", "dummy", "--speed", "100"], "speed must be between"),
])
def test_errors_are_one_line_exit_2_and_leave_no_file(tmp_path, capsys, args, message):
    out = tmp_path / "out.wav"
    code, stdout, stderr = run_main(capsys, "say", "hello", *args, "-o", str(out))
    assert code == 2 and stdout == ""
    assert stderr.startswith("mizuoto: error: ") and message in stderr and stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_empty_text(tmp_path, capsys):
    code, _, stderr = run_main(capsys, "say", "  ", "--engine", "dummy", "-o", str(tmp_path / "o.wav"))
    assert code == 2 and "text is empty" in stderr and list(tmp_path.iterdir()) == []


def test_unwritable_output_path(tmp_path, capsys):
    code, _, stderr = run_main(capsys, "say", "hi", "--engine", "dummy", "-o", str(tmp_path / "missing" / "o.wav"))
    assert code == 2 and "output folder" in stderr and "does not exist" in stderr
    code, _, stderr = run_main(capsys, "say", "hi", "--engine", "dummy", "-o", str(tmp_path))
    assert code == 2 and "is a folder" in stderr


def test_bad_setting_in_environment(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MIZUOTO_COMPUTE__COMPILE", "perhaps")
    code, _, stderr = run_main(capsys, "say", "hi", "--engine", "dummy", "-o", str(tmp_path / "o.wav"))
    assert code == 2 and "MIZUOTO_COMPUTE__COMPILE" in stderr and "true or false" in stderr
    assert list(tmp_path.iterdir()) == []


def test_existing_output_survives_a_failed_run(tmp_path, capsys):
    out = tmp_path / "o.wav"
    out.write_bytes(b"previous")
    code, _, _ = run_main(capsys, "say", "hi", "--engine", "dummy", "--speed", "0", "-o", str(out))
    assert code == 2 and out.read_bytes() == b"previous"


def test_engines_and_doctor(capsys):
    code, stdout, _ = run_main(capsys, "engines")
    assert code == 0 and "dummy" in stdout and "--speed" in stdout
    code, stdout, _ = run_main(capsys, "doctor")
    report = json.loads(stdout)
    assert code == 0 and report["torch"] == torch.__version__ and "dummy.attn" in report["attention_sites"]
    assert report["settings"]["compute.cuda_graphs"] == {"value": True, "from": "default"}
    acceleration = report["acceleration"]
    assert acceleration["settings"]["engines.dummy.attention"] == "auto"
    assert set(acceleration["packages"]) >= {"flash-attn", "xformers", "sageattention"}
    (cpu,) = acceleration["devices"]  # probed in a child process; no GPU here
    assert cpu["device"] == "cpu" and cpu["backends"]["cpu_flash"]["ok"] and cpu["backends"]["math"]["ok"]
    assert "--no-deps" in acceleration["install"]["flash"]


def test_module_entry_point_help_and_exit_codes(tmp_path):
    def python_m(*args):
        return subprocess.run([sys.executable, "-m", "mizuoto", *args], capture_output=True, text=True,
                              cwd=tmp_path)

    top = python_m("--help")
    assert top.returncode == 0 and "say" in top.stdout and "doctor" in top.stdout
    say = python_m("say", "--help")
    assert say.returncode == 0 and "--engine" in say.stdout and "--speed" in say.stdout and "--seed" in say.stdout
    ok = python_m("say", "Hello from Mizuoto", "--engine", "dummy", "-o", "out.wav")
    assert ok.returncode == 0 and json.loads(ok.stdout)["output"] == "out.wav"
    assert (tmp_path / "out.wav").stat().st_size > 1000
    bad = python_m("say", "", "--engine", "dummy", "-o", "bad.wav")
    assert bad.returncode == 2 and bad.stderr.strip() == "mizuoto: error: text is empty; give some words to speak"
    assert not (tmp_path / "bad.wav").exists()


def test_cli_options_are_the_speak_nodes_inputs():
    """One declaration, two faces: every engine parameter is a node input and an option of `say` (or
    `transcribe`) of the same name and type."""
    from mizuoto import engines
    from mizuoto.engines.spec import SPEAK, TRANSCRIBE

    parser = cli.build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for kind, command in ((SPEAK, "say"), (TRANSCRIBE, "transcribe")):
        options = {a.dest.removeprefix("param_"): a for a in commands[command]._actions if a.dest.startswith("param_")}
        for spec in engines.of_kind(kind).values():
            for param in spec.speak_params:
                assert options[param.name].option_strings == [param.cli_flag]
                if param.kind is not bool:
                    assert options[param.name].type is param.kind


def test_reference_audio_option(tmp_path, capsys):
    t = torch.arange(16000) / 16000
    ref = files.write(tmp_path / "ref.wav", (0.5 * torch.sin(2 * torch.pi * 100 * t))[None], 16000)
    code, stdout, _ = run_main(capsys, "say", "hi", "--engine", "dummy", "--ref-audio", str(ref), "-o",
                               str(tmp_path / "o.wav"))
    assert code == 0
    code, _, stderr = run_main(capsys, "say", "hi", "--engine", "dummy", "--ref-audio", str(tmp_path / "no.wav"),
                               "-o", str(tmp_path / "o2.wav"))
    assert code == 2 and "reference audio" in stderr and "does not exist" in stderr


# ---- audio files in and out ----------------------------------------------------------------------------------

def _audio_files_tests():
    """tests/unit/test_audio_files.py, for its broken-file corpus (tests/unit is not on sys.path)."""
    path = Path(__file__).resolve().parents[1] / "unit" / "test_audio_files.py"
    spec = importlib.util.spec_from_file_location("_mizuoto_tests_audio_files", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


AUDIO = _audio_files_tests()
# libmpg123 prints its own warning on stderr for a cut MP3, past Python: leave those out of the one-line checks
BROKEN = [name for name, (file_name, _, _) in AUDIO.BROKEN.items() if not file_name.endswith(".mp3")]


@pytest.fixture
def no_synthesis(monkeypatch):
    """Loading a model or speaking fails the test: what is checked here must fail before either."""
    import mizuoto.host

    def called(*args, **kwargs):
        raise AssertionError("the model was loaded or asked to speak before the error")

    monkeypatch.setattr(mizuoto.host, "load_model", called)
    monkeypatch.setattr(mizuoto.host, "speak", called)


@pytest.mark.parametrize("name,extra,format,subtype", [
    ("out.flac", [], "FLAC", "PCM_16"),
    ("out.flac", ["--format", "pcm24"], "FLAC", "PCM_24"),
    ("out.ogg", [], "OGG", "VORBIS"),
    ("out.mp3", [], "MP3", "MPEG_LAYER_III"),
    ("out.wav", ["--format", "pcm24"], "WAV", "PCM_24"),
    ("OUT.WAV", ["--format", "float32"], "WAV", "FLOAT"),
])
def test_say_output_suffix_picks_the_format(tmp_path, capsys, name, extra, format, subtype):
    out = tmp_path / name
    code, stdout, stderr = run_main(capsys, "say", "Hello from Mizuoto", "--engine", "dummy", "--seed", "1", *extra,
                                    "-o", str(out))
    assert code == 0 and stderr == ""
    report = json.loads(stdout)
    info = sf.info(out)
    assert (info.format, info.subtype, info.samplerate) == (format, subtype, report["sample_rate"])
    waveform, rate = files.read(out)
    assert rate == report["sample_rate"] and waveform.shape[0] == 1
    assert [p.name for p in tmp_path.iterdir()] == [name]


@pytest.mark.parametrize("name,extra,message", [
    ("out.mp4", [], "suffix .mp4"),
    ("out", [], "no suffix"),
    ("out.flac", ["--format", "float32"], "FLAC cannot hold float32"),
    ("out.ogg", ["--format", "pcm16"], "no sample format to choose"),
    ("out.mp3", ["--format", "pcm24"], "no sample format to choose"),
])
def test_bad_output_fails_before_synthesis(tmp_path, capsys, no_synthesis, name, extra, message):
    code, stdout, stderr = run_main(capsys, "say", "hi", "--engine", "dummy", *extra, "-o", str(tmp_path / name))
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert stderr.startswith("mizuoto: error: ") and message in stderr
    assert list(tmp_path.iterdir()) == []


def test_unwritable_place_is_an_error(tmp_path, capsys):
    code, stdout, stderr = run_main(capsys, "say", "hi", "--engine", "dummy", "-o", "/proc/x.wav")
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert stderr.startswith("mizuoto: error: ") and "/proc/x.wav" in stderr
    assert not Path("/proc/x.wav").exists()


def test_unwritable_place_fails_before_synthesis(capsys, no_synthesis):
    code, _, stderr = run_main(capsys, "say", "hi", "--engine", "dummy", "-o", "/proc/x.wav")
    assert code == 2 and "/proc/x.wav" in stderr


def _assert_refused_audio(code, stdout, stderr, path):
    assert code == 2 and stdout == ""
    assert stderr.startswith("mizuoto: error: ") and stderr.count("\n") == 1 and stderr.endswith("\n")
    assert str(path) in stderr


@pytest.mark.parametrize("name", BROKEN)
def test_broken_reference_audio_fails_before_the_model_loads(tmp_path, capsys, no_synthesis, name):
    ref = AUDIO.broken_file(tmp_path, name)
    out = tmp_path / "out" / "o.wav"
    out.parent.mkdir()
    code, stdout, stderr = run_main(capsys, "say", "hi", "--engine", "dummy", "--ref-audio", str(ref),
                                    "-o", str(out))
    _assert_refused_audio(code, stdout, stderr, ref)
    assert "reference audio" in stderr and AUDIO.BROKEN[name][2] in stderr
    assert list(out.parent.iterdir()) == []


@pytest.mark.parametrize("name", BROKEN)
def test_broken_audio_to_transcribe_fails_before_the_model_loads(tmp_path, capsys, no_synthesis, name):
    audio = AUDIO.broken_file(tmp_path, name)
    model = tmp_path / "no" / "model.pt"
    code, stdout, stderr = run_main(capsys, "transcribe", str(audio), "--model", str(model))
    _assert_refused_audio(code, stdout, stderr, audio)
    assert AUDIO.BROKEN[name][2] in stderr and str(model) not in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [audio.name]


def test_transcribe_missing_audio_is_about_the_audio(tmp_path, capsys, no_synthesis):
    code, stdout, stderr = run_main(capsys, "transcribe", str(tmp_path / "none.flac"), "--model",
                                    str(tmp_path / "no.pt"))
    _assert_refused_audio(code, stdout, stderr, tmp_path / "none.flac")
    assert "does not exist" in stderr and "no.pt" not in stderr


@pytest.mark.parametrize("suffix", [".flac", ".mp3", ".ogg", ".wav"])
def test_reference_audio_in_other_containers(tmp_path, capfd, suffix):
    t = torch.arange(24000) / 24000
    ref = files.write(tmp_path / f"ref{suffix}", (0.5 * torch.sin(2 * torch.pi * 150 * t))[None], 24000)
    out = tmp_path / "o.wav"
    code = cli.main(["say", "hi", "--engine", "dummy", "--seed", "2", "--ref-audio", str(ref), "-o", str(out)])
    stdout, stderr = capfd.readouterr()  # capfd: a decoder writing to the real stderr would show here too
    assert code == 0 and stderr == "" and json.loads(stdout)["output"] == str(out)
    assert sf.info(out).format == "WAV"


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN"])
def test_non_finite_numbers_are_one_line_errors(tmp_path, capsys, value):
    """NaN slips through every range check (it compares false); it and infinity are refused by name."""
    code, stdout, stderr = run_main(capsys, "say", "hi", "--engine", "dummy", f"--speed={value}",
                                    "-o", str(tmp_path / "o.wav"))
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert "speed must be a finite number" in stderr and list(tmp_path.iterdir()) == []


def test_named_choices_match_without_regard_to_case(tmp_path, capsys):
    """Qwen3-TTS matches speaker names without regard to case (upstream does): `--speaker VIVIAN` speaks with
    Vivian, through the argument parser and the engine; a name on no list is the engine's one-line error."""
    from pathlib import Path

    from mizuoto import engines

    parsed = cli.build_parser().parse_args(["say", "hi", "--engine", "qwen3tts", "--speaker", "serena", "-o", "o.wav"])
    assert cli.engine_params(parsed, engines.get("qwen3tts"))["speaker"] == "Serena"
    model = Path(__file__).resolve().parents[1] / "parity" / "data" / "qwen3tts" / "custom_voice"
    code, stdout, _ = run_main(capsys, "say", "Hello.", "--engine", "qwen3tts", "--model", str(model), "--speaker",
                               "VIVIAN", "--seed", "1", "-o", str(tmp_path / "o.wav"))
    assert code == 0 and json.loads(stdout)["speak"]["speaker"] == "Vivian"
    code, _, stderr = run_main(capsys, "say", "Hello.", "--engine", "qwen3tts", "--model", str(model), "--speaker",
                               "nobody", "-o", str(tmp_path / "p.wav"))
    assert code == 2 and stderr.count("\n") == 1 and "speaker must be one of" in stderr
    assert not (tmp_path / "p.wav").exists()
