"""IndexTTS 2 end to end through the engine (engines/indextts/engine.py), against upstream's own IndexTTS2.infer on
the same tiny release folder (tests/parity/data/indextts/e2e, written by scripts/parity/indextts_e2e_references.py
at index-tts/index-tts ee40fa7).

The folder is rebuilt here exactly as the writer built it (scripts/parity/indextts_release.py from the recipe the
set records, the set's bpe.model) and loaded by `engine.load`; the references are the set's WAV files read as
upstream's librosa.load reads them. Both sides normalise text with the same identity stand-in (the writer's
TextNormalizer.load). Per case (the speaker's own emotion, a second recording at emo_alpha 0.6, an emotion vector
picked by cosine similarity and one picked at random, a text split into several segments with its silences):
the text's tokens and segments (strings: exact on any machine), and after RequestContext(seed) each segment's mel
codes, the CFM's mel, BigVGAN's output and the whole int16 waveform: identical where the set's fingerprint is this
machine's; elsewhere the codes are free running (tests/fallback.py) and not compared.
"""

import json
import sys
from pathlib import Path

import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fallback import Comparison  # noqa: E402
from helpers import parity_module, reference_sets, run_pinned  # noqa: E402

from mizuoto.core.errors import CheckpointError, InputError  # noqa: E402
from mizuoto.core.options import RuntimeOptions  # noqa: E402
from mizuoto.engines.indextts import engine  # noqa: E402
from mizuoto.engines.indextts.declaration import ENGINE  # noqa: E402
from mizuoto.engines.indextts.normalizer import TextNormaliser  # noqa: E402
from mizuoto.runtime.context import RequestContext  # noqa: E402

SET = "indextts/e2e"
DEFAULTS = ENGINE.speak_defaults()
OPTIONS = RuntimeOptions("indextts", "auto", False, True, (), {"text_normaliser": "none"})
release = parity_module("indextts_release")


class Identity:
    def normalize(self, text: str) -> str:
        return text


def folder() -> Path:
    return reference_sets().SETS[SET].committed


def info(root: Path) -> dict:
    return json.loads((root / "references.json").read_text())


def read(path: Path) -> tuple[torch.Tensor, int]:
    import soundfile

    data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    return torch.from_numpy(data.T.copy()), rate


def loaded_model(root: Path, tmp: Path):
    model = release.write(tmp / "IndexTTS-2", info(root)["release"], root / "bpe.model")
    loaded = engine.load(model, torch.device("cpu"), torch.float32, OPTIONS)
    # the writer's stand-in: TextNormalizer's own steps around identity zh and en normalisers
    loaded.text.normaliser = TextNormaliser("identity", zh=Identity(), en=Identity())
    return loaded


def params_of(case: dict, generation: dict) -> dict:
    keywords = case["keywords"]
    params = {**DEFAULTS, **generation}
    if "emo_vector" in keywords:
        params["emotion"] = "vector"
        params.update(zip(("happy", "angry", "sad", "afraid", "disgusted", "melancholic", "surprised", "calm"),
                          keywords["emo_vector"], strict=True))
    elif case["emotion_audio"]:
        params["emotion"] = "audio"
    for key in ("emo_alpha", "use_random", "max_text_tokens_per_segment", "interval_silence"):
        if key in keywords:
            params[key] = keywords[key]
    return params


def ours(root: Path, out: Path) -> dict:
    """The pinned run: every case's segments and waveform."""
    from safetensors.torch import save_file

    recorded = info(root)
    loaded = loaded_model(root, out.parent)
    speaker, emotion = read(root / "speaker.wav"), read(root / "emotion.wav")
    results, texts = {}, {}
    for name, case in recorded["cases"].items():
        params = params_of(case, recorded["generation"])
        extras = [emotion] if case["emotion_audio"] else None
        ctx = RequestContext(case["seed"])
        tokens = loaded.text.tokens(case["text"])
        limit = params["max_text_tokens_per_segment"]
        texts[name] = {"tokens": tokens, "segments": loaded.text.segments(tokens, limit)}
        pcm = []
        for i, segment in enumerate(engine.segments(loaded, case["text"], ctx, params, speaker, extras)):
            results[f"{name}/codes/{i}"] = segment.codes.to(torch.int64)
            results[f"{name}/mel/{i}"] = segment.mel
            results[f"{name}/vocoded/{i}"] = segment.vocoded
            pcm.append(segment.pcm)
        wave, _ = engine.join(pcm, params["interval_silence"])
        results[f"{name}/wave"] = wave.to(torch.int16)[0]
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"texts": texts}


def until_stop(codes: torch.Tensor, stop: int) -> torch.Tensor:
    """inference_speech's codes as infer_generator keeps them: up to the first stop token."""
    stops = (codes[0] == stop).nonzero()
    return codes[:, : int(stops[0, 0])] if stops.numel() else codes


