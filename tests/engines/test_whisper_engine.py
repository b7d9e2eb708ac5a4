"""Whisper as a Mizuoto engine: the host's transcribe(), the Transcribe node and the CLI give what
openai-whisper's own transcribe() gives with the same options (its command line's defaults)."""

import json

import numpy as np
import pytest
import torch

whisper = pytest.importorskip("whisper")

from mizuoto import cli  # noqa: E402
from mizuoto.audio import files  # noqa: E402
from mizuoto.core.errors import InputError  # noqa: E402
from mizuoto.host import load_model  # noqa: E402
from mizuoto.host.local import transcribe  # noqa: E402

DIMS = dict(n_mels=80, n_audio_ctx=1500, n_audio_state=64, n_audio_head=2, n_audio_layer=2, n_vocab=51865,
            n_text_ctx=448, n_text_state=64, n_text_head=2, n_text_layer=2)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.manual_seed(0)
    model = whisper.model.Whisper(whisper.model.ModelDimensions(**DIMS)).eval()
    tok = whisper.tokenizer.get_tokenizer(True, num_languages=model.num_languages)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "ln" in name:
                param.copy_(torch.randn_like(param) * 0.3 + (1.0 if name.endswith("ln.weight") else 0.0))
        model.decoder.positional_embedding.copy_(torch.randn_like(model.decoder.positional_embedding) * 8)
        # Random weights babble for hundreds of tokens at every fallback temperature: make end of text,
        # timestamps and a few words likely, so that transcriptions are short and not degenerate.
        embedding = model.decoder.token_embedding.weight
        embedding[torch.randint(220, 5000, (60,), generator=torch.Generator().manual_seed(7))] *= 3
        embedding[tok.eot] *= 5
        embedding[tok.timestamp_begin: tok.timestamp_begin + 300] *= 2
    path = tmp_path_factory.mktemp("whisper") / "tiny.pt"
    torch.save({"dims": DIMS, "model_state_dict": model.state_dict()}, path)
    return model, path


def speechlike(seconds=3.0, seed=0):
    g = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    return (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + np.sin(2 * np.pi * 3 * t)) + 0.05 * g.standard_normal(t.size)
            ).astype(np.float32)


def upstream_cli_defaults(**changes):
    """What `whisper FILE --model ...` passes to transcribe() by default (its CLI, not the function)."""
    options = dict(temperature=tuple(np.arange(0, 1.0 + 1e-6, 0.2)), best_of=5, beam_size=5, patience=None,
                   length_penalty=None, condition_on_previous_text=True, initial_prompt=None,
                   compression_ratio_threshold=2.4, logprob_threshold=-1.0, no_speech_threshold=0.6,
                   word_timestamps=False, fp16=False, language=None, task="transcribe")
    options.update(changes)
    return options


def test_host_transcribe_matches_upstream_cli_defaults(tiny):
    model, path = tiny
    audio = speechlike()
    torch.manual_seed(5)
    want = whisper.transcribe(model, audio, **upstream_cli_defaults())
    loaded = load_model("whisper", path, device="cpu")
    got = transcribe(loaded, torch.from_numpy(audio)[None], 16000, seed=5)
    assert got["text"] == want["text"] and got["language"] == want["language"]
    assert got["segments"] == want["segments"]
    assert got["report"]["engine"] == "whisper" and got["report"]["seed"] == 5


def test_options_carry_upstream_names(tiny):
    model, path = tiny
    audio = speechlike(2.0, seed=1)
    torch.manual_seed(2)
    want = whisper.transcribe(model, audio, **upstream_cli_defaults(language="en", beam_size=None, best_of=None,
                                                                     temperature=0.0))
    loaded = load_model("whisper", path, device="cpu")
    got = transcribe(loaded, torch.from_numpy(audio), 16000, seed=2,
                     params={"language": "en", "beam_size": 0, "best_of": 0, "temperature": 0.0,
                             "temperature_increment_on_fallback": 0.0})
    assert got["segments"] == want["segments"] and got["language"] == "en"


def test_other_rates_are_resampled(tiny):
    _, path = tiny
    loaded = load_model("whisper", path, device="cpu")
    t = torch.arange(88200) / 44100
    audio44 = (0.3 * torch.sin(2 * torch.pi * 180 * t))[None].repeat(2, 1)  # 2 s of stereo at 44.1 kHz
    result = transcribe(loaded, audio44, 44100, seed=1, params={"beam_size": 0, "best_of": 0})
    assert isinstance(result["text"], str) and result["report"]["audio_seconds"] == pytest.approx(2.0, abs=0.01)


