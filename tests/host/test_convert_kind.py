"""The convert kind (source audio + a reference voice -> audio): the declaration, host.convert(), the
generated Convert node and `python -m mizuoto convert`, on a voice converter that exists only in this test.

The converter (`tinyvc`, written into a temporary engines folder and registered for the test) is a
deterministic stand-in: it scales the source to the reference's loudness, adds seeded noise (so the seed
is seen to reach it) and reports progress and checks cancellation between its steps, which is what the
host's lifetime, progress, cancel and report wrap for a real converter (Seed-VC).
"""

import json
import textwrap

import pytest
import torch

from mizuoto import engines
from mizuoto.core.errors import InputError
from mizuoto.engines.spec import CONVERT, KINDS, EngineSpec, Reference
from mizuoto.host import convert, convert_stream, load_model, speak
from mizuoto.runtime.context import Cancelled, RequestContext

DECLARATION = """
from mizuoto.engines.spec import CONVERT, EngineSpec, Param, Reference

ENGINE = EngineSpec(
    id="tinyvc", display_name="Tiny VC", description="a test-only voice converter",
    implementation="engine", weights_license="none (test)", builtin_weights=True, kind=CONVERT,
    reference=Reference(1.0, 30.0, help="the target voice"), max_source_seconds=60.0,
    speak_params=(Param("noise", float, 0.01, "added noise", min=0.0, max=1.0),
                  Param("steps", int, 4, "steps", min=1, max=50)),
)
"""

ENGINE = """
from dataclasses import dataclass

import torch

RATE = 8000


@dataclass
class State:
    source: str = "built-in"


def load(path, device, dtype, options):
    return State()


def convert(state, source, reference, ctx, values):
    (wave, rate), (ref, _) = source, reference
    assert wave.dim() == 1 and ref.dim() == 1, "the host mixes both to mono"
    gain = ref.pow(2).mean().sqrt() / wave.pow(2).mean().sqrt().clamp_min(1e-9)
    out = wave * gain
    generator = ctx.generator_for("cpu")
    for step in range(values["steps"]):
        ctx.progress(step, values["steps"])
        out = out + values["noise"] * torch.randn(out.shape, generator=generator)
    ctx.progress(values["steps"], values["steps"])
    return out[None], rate


def convert_stream(state, chunks, reference, ctx, values, live=None):
    assert live is None, "tinyvc has no live mode"
    for chunk in chunks:  # each chunk on its own; the request's generator runs on across them
        yield convert(state, chunk, reference, ctx, values)
"""


@pytest.fixture
def tinyvc(tmp_path, monkeypatch):
    package = tmp_path / "engines" / "tinyvc"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "declaration.py").write_text(textwrap.dedent(DECLARATION))
    (package / "engine.py").write_text(textwrap.dedent(ENGINE))
    monkeypatch.setattr(engines, "__path__", [*engines.__path__, str(tmp_path / "engines")])
    monkeypatch.setattr(engines, "_SPECS", None)
    yield engines.get("tinyvc")
    for name in [n for n in list(__import__("sys").modules) if n.startswith("mizuoto.engines.tinyvc")]:
        __import__("sys").modules.pop(name)
    engines._SPECS = None


def tone(seconds: float, rate: int = 8000, amplitude: float = 0.3, channels: int = 1) -> torch.Tensor:
    t = torch.arange(int(seconds * rate)) / rate
    return (amplitude * torch.sin(2 * torch.pi * 220 * t)).repeat(channels, 1)


def test_every_kind_has_a_node_and_a_convert_engine_must_declare_its_reference():
    import nodes  # the pack's node module: one role per kind

    assert set(nodes._ROLES) == set(KINDS)
    with pytest.raises(ValueError, match="declares the reference voice"):
        EngineSpec(id="x", display_name="X", description="", implementation="engine", weights_license="",
                   kind=CONVERT)
    with pytest.raises(ValueError, match="kind 'sing' is none of"):
        EngineSpec(id="x", display_name="X", description="", implementation="engine", weights_license="",
                   kind="sing")
    EngineSpec(id="x", display_name="X", description="", implementation="engine", weights_license="",
               kind=CONVERT, reference=Reference(1, 10))