def test_upstreams_emotion_modes_end_to_end(tmp_path, record_property):
    from safetensors.torch import load_file

    out = tmp_path / "ours.safetensors"
    root = folder()
    texts = run_pinned(__file__, root, out)["texts"]
    comparison = Comparison.for_set(SET)
    recorded = info(root)
    stop = recorded["release"]["config"]["gpt"]["stop_mel_token"]
    theirs, mine = load_file(str(root / "references.safetensors")), load_file(str(out))
    for name, case in recorded["cases"].items():
        assert texts[name]["tokens"] == case["tokens"], f"{name}: tokens differ from upstream's"
        assert texts[name]["segments"] == case["segments"], f"{name}: segments differ from upstream's"
        for i in range(case["segment_count"]):
            comparison.free_running(f"{name} segment {i} codes", mine[f"{name}/codes/{i}"],
                                    until_stop(theirs[f"{name}/codes/{i}"], stop))
            comparison.free_running(f"{name} segment {i} mel", mine[f"{name}/mel/{i}"], theirs[f"{name}/mel/{i}"])
            comparison.free_running(f"{name} segment {i} BigVGAN", mine[f"{name}/vocoded/{i}"],
                                    theirs[f"{name}/vocoded/{i}"])
        comparison.free_running(f"{name} int16 waveform", mine[f"{name}/wave"], theirs[f"{name}/wave"])
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")


def test_the_set_covers_every_emotion_mode():
    recorded = info(folder())
    assert recorded["upstream"]["commit"].startswith("ee40fa7")
    cases = recorded["cases"].values()
    assert any(c["emotion_audio"] for c in cases)
    assert any("emo_vector" in c["keywords"] and c["keywords"].get("use_random") for c in cases)
    assert any("emo_vector" in c["keywords"] and not c["keywords"].get("use_random") for c in cases)
    assert any(c["segment_count"] > 1 for c in cases)
    assert not any(c["emotion_audio"] or "emo_vector" in c["keywords"] for c in [next(iter(cases))])


def test_the_engine_runs_the_gpt_and_cfm_under_the_models_graphs(tmp_path, monkeypatch):
    """A request with the model's (emulated) CUDA graphs replays the GPT's step segments and the CFM's step: the
    eager request's codes and samples (the graphs' own reuse: test_indextts_gpt.py, test_indextts_s2mel.py)."""
    from helpers import EmulatedGraphs

    root = folder()
    recorded = info(root)
    loaded = loaded_model(root, tmp_path)
    speaker = read(root / "speaker.wav")
    case = recorded["cases"]["speaker"]
    params = dict(params_of(case, recorded["generation"]), max_mel_tokens=8)

    def request():
        return next(iter(engine.segments(loaded, case["text"], RequestContext(case["seed"]), params, speaker)))

    want = request()
    graphs = EmulatedGraphs()
    monkeypatch.setattr(loaded.handle, "graphs_for", lambda option: graphs)
    got = request()
    assert graphs.captures == loaded.config.layers + 1 + 1  # the GPT's segments, the CFM's step
    assert torch.equal(got.codes, want.codes) and torch.equal(got.mel, want.mel) and torch.equal(got.pcm, want.pcm)


def test_compute_compile_compiles_bigvgan_and_rebinds_without_reloading(tmp_path, monkeypatch):
    from dataclasses import replace

    from helpers import record_compiles

    calls = record_compiles(monkeypatch)
    loaded = loaded_model(folder(), tmp_path)
    assert loaded.compiled_vocoder is None
    compiled = engine.rebind(loaded, replace(OPTIONS, compile=True))
    assert compiled.gpt is loaded.gpt and compiled.vocoder is loaded.vocoder  # nothing reloaded
    mel = torch.randn(1, 80, 6, generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        assert torch.equal(compiled.compiled_vocoder(mel), loaded.vocoder(mel)) and calls == ["BigVGAN"]
    assert engine.rebind(compiled, OPTIONS).compiled_vocoder is None


def test_bad_input_is_one_line(tmp_path):
    loaded = loaded_model(folder(), tmp_path)
    speaker = read(folder() / "speaker.wav")
    params = dict(DEFAULTS, max_mel_tokens=4)
    with pytest.raises(InputError, match="reference"):
        engine.speak(loaded, "HELLO", RequestContext(1), params)
    with pytest.raises(InputError, match="empty"):
        engine.speak(loaded, "  ", RequestContext(1), params, speaker)
    with pytest.raises(InputError, match="extra_reference_1"):
        engine.speak(loaded, "HELLO", RequestContext(1), dict(params, emotion="audio"), speaker)
    with pytest.raises(InputError, match="QwenEmotion"):
        engine.speak(loaded, "HELLO", RequestContext(1), dict(params, emotion="text"), speaker)


def test_a_folder_without_its_files_is_one_line(tmp_path):
    with pytest.raises(CheckpointError, match="config.yaml"):
        engine.load(tmp_path, torch.device("cpu"), torch.float32, OPTIONS)
    model = release.write(tmp_path / "IndexTTS-2", info(folder())["release"], folder() / "bpe.model")
    (model / "s2mel.pth").unlink()
    with pytest.raises(CheckpointError, match="s2mel"):
        engine.load(model, torch.device("cpu"), torch.float32, OPTIONS)


if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))
