"""Word-level timestamps against openai-whisper's own `whisper.timing` (tiny random model): the median
filter, DTW paths (ties included), alignment heads, `find_alignment` and `add_word_timestamps` give
upstream's results exactly. Upstream runs its own model (hooks, `disable_sdpa`), ours runs ours."""

import base64
import copy
import gzip
from types import SimpleNamespace

import numpy as np
import pytest
import torch

whisper = pytest.importorskip("whisper")
pytest.importorskip("numba")  # upstream's DTW

import whisper.timing as up  # noqa: E402
from helpers import tiny_upstream_whisper  # noqa: E402
from whisper.tokenizer import get_tokenizer as up_get_tokenizer  # noqa: E402

from mizuoto.engines.whisper import alignment_heads as heads_module  # noqa: E402
from mizuoto.engines.whisper import checkpoint, timing  # noqa: E402
from mizuoto.engines.whisper.tokenizer import get_tokenizer  # noqa: E402

DIMS = dict(n_mels=80, n_audio_ctx=1500, n_audio_state=64, n_audio_head=2, n_audio_layer=2, n_vocab=51865,
            n_text_ctx=448, n_text_state=64, n_text_head=2, n_text_layer=2)
TEXTS = {
    "en": [" Hello world.", " (Well,) \"this\" is a test, isn't it? Yes!",
           " The quick brown fox jumps over 13 lazy dogs."],
    "ja": ["こんにちは、世界。今日は良い天気ですね。"],
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    model = tiny_upstream_whisper(DIMS, sharpen_cross_attention=8.0)
    path = tmp_path_factory.mktemp("whisper") / "tiny.pt"
    torch.save({"dims": DIMS, "model_state_dict": model.state_dict()}, path)
    return model, checkpoint.load(path).eval()


def _dump(mask: np.ndarray) -> bytes:
    return base64.b85encode(gzip.compress(np.ascontiguousarray(mask, dtype=bool).tobytes()))


def _same_timings(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert (g.word, g.tokens) == (w.word, w.tokens)
        assert g.start == w.start and g.end == w.end and g.probability == w.probability, (g, w)
        assert type(g.start) is type(w.start) and type(g.probability) is type(w.probability)


# -- median filter and DTW -------------------------------------------------------------------------


@pytest.mark.parametrize("width", [1, 3, 5, 7, 9])
def test_median_filter(width):
    generator = torch.Generator().manual_seed(width)
    for shape in [(1,), (2,), (4,), (5,), (3, 4), (3, 6), (37,), (2, 3, 50), (6, 9, 300), (2, 2, 3, 17)]:
        x = torch.randn(*shape, generator=generator)
        if len(shape) == 3:
            x = x.round(decimals=1)  # repeated values within a window
        want = up.median_filter(x, width)
        got = timing.median_filter(x, width)
        assert got.shape == want.shape and torch.equal(got, want), shape


def test_median_filter_rejects_an_even_width():
    with pytest.raises(ValueError, match="odd"):
        timing.median_filter(torch.randn(3, 20), 4)
    with pytest.raises(AssertionError):
        up.median_filter(torch.randn(3, 20), 4)
    # too short to filter: returned before the width is checked, as upstream
    assert torch.equal(timing.median_filter(torch.arange(2.0), 4), up.median_filter(torch.arange(2.0), 4))


def test_dtw_paths_match_upstream():
    rng = np.random.default_rng(0)
    cases = [np.zeros((1, 1)), np.zeros((3, 3)), np.ones((1, 7)), np.ones((6, 1)), np.zeros((4, 9))]
    for _ in range(150):
        n, m = int(rng.integers(1, 25)), int(rng.integers(1, 60))
        cases.append(rng.integers(-2, 3, (n, m)))  # small integers: ties everywhere
        cases.append(rng.standard_normal((n, m)))
    cases.append(rng.standard_normal((40, 750)))
    for x in cases:
        x = torch.from_numpy(np.asarray(x, dtype=np.float32))
        want = up.dtw(x)
        got = timing.dtw(x)
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want), x.shape


def test_dtw_float64_input_accumulates_like_upstream():
    """float64 costs that differ below float32 precision: the same float32 accumulation and choices."""
    rng = np.random.default_rng(1)
    for _ in range(20):
        x = torch.from_numpy(1.0 + rng.integers(0, 4, (12, 30)) * 1e-9 + rng.standard_normal((12, 30)) * 1e-8)
        assert np.array_equal(timing.dtw(x), up.dtw(x))


# -- alignment heads -------------------------------------------------------------------------------


def test_alignment_head_table_and_default(models):
    model, ours = models
    assert heads_module.ALIGNMENT_HEADS == whisper._ALIGNMENT_HEADS
    sizes = {"tiny": (4, 6), "base": (6, 8), "small": (12, 12), "medium": (24, 16), "large": (32, 20),
             "turbo": (4, 20)}  # (decoder layers, heads) of openai's checkpoints
    for name, dump in whisper._ALIGNMENT_HEADS.items():
        layers, n_heads = sizes["turbo" if name.endswith("turbo") else name.split(".")[0].split("-")[0]]
        dims = SimpleNamespace(n_text_layer=layers, n_text_head=n_heads)
        holder = torch.nn.Module()
        holder.dims = dims
        whisper.model.Whisper.set_alignment_heads(holder, dump)  # upstream's own decoding
        got = heads_module.alignment_heads(dims, name)
        assert got.is_sparse and torch.equal(got.to_dense(), holder.alignment_heads.to_dense()), name
    # unknown or no name: the last half of the decoder layers, as upstream's Whisper starts with
    for name in (None, "my-finetune"):
        got = heads_module.alignment_heads(ours, name)
        assert torch.equal(got.to_dense(), model.alignment_heads.to_dense())
    with pytest.raises(ValueError, match="alignment-head mask"):
        heads_module.alignment_heads(ours, "tiny")


# -- find_alignment and add_word_timestamps on the model -------------------------------------------


def test_handwritten_encoder_matches_upstream_without_sdpa(models):
    """find_alignment encodes the window again with upstream's manual attention (disable_sdpa)."""
    model, ours = models
    mel = torch.randn(1, 80, 3000, generator=torch.Generator().manual_seed(13))
    with torch.no_grad(), whisper.model.disable_sdpa():
        want = model.encoder(mel)
    with torch.no_grad():
        assert torch.equal(ours.encoder(mel, handwritten=True), want)


@pytest.mark.parametrize("language", ["en", "ja"])
def test_find_alignment(models, language):
    model, ours = models
    up_tokenizer = up_get_tokenizer(True, num_languages=model.num_languages, language=language, task="transcribe")
    tokenizer = get_tokenizer(True, num_languages=ours.num_languages, language=language, task="transcribe")
    generator = torch.Generator().manual_seed(7)
    mel = torch.randn(80, 3000, generator=generator)
    settings = [(3000, 7, 1.0), (1234, 5, 1.0), (600, 7, 2.0)]  # (num_frames, medfilt_width, qk_scale)
    texts = TEXTS[language]
    # upstream's default heads: each text with one setting, every setting at least once
    cases = [(texts[i % len(texts)], settings[i]) for i in range(max(len(texts), 2))]
    model.alignment_heads = whisper.model.Whisper(whisper.model.ModelDimensions(**DIMS)).alignment_heads
    default = heads_module.alignment_heads(ours)
    for text, (num_frames, medfilt_width, qk_scale) in cases:
        tokens = tokenizer.encode(text)
        assert tokens == up_tokenizer.encode(text)
        want = up.find_alignment(model, up_tokenizer, tokens, mel, num_frames, medfilt_width=medfilt_width,
                                 qk_scale=qk_scale)
        got = timing.find_alignment(ours, tokenizer, tokens, mel, num_frames, alignment_heads=default,
                                    medfilt_width=medfilt_width, qk_scale=qk_scale)
        assert len(want) > 1
        _same_timings(got, want)

    # other heads, set on upstream's model as set_alignment_heads does; sparse and dense masks alike
    dump = _dump(np.array([[False, True], [True, False]]))
    model.set_alignment_heads(dump)
    heads = heads_module.decode_alignment_heads(dump, ours)
    tokens = tokenizer.encode(texts[-1])
    want = up.find_alignment(model, up_tokenizer, tokens, mel, 1234, medfilt_width=5)
    _same_timings(timing.find_alignment(ours, tokenizer, tokens, mel, 1234, alignment_heads=heads, medfilt_width=5),
                  want)
    _same_timings(timing.find_alignment(ours, tokenizer, tokens, mel, 1234, alignment_heads=heads.to_dense(),
                                        medfilt_width=5), want)
    assert timing.find_alignment(ours, tokenizer, [], mel, 3000, alignment_heads=None) == []


def _segments(tokenizer, seek=1500):
    """Three decoded segments with timestamp tokens (dropped by add_word_timestamps) around the text."""
    begin = tokenizer.timestamp_begin
    texts = [(" (Hello) there, my friend.", 0.3, 2.1), (" Is \"this\" the way?", 2.1, 9.5),
             (" Yes... it is!", 9.5, 11.0)]
    return [dict(seek=seek, start=seek / 100 + start, end=seek / 100 + end,
                 tokens=[begin + round(start / 0.02), *tokenizer.encode(text), begin + round(end / 0.02)])
            for text, start, end in texts]


def test_add_word_timestamps(models):
    model, ours = models
    model.alignment_heads = whisper.model.Whisper(whisper.model.ModelDimensions(**DIMS)).alignment_heads
    up_tokenizer = up_get_tokenizer(True, num_languages=model.num_languages, language="en", task="transcribe")
    tokenizer = get_tokenizer(True, num_languages=ours.num_languages, language="en", task="transcribe")
    mel = torch.randn(80, 3000, generator=torch.Generator().manual_seed(11))
    heads = heads_module.alignment_heads(ours)
    for num_frames, last_speech, seek in [(3000, 0.0, 0), (1100, 14.0, 1500)]:
        want = _segments(up_tokenizer, seek)
        got = copy.deepcopy(want)
        up.add_word_timestamps(segments=want, model=model, tokenizer=up_tokenizer, mel=mel, num_frames=num_frames,
                               last_speech_timestamp=last_speech)
        timing.add_word_timestamps(segments=got, model=ours, tokenizer=tokenizer, mel=mel, num_frames=num_frames,
                                   last_speech_timestamp=last_speech, alignment_heads=heads)
        assert got == want
        assert sum(len(s["words"]) for s in got) > 3
        for g, w in zip(got, want, strict=True):
            assert [{k: type(v) for k, v in word.items()} for word in g["words"]] == \
                [{k: type(v) for k, v in word.items()} for word in w["words"]]
    empty: list = []
    timing.add_word_timestamps(segments=empty, model=ours, tokenizer=tokenizer, mel=mel, num_frames=3000,
                               last_speech_timestamp=0.0, alignment_heads=None)
    assert empty == []


# -- the heuristics alone, on hand-made alignments ------------------------------------------------

WORDS = [" the", " cat", ".", " (", " sat", ")", "?", " on", ",", " mat", "!", " \"", "word", "\"", " ", "", "-",
         " a", "。", "b."]


def _random_alignment(rng, cls):
    n = int(rng.integers(0, 14))
    out, t = [], float(rng.uniform(0, 3))
    for _ in range(n):
        start = t + float(rng.choice([0.0, 0.02, 0.5]))
        end = start + float(rng.choice([0.0, 0.02, 0.1, 0.3, 0.6, 1.5, 4.0]))
        word = str(rng.choice(WORDS))
        tokens = [int(v) for v in rng.integers(0, 50000, int(rng.integers(1, 3)))]
        out.append(cls(word, tokens, np.float64(start), np.float64(end), np.float64(rng.uniform())))
        t = end
    return out


def test_merge_punctuations():
    rng = np.random.default_rng(3)
    for _ in range(300):
        want = _random_alignment(rng, up.WordTiming)
        got = [timing.WordTiming(w.word, list(w.tokens), w.start, w.end, w.probability) for w in want]
        up.merge_punctuations(want, "\"'“¿([{-", "\"'.。,，!！?？:：”)]}、")
        timing.merge_punctuations(got, "\"'“¿([{-", "\"'.。,，!！?？:：”)]}、")
        assert [(g.word, g.tokens) for g in got] == [(w.word, w.tokens) for w in want]


def test_add_word_timestamps_heuristics(monkeypatch):
    """Both add_word_timestamps on the same hand-made alignments (long words at sentence ends, after
    pauses, beyond the segment bounds): the same words, times and segment bounds."""
    rng = np.random.default_rng(5)
    queue: dict = {}
    monkeypatch.setattr(up, "find_alignment", lambda *args, **kwargs: queue.pop("up"))
    monkeypatch.setattr(timing, "find_alignment", lambda *args, **kwargs: queue.pop("ours"))
    tokenizer = SimpleNamespace(eot=50257)
    for case in range(400):
        alignment = _random_alignment(rng, timing.WordTiming)
        queue["up"] = [up.WordTiming(w.word, list(w.tokens), w.start, w.end, w.probability) for w in alignment]
        queue["ours"] = alignment
        # split the aligned tokens (plus timestamp tokens) into 1-3 segments
        n_tokens = sum(len(w.tokens) for w in alignment)
        cuts = sorted(int(c) for c in rng.integers(0, n_tokens + 1, int(rng.integers(0, 3))))
        bounds = [0, *cuts, n_tokens]
        seek = int(rng.choice([0, 700, 3000]))
        segments = []
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            start = float(rng.uniform(0, 12))
            segments.append(dict(seek=seek, start=start, end=start + float(rng.uniform(0, 5)),
                                 tokens=[50364 + a] + [7] * (b - a) + [50364 + b]))
        last_speech = float(rng.choice([0.0, 1.0, 10.0]))
        want = copy.deepcopy(segments)
        up.add_word_timestamps(segments=want, model=None, tokenizer=tokenizer, mel=None, num_frames=0,
                               last_speech_timestamp=last_speech)
        timing.add_word_timestamps(segments=segments, model=None, tokenizer=tokenizer, mel=None, num_frames=0,
                                   last_speech_timestamp=last_speech, alignment_heads=None)
        assert segments == want, case
        for g, w in zip(segments, want, strict=True):
            assert [type(v) for word in g["words"] for v in word.values()] == \
                [type(v) for word in w["words"] for v in word.values()]
            assert type(g["start"]) is type(w["start"]) and type(g["end"]) is type(w["end"])