def test_convert_gives_audio_and_a_report_and_the_seed_decides_the_draws(tinyvc):
    loaded = load_model("tinyvc")
    source, reference = (tone(2.0, channels=2), 8000), (tone(3.0, amplitude=0.6), 8000)
    first = convert(loaded, source, reference, seed=7, params={"steps": 3})
    again = convert(loaded, source, reference, seed=7, params={"steps": 3})
    other = convert(loaded, source, reference, seed=8, params={"steps": 3})
    assert torch.equal(first.waveform, again.waveform) and not torch.equal(first.waveform, other.waveform)
    assert first.waveform.shape == (1, 16000) and first.sample_rate == 8000
    report = first.report
    assert report["engine"] == "tinyvc" and report["seed"] == 7
    assert report["convert"] == {"noise": 0.01, "steps": 3}
    assert report["source_seconds"] == 2.0 and report["audio_seconds"] == 2.0
    assert report["samples"] == 16000 and report["channels"] == 1 and "real_time_factor" in report
    json.dumps(report)  # the node's report output is its JSON


@pytest.mark.parametrize("source, message", [
    (torch.zeros(1, 0), "source audio is empty; give the speech to convert"),
    (torch.full((1, 800), float("nan")), "source audio contains NaN or infinite samples"),
    (torch.zeros(2, 1, 800), "source audio holds 2 clips; give exactly one"),
    (torch.zeros(1, 8000 * 61), "source audio is 61.0 s long; Tiny VC converts at most 60 s at a time"),
])
def test_bad_source_audio_is_one_line(tinyvc, source, message):
    loaded = load_model("tinyvc")
    with pytest.raises(InputError) as error:
        convert(loaded, (source, 8000), (tone(3.0), 8000), seed=0)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_bad_reference_and_parameters_and_the_wrong_kind_are_one_line(tinyvc):
    loaded = load_model("tinyvc")
    with pytest.raises(InputError, match="reference audio is 0.50 s long; give one between 1 and 30 seconds"):
        convert(loaded, (tone(1.0), 8000), (tone(0.5), 8000), seed=0)
    with pytest.raises(InputError, match="steps must be between 1 and 50"):
        convert(loaded, (tone(1.0), 8000), (tone(2.0), 8000), seed=0, params={"steps": 0})
    with pytest.raises(InputError, match="does not speak a text"):
        speak(loaded, "hello", seed=0)
    with pytest.raises(InputError, match="engine dummy does not convert voices"):
        convert(load_model("dummy"), (tone(1.0), 8000), (tone(2.0), 8000), seed=0)


def test_progress_and_cancel_are_the_hosts(tinyvc):
    loaded = load_model("tinyvc")
    updates = []
    ctx = RequestContext(3, progress=lambda done, total: updates.append((done, total)))
    convert(loaded, (tone(1.0), 8000), (tone(2.0), 8000), params={"steps": 2}, ctx=ctx)
    assert updates == [(0, 2), (1, 2), (2, 2)]
    ctx = RequestContext(3)
    ctx.cancel()
    with pytest.raises(Cancelled):
        convert(loaded, (tone(1.0), 8000), (tone(2.0), 8000), ctx=ctx)


def test_the_convert_node_is_generated_from_the_declaration(tinyvc, monkeypatch):
    from mizuoto.host import comfy
    from nodes.engine_nodes import make_converter, make_loader

    node = make_converter(tinyvc)
    assert node.__name__ == "MizuotoTinyVCConvert" and node.RETURN_TYPES == ("AUDIO", "STRING")
    inputs = node.INPUT_TYPES()
    assert list(inputs["required"]) == ["model", "source_audio", "reference_audio", "seed", "noise", "steps"]
    assert "the target voice (1-30 s)" in inputs["required"]["reference_audio"][1]["tooltip"]
    updates = []
    monkeypatch.setattr(comfy, "progress", lambda node_id: lambda done, total: updates.append((node_id, done)))
    from mizuoto.host.catalog import BUILTIN_WEIGHTS

    (model,) = make_loader(tinyvc)().load(BUILTIN_WEIGHTS, "cpu", "float32")
    source = {"waveform": tone(1.0)[None], "sample_rate": 8000}
    reference = {"waveform": tone(2.0)[None], "sample_rate": 8000}
    out = node().run(model, source, reference, 5, unique_id="12", noise=0.0, steps=1)
    audio, report = out["result"]
    assert audio["sample_rate"] == 8000 and audio["waveform"].shape == (1, 1, 8000)
    assert json.loads(report)["seed"] == 5 and out["ui"]["report"] == [report]
    assert updates == [("12", 0), ("12", 1)]
    with pytest.raises(InputError, match="this Tiny VC Convert node got a Dummy model"):
        node().run(load_model("dummy"), source, reference, 5, noise=0.0, steps=1)


