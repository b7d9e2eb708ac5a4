"""Long texts (the command line's --text-file, 200 KB and more) through the host, on every speaking engine's
tiny test model: F5-TTS splits them as upstream does (sentence chunks sized from the reference) and speaks
every chunk; the engines whose upstream does not split them refuse a text past the model's positions in one
line, before any heavy work, with the limit read from the loaded model's config (the dummy's 1022 bytes,
Qwen3-TTS's max_position_embeddings, VoxCPM's max_length or its LMs' max_position_embeddings).

F5-TTS's chunks of the texts below were compared with upstream's own `chunk_text` (f5-tts 1.1.22) when
this file was written: the same chunks, one for one (the counts are asserted here).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from mizuoto import host
from mizuoto.core.errors import InputError
from mizuoto.runtime.context import RequestContext

DATA = Path(__file__).resolve().parents[1] / "parity" / "data"
SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank. "
LONG = (SENTENCE * 4000)[:200_000]  # 200 KB of ordinary English sentences


def one_line(exc_info) -> str:
    message = str(exc_info.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def fast(fn, seconds=5.0):
    """fn() raising InputError within `seconds` (nothing heavy ran before the refusal)."""
    start = time.monotonic()
    with pytest.raises(InputError) as info:
        fn()
    assert time.monotonic() - start < seconds
    return one_line(info)


# --- dummy --------------------------------------------------------------------------------------------


def test_dummy_refuses_past_its_1022_bytes():
    loaded = host.load_model("dummy", None, device="cpu")
    limit = loaded.state.config.max_tokens - 2
    assert limit == 1022
    for words in (LONG, "a" * (limit + 1)):
        message = fast(lambda w=words: host.speak(loaded, w, seed=1))
        assert f"at most {limit}" in message and "split it" in message


# --- F5-TTS -------------------------------------------------------------------------------------------

pypinyin = pytest.importorskip("pypinyin")
rjieba = pytest.importorskip("rjieba")

from mizuoto.engines.f5tts import audio as f5_audio  # noqa: E402
from mizuoto.engines.f5tts import engine as f5_engine  # noqa: E402
from mizuoto.engines.f5tts import text as f5_text  # noqa: E402

F5_RATE = 24000
REF_TEXT = "A short reference."


def f5_voice(seconds=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(int(seconds * F5_RATE), dtype=torch.float64) / F5_RATE
    wave = torch.sin(2 * torch.pi * (140 * t + 20 * t**2)).float() + 0.05 * torch.randn(t.numel(), generator=g)
    return (wave * 0.05 / wave.pow(2).mean().sqrt())[None], F5_RATE


@pytest.fixture(scope="module")
def f5():
    return host.load_model("f5tts", DATA / "f5tts" / "v1", device="cpu")


def f5_say(loaded, words, **params):
    params = {"nfe_step": 1, "trim_reference": False, **params}
    return host.speak(loaded, words, seed=1, params=params, reference=f5_voice(), reference_text=REF_TEXT)


@pytest.mark.parametrize("words,budget,count", [
    (LONG, 480, 440), (LONG, 135, 1539), (LONG, 0, 3077),
    (("Hello there, friend! 你好，世界。 How are you? " * 5000)[:200_000], 480, 542),
    ("word " * 40000, 480, 1),  # no sentence break: one chunk, as upstream's
])
def test_f5_chunks_a_long_text_as_upstream(words, budget, count):
    """Upstream's chunk counts for these texts (checked against f5-tts 1.1.22's chunk_text); the chunks
    keep every word, in order, and only a sentence longer than the budget passes it."""
    chunks = f5_text.chunk_text(words, budget)
    assert len(chunks) == count
    assert " ".join(chunks).split() == words.split()
    sentences = [s for s in f5_text._SENTENCE_BREAK.split(words) if s]
    longest = max(len(s.encode("utf-8")) for s in sentences)
    assert all(len(c.encode("utf-8")) <= max(budget, longest) for c in chunks)


def test_f5_chunks_against_upstream_when_importable():
    utils = pytest.importorskip("f5_tts.infer.utils_infer")
    for budget in (0, 135, 480):
        assert f5_text.chunk_text(LONG, budget) == utils.chunk_text(LONG, budget)


def test_f5_plans_a_200kb_text_in_upstream_chunks():
    """The budget upstream's infer_process gives a 1 s reference of 18 bytes: int(20 / 1 * (22 - 1)) = 420."""
    ref = f5_text.punctuate_reference_text(REF_TEXT)
    assert f5_text.max_chars_for(ref, F5_RATE, F5_RATE) == int(len(ref.encode()) / 1.0 * (22 - 1.0))
    start = time.monotonic()
    plan = f5_text.plan_chunks(REF_TEXT, LONG, ref_samples=F5_RATE, sample_rate=F5_RATE, ref_samples_24k=F5_RATE)
    assert len(plan) == len(f5_text.chunk_text(LONG, f5_text.max_chars_for(ref, F5_RATE, F5_RATE)))
    assert time.monotonic() - start < 5


