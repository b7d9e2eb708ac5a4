import json
import subprocess
import sys

import pytest
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
    (["--engine", "nope"], "unknown engine 'nope'; available engines: dummy"),
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