def test_the_command_line_converts_and_refuses_in_one_line(tinyvc, tmp_path, capsys):
    from mizuoto import cli
    from mizuoto.audio import files

    source, reference, out = tmp_path / "source.wav", tmp_path / "reference.wav", tmp_path / "out.wav"
    files.write(files.check_output(str(source), None), tone(1.5), 8000, None)
    files.write(files.check_output(str(reference), None), tone(2.0, amplitude=0.5), 8000, None)
    assert cli.main(["convert", str(source), "--reference", str(reference), "--engine", "tinyvc",
                     "--seed", "4", "--steps", "2", "-o", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["output"] == str(out) and report["convert"]["steps"] == 2 and report["seed"] == 4
    waveform, rate = files.read(out)
    assert rate == 8000 and waveform.shape == (1, 12000)

    missing = tmp_path / "no.wav"
    assert cli.main(["convert", str(missing), "--reference", str(reference), "--engine", "tinyvc",
                     "-o", str(tmp_path / "never.wav")]) == 2
    assert capsys.readouterr().err.strip() == f"mizuoto: error: source audio {missing} does not exist"
    assert cli.main(["convert", str(source), "--reference", str(reference), "--engine", "dummy",
                     "-o", str(tmp_path / "never.wav")]) == 2
    refused = capsys.readouterr().err
    assert "engine dummy does not convert voices; use one of: " in refused and "tinyvc" in refused
    assert not (tmp_path / "never.wav").exists()


def test_convert_stream_yields_each_chunk_as_it_is_made_and_reports_the_stream(tinyvc):
    loaded = load_model("tinyvc")
    source, reference = tone(1.5), (tone(2.0, amplitude=0.5), 8000)
    asked = []

    def chunks():
        for start in range(0, 12000, 4000):
            asked.append(start)
            yield source[..., start:start + 4000], 8000

    stream = convert_stream(loaded, chunks(), reference, seed=3, params={"steps": 1})
    assert asked == [] and stream.report is None  # nothing runs before it is iterated
    pieces = []
    for piece in stream:
        pieces.append(piece)
        assert asked[-1] == 4000 * piece.report["chunk"]  # a piece comes before the next chunk is asked for
    assert [p.report["chunk"] for p in pieces] == [0, 1, 2] and all(p.sample_rate == 8000 for p in pieces)
    assert all(p.report["samples"] == 4000 and p.report["wall_seconds"] >= 0 for p in pieces)
    report = stream.report
    assert report["stream_chunks"] == 3 and report["samples"] == 12000 and report["source_seconds"] == 1.5
    assert report["seed"] == 3 and report["convert"] == {"noise": 0.01, "steps": 1}
    assert report["chunk_wall_seconds"]["max"] >= report["chunk_wall_seconds"]["mean"] >= 0
    # one request, one generator: the stream's noise is a seeded run's, chunk after chunk
    again = torch.cat([p.waveform for p in convert_stream(loaded, chunks(), reference, seed=3, params={"steps": 1})],
                      dim=-1)
    assert torch.equal(again, torch.cat([p.waveform for p in pieces], dim=-1))


def test_convert_stream_refusals_are_one_line(tinyvc, monkeypatch):
    loaded = load_model("tinyvc")
    reference = (tone(2.0), 8000)
    with pytest.raises(InputError, match="^engine dummy does not convert voices"):
        convert_stream(load_model("dummy"), iter([]), reference)
    with pytest.raises(InputError, match="^source audio is empty"):  # each chunk is checked as a source
        list(convert_stream(loaded, iter([(torch.zeros(0), 8000)]), reference))
    monkeypatch.delattr(tinyvc.implementation_module(), "convert_stream")
    with pytest.raises(InputError, match="^engine tinyvc has no streaming mode; convert the whole recording"):
        convert_stream(loaded, iter([]), reference)


def test_the_command_line_streams_in_blocks(tinyvc, tmp_path, capsys):
    from mizuoto import cli
    from mizuoto.audio import files

    source, reference, out = tmp_path / "source.wav", tmp_path / "reference.wav", tmp_path / "out.wav"
    files.write(files.check_output(str(source), None), tone(1.52), 8000, None)
    files.write(files.check_output(str(reference), None), tone(2.0, amplitude=0.5), 8000, None)
    assert cli.main(["convert", str(source), "--reference", str(reference), "--engine", "tinyvc", "--seed", "4",
                     "--stream", "0.5", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    # 0.5 s blocks; the 0.02 s remainder goes with the last block
    assert report["stream_chunks"] == 3 and report["samples"] == 12160 and report["output"] == str(out)
    lines = captured.err.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["block 0", "block 1", "block 2"]
    assert "0.520 s of audio in" in lines[2]
    assert files.read(out)[0].shape == (1, 12160)