def test_f5_speaks_a_long_text_chunk_by_chunk(f5):
    """Twelve chunks of the reference's budget, spoken and cross-faded: each chunk's estimated frames (less
    the reference's and the one Vocos does not give), less one overlap per join."""
    words = SENTENCE * 70  # about 4.6 KB
    plan = f5_text.plan_chunks(REF_TEXT, words, ref_samples=F5_RATE, sample_rate=F5_RATE, ref_samples_24k=F5_RATE)
    assert len(plan) == 12
    start = time.monotonic()
    speech = f5_say(f5, words)
    assert time.monotonic() - start < 30
    ref_frames = f5_text.reference_frames(F5_RATE)
    overlap = int(f5_text.CROSS_FADE_SECONDS * F5_RATE)
    expected = sum((c.frames - ref_frames - 1) * f5_text.HOP_LENGTH for c in plan) - overlap * (len(plan) - 1)
    assert speech.waveform.shape == (1, expected)
    assert bool(speech.waveform.isfinite().all()) and float(speech.waveform.std()) > 1e-4


def _joined_the_slow_way(waves, width):
    """The chunks joined as upstream joins them: the whole result rebuilt at every join."""
    result = waves[0]
    for nxt in waves[1:]:
        n = min(width, len(result), len(nxt))
        if n <= 0:
            result = np.concatenate([result, nxt])
        else:
            mixed = result[len(result) - n:] * np.linspace(1, 0, n) + nxt[:n] * np.linspace(0, 1, n)
            result = np.concatenate([result[:len(result) - n], mixed, nxt[n:]])
    return result


def test_f5_cross_fade_is_linear_and_the_same():
    rng = np.random.default_rng(0)
    for _ in range(200):
        lengths = rng.choice([0, 1, 2, 7, 100, 3599, 3600, 3601, 8000], size=int(rng.integers(1, 7)))
        waves = [rng.standard_normal(int(n)).astype(np.float32) for n in lengths]
        for seconds in (0.15, 0.001, 1e-6, 0.4):
            fast_way = f5_audio.cross_fade(waves, F5_RATE, seconds)
            slow_way = _joined_the_slow_way(waves, int(seconds * F5_RATE))
            assert fast_way.dtype == slow_way.dtype and np.array_equal(fast_way, slow_way)
    waves = [rng.standard_normal(100_000).astype(np.float32) for _ in range(1000)]  # 1000 chunks, 69 minutes
    start = time.monotonic()
    joined = f5_audio.cross_fade(waves, F5_RATE, 0.15)
    assert time.monotonic() - start < 10 and joined.shape == (1000 * 100_000 - 999 * 3600,)


def test_f5_refuses_a_chunk_past_the_dit_positions(f5):
    limit = f5_engine.frame_limit(f5.state.model)
    assert limit == 8192
    for words in ("word " * 40000, "word " * 380):  # no sentence break: 200 KB, and just past 8192 frames
        message = fast(lambda w=words: f5_say(f5, w))
        assert "8,192" in message and "break it into sentences" in message
    f5_say(f5, "word " * 300)  # 7000 frames: within the table, spoken as upstream
    message = fast(lambda: f5_say(f5, "Hello world.", fix_duration=90.0))
    assert "lower fix_duration" in message


# --- Qwen3-TTS ----------------------------------------------------------------------------------------

QWEN = DATA / "qwen3tts" / "custom_voice"
QWEN_PARAMS = {"speaker": "Ryan", "non_streaming_mode": "on"}


def qwen_with_positions(tmp_path, positions: int):
    folder = tmp_path / "custom_voice"
    shutil.copytree(QWEN, folder)
    config = json.loads((folder / "config.json").read_text())
    config["talker_config"]["max_position_embeddings"] = positions
    (folder / "config.json").write_text(json.dumps(config))
    return host.load_model("qwen3tts", folder, device="cpu")


def qwen_positions(loaded, words, params):
    from mizuoto.engines.qwen3tts import engine

    values = loaded.spec.check_speak_params(params)
    request = engine.build_request(loaded.state, ctx=RequestContext(0), params=values,
                                   **engine._tokenized(loaded.state, words, values, None))
    return request.prompt.embeds.shape[1], request.prompt.trailing.shape[1], request.settings.max_new_tokens