def test_errors(tiny):
    _, path = tiny
    loaded = load_model("whisper", path, device="cpu")
    with pytest.raises(InputError, match="the audio is empty"):
        transcribe(loaded, torch.zeros(1, 0), 16000)
    with pytest.raises(InputError, match="does not transcribe"):
        transcribe(load_model("dummy", device="cpu"), torch.zeros(1, 16000), 16000)
    with pytest.raises(InputError, match="language must be one of"):
        transcribe(loaded, torch.zeros(1, 16000), 16000, params={"language": "klingon"})


def test_cli_transcribe(tiny, tmp_path, capsys):
    model, path = tiny
    audio = speechlike(2.0, seed=4)
    file = files.write(tmp_path / "a.wav", torch.from_numpy(audio)[None], 16000, "float32")
    torch.manual_seed(9)
    want = whisper.transcribe(model, audio, **upstream_cli_defaults())
    assert cli.main(["transcribe", str(file), "--model", str(path), "--seed", "9", "--device", "cpu"]) == 0
    assert capsys.readouterr().out.strip() == want["text"].strip()
    assert cli.main(["transcribe", str(file), "--model", str(path), "--seed", "9", "--json", "--device", "cpu"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["segments"] == json.loads(json.dumps(want["segments"]))
    assert cli.main(["say", "hi", "--engine", "whisper", "-o", str(tmp_path / "x.wav")]) == 2
    assert "does not speak" in capsys.readouterr().err


def test_cli_takes_the_rest_of_upstreams_options(tiny, tmp_path, capsys):
    """--clip-timestamps, --hallucination-silence-threshold, --carry-initial-prompt and --without-timestamps
    reach transcribe() as openai-whisper's own options; --json adds the detected language's probabilities,
    as upstream's detect_language gives them; --threads sets torch's thread count."""
    model, path = tiny
    audio = speechlike(4.0, seed=6)
    file = files.write(tmp_path / "a.wav", torch.from_numpy(audio)[None], 16000, "float32")
    threads = torch.get_num_threads()
    # the thread count in force: both sides must run at the same one (floats depend on it)
    base = ["transcribe", str(file), "--model", str(path), "--device", "cpu", "--json", "--seed", "3",
            "--threads", str(threads)]
    torch.manual_seed(3)
    want = whisper.transcribe(model, audio, **upstream_cli_defaults(
        clip_timestamps="0.5,3", hallucination_silence_threshold=0.5, word_timestamps=True,
        carry_initial_prompt=True, initial_prompt="Hello there."))
    assert cli.main([*base, "--clip-timestamps", "0.5,3", "--hallucination-silence-threshold", "0.5",
                     "--word-timestamps", "--carry-initial-prompt", "--initial-prompt", "Hello there."]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["segments"] == json.loads(json.dumps(want["segments"])) and result["text"] == want["text"]
    _, probs = model.detect_language(whisper.log_mel_spectrogram(whisper.pad_or_trim(audio)))
    assert list(result["language_probs"]) == sorted(probs, key=probs.get, reverse=True)
    assert result["language_probs"] == pytest.approx(probs)

    torch.manual_seed(3)
    want = whisper.transcribe(model, audio, **upstream_cli_defaults(language="en", without_timestamps=True))
    assert cli.main([*base, "--without-timestamps", "--language", "en"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["segments"] == json.loads(json.dumps(want["segments"]))
    assert "language_probs" not in result  # given, not detected

    try:
        assert cli.main([*base[:-1], "1", "--language", "en", "--clip-timestamps", "0,0.5"]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        cli.main([*base[:-1], "0"])
    assert exit_.value.code == 2 and "--threads" in capsys.readouterr().err


def test_transcribe_node(tiny):
    import importlib.util
    import sys
    from pathlib import Path

    model, path = tiny
    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("mizuoto_pack_whisper", root / "__init__.py",
                                                  submodule_search_locations=[str(root)])
    pack = importlib.util.module_from_spec(spec)
    sys.modules["mizuoto_pack_whisper"] = pack
    spec.loader.exec_module(pack)
    loader = pack.NODE_CLASS_MAPPINGS["MizuotoWhisperLoader"]()
    node = pack.NODE_CLASS_MAPPINGS["MizuotoWhisperTranscribe"]()
    inputs = node.INPUT_TYPES()["required"]
    assert inputs["audio"] == ("AUDIO",) and inputs["beam_size"][1]["default"] == 5
    assert inputs["language"][0][:3] == ["auto", "en", "zh"]
    (loaded,) = loader.load(str(path), "cpu", "float32")
    audio = speechlike(2.0, seed=6)
    params = {name: spec_[1]["default"] for name, spec_ in inputs.items() if name not in ("model", "audio", "seed")}
    out = node.run(loaded, {"waveform": torch.from_numpy(audio)[None, None], "sample_rate": 16000}, 3, **params)
    text, language, segments = out["result"]
    torch.manual_seed(3)
    want = whisper.transcribe(model, audio, **upstream_cli_defaults())
    assert text == want["text"].strip() and language == want["language"]
    assert json.loads(segments) == json.loads(json.dumps(want["segments"]))


def test_empty_reference_transcript_is_transcribed_once(tiny, monkeypatch):
    """An engine that reads the reference's transcript gets Whisper's text when none was typed; the
    same recording is transcribed once."""
    import dataclasses

    from mizuoto.engines.spec import Reference
    from mizuoto.host import local, speak

    model, path = tiny
    voice = load_model("dummy", device="cpu")
    voice.spec = dataclasses.replace(voice.spec, reference=Reference(0.5, 30.0, transcript=True))
    whisper_model = load_model("whisper", path, device="cpu")
    audio = torch.from_numpy(speechlike(2.0, seed=8))[None]
    seen, calls = [], []
    original_speak, original_transcribe = voice.spec.implementation_module().speak, local.transcribe

    def recording_speak(state, text, ctx, params, reference=None, reference_text=None):
        seen.append(reference_text)
        return original_speak(state, text, ctx, params, reference=reference)

    monkeypatch.setattr(voice.spec.implementation_module(), "speak", recording_speak)
    monkeypatch.setattr(local, "transcribe", lambda *a, **k: calls.append(1) or original_transcribe(*a, **k))
    monkeypatch.setattr(local, "_transcripts", type(local._transcripts)())
    speak(voice, "hello", seed=1, reference=(audio, 16000), transcriber=whisper_model)
    speak(voice, "again", seed=1, reference=(audio, 16000), transcriber=whisper_model)
    speak(voice, "typed", seed=1, reference=(audio, 16000), reference_text="a typed transcript")
    torch.manual_seed(0)
    want = whisper.transcribe(model, audio[0].numpy(), **upstream_cli_defaults())["text"].strip()
    assert seen == [want, want, "a typed transcript"] and len(calls) == 1
    with pytest.raises(InputError, match="needs the reference audio's transcript: type it, or connect a Whisper"):
        speak(voice, "no transcript", seed=1, reference=(audio, 16000))


def test_transcribe_through_emulated_graphs_is_the_same_and_keeps_them(tiny, monkeypatch):
    """The host's transcribe with the decoder step's graphs emulated on the CPU: the same result as
    eager, the graphs captured once for the batch shape and kept with the loaded model, replayed by
    the next request; a policy-only reload (rebind) keeps them too."""
    from helpers import EmulatedGraphs

    from mizuoto.engines.whisper import engine

    _, path = tiny
    audio = torch.from_numpy(speechlike(2.0, seed=3))
    params = {"language": "en", "beam_size": 3, "best_of": 0, "temperature": 0.0}
    loaded = load_model("whisper", path, device="cpu")
    want = transcribe(loaded, audio, 16000, seed=1, params=params)
    emulated = EmulatedGraphs()
    monkeypatch.setattr(loaded.state.handle, "graphs_for", lambda option: emulated)
    first = transcribe(loaded, audio, 16000, seed=1, params=params)
    steps, captures = loaded.state.steps, emulated.captures
    again = transcribe(loaded, audio, 16000, seed=1, params=params)
    assert first["segments"] == want["segments"] == again["segments"]
    assert captures == 2 * 2 + 1 and emulated.captures == captures  # beam rows: one set, then replays
    assert loaded.state.steps is steps
    assert engine.rebind(loaded.state, loaded.state.options).steps is steps