def test_qwen_refuses_a_text_past_max_position_embeddings():
    loaded = host.load_model("qwen3tts", QWEN, device="cpu")
    assert loaded.state.config.talker.decoder.max_position_embeddings == 32768  # from config.json
    message = fast(lambda: host.speak(loaded, LONG, seed=1, params=QWEN_PARAMS))
    assert "32,768" in message and "max_position_embeddings" in message and "shorten the text" in message


@pytest.mark.parametrize("mode", ["on", "off"])
def test_qwen_limit_comes_from_the_config_and_generation_runs_as_upstream(tmp_path, mode):
    """With max_position_embeddings made small: a prompt and text that take every position are refused; one
    that leaves room generates as upstream does, past the last position too (upstream caps nothing), the
    same samples as with the configured 32,768 positions."""
    words = "Hello there, this is a test."
    params = {**QWEN_PARAMS, "non_streaming_mode": mode}
    probe = qwen_with_positions(tmp_path / "probe", 32768)
    prefill, trailing, max_new = qwen_positions(probe, words, params)
    tight = qwen_with_positions(tmp_path / "tight", prefill + trailing)
    message = fast(lambda: host.speak(tight, words, seed=1, params=params))
    assert f"{prefill + trailing:,}" in message and "max_position_embeddings" in message
    roomy = qwen_with_positions(tmp_path / "roomy", prefill + trailing + 3)
    assert qwen_positions(roomy, words, params)[2] == max_new  # not capped
    beyond = host.speak(roomy, words, seed=1, params=params)
    assert torch.equal(beyond.waveform, host.speak(probe, words, seed=1, params=params).waveform)
    # and it did speak past the last position: stopped there, the speech would be shorter
    stopped = host.speak(probe, words, seed=1, params={**params, "max_new_tokens": trailing + 4})
    assert stopped.waveform.shape[-1] < beyond.waveform.shape[-1]


# --- VoxCPM -------------------------------------------------------------------------------------------

VOX = DATA / "voxcpm" / "e2e"
VOX_SHORT = {"retry_badcase": False}


@pytest.fixture(scope="module")
def vox():
    return {kind: host.load_model("voxcpm", VOX / kind, device="cpu") for kind in ("v1", "v2")}


def test_voxcpm_refuses_a_long_text_before_encoding_audio(vox, monkeypatch):
    from mizuoto.audio import files
    from mizuoto.engines.voxcpm import engine

    def never(*args, **kwargs):
        raise AssertionError("the reference was encoded for a text that cannot fit")

    monkeypatch.setattr(engine, "_encode", never)
    reference = files.read(VOX / "prompt16.wav")
    for kind, loaded in vox.items():
        assert engine.position_limit(loaded.state) == (256, "max_length")
        message = fast(lambda m=loaded: host.speak(m, LONG, seed=1, params=VOX_SHORT, reference=reference,
                                                   reference_text="a prompt"))
        assert "max_length 256" in message and "split it" in message, kind


def test_voxcpm_refuses_a_prefill_that_cannot_start(vox):
    from mizuoto.engines.voxcpm import generate

    assert generate.certain_steps(max_len=4096, min_len=2) == 3 and generate.certain_steps(1, 2) == 0
    generate.check_positions(253, 4096, 2, 256)  # 253 + 3 steps: fits
    with pytest.raises(InputError, match="take 254 positions and its first 3 patches 3 more") as info:
        generate.check_positions(254, 4096, 2, 256)
    one_line(info)
    words = "hello world " * 30  # 360 tokens of the tiny tokenizer
    message = fast(lambda: host.speak(vox["v2"], words, seed=1, params=VOX_SHORT))
    assert "max_length 256" in message


def test_voxcpm_shorter_rope_table_is_the_limit(tmp_path):
    folder = tmp_path / "v2"
    shutil.copytree(VOX / "v2", folder)
    config = json.loads((folder / "config.json").read_text())
    config["lm_config"]["max_position_embeddings"] = 100
    (folder / "config.json").write_text(json.dumps(config))
    loaded = host.load_model("voxcpm", folder, device="cpu")
    from mizuoto.engines.voxcpm import engine

    assert engine.position_limit(loaded.state) == (100, "max_position_embeddings")
    message = fast(lambda: host.speak(loaded, "hello world " * 12, seed=1, params=VOX_SHORT))
    assert "max_position_embeddings 100" in message
    speech = host.speak(loaded, "hello world", seed=1, params={**VOX_SHORT, "max_len": 6, "min_len": 6})
    assert speech.waveform.shape == (1, 6 * 4 * 96)
