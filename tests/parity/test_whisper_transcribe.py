"""`transcribe()` against openai-whisper's own `whisper.transcribe` (tiny random model, synthetic audio of
10, 45 and 70 s): identical result dicts (text, language, every segment field and word, with their
types) for the temperature fallback, greedy, beam search with best_of, prompts, language detection,
translation, clips, word timestamps and the hallucination-silence heuristics. Upstream draws from
the global generator after `torch.manual_seed(s)`, ours from `torch.Generator().manual_seed(s)`.

The model is upstream's tiny random Whisper, shaped so that its outputs are not degenerate: the
final LayerNorm gives every position a constant 1 in channel 0 (weight 0, bias 1), so channel 0 of
each token embedding acts as a logit bias (a few hundred English words, timestamps falling off
slowly, end of text, no speech); a negative LayerNorm scale and large decoder positions and
cross-attention outputs keep greedy decoding from repeating one token, and tie the output to the
audio. A 128-token text context keeps each decode at most 64 tokens.
"""

import copy

import numpy as np
import pytest
import torch

whisper = pytest.importorskip("whisper")
pytest.importorskip("numba")  # upstream's DTW (word timestamps)

from helpers import tiny_upstream_whisper  # noqa: E402
from whisper.tokenizer import get_tokenizer as up_get_tokenizer  # noqa: E402

from mizuoto.core.errors import InputError  # noqa: E402
from mizuoto.engines.whisper import checkpoint  # noqa: E402
from mizuoto.engines.whisper.transcribe import format_timestamp, transcribe  # noqa: E402

# upstream's beam search hands a tensor to np.argsort
pytestmark = pytest.mark.filterwarnings("ignore:__array_wrap__ must accept context:DeprecationWarning")

DIMS = dict(n_mels=80, n_audio_ctx=1500, n_audio_state=64, n_audio_head=2, n_audio_layer=2, n_vocab=51865,
            n_text_ctx=128, n_text_state=64, n_text_head=2, n_text_layer=2)
WORDS = ("the of and to in is you that it he was for on are as with his they at be this have from or one had by "
         "word but not what all were we when your can said there use an each which she do how their if will up "
         "other about out many then them these so some her would make like him into time has look two more write "
         "go see number no way could people my than first water been call who oil its now find long down day did "
         "get come made may part over new sound take only little work know place year live me back give most very "
         "after thing our just name good sentence man think say great where help through much before line right "
         "too mean old any same tell boy follow came want show also around form three small set put end does "
         "another well large must big even such because turn here why ask went men read need land different home "
         "us move try kind hand picture again change off play spell air away animal house point page letter mother "
         "answer found study still learn should America world").split()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Both sides at one intra-op thread (exact and fast for this model). Upstream's DTW is compiled
    first: numba's first compilation resets torch's intra-op thread count (to the core count here),
    which would leave upstream's later windows at another thread count than ours."""
    import whisper.timing

    threads = torch.get_num_threads()
    whisper.timing.dtw_cpu(np.ones((2, 3), dtype=np.float32))
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _build(dims: dict, path):
    """Upstream's tiny random Whisper, shaped as the module docstring says, saved to `path`."""
    multilingual = dims["n_vocab"] >= 51865
    tokenizer = up_get_tokenizer(multilingual, num_languages=99, language="en" if multilingual else None,
                                 task="transcribe" if multilingual else None)
    model = tiny_upstream_whisper(dims, sharpen_cross_attention=8.0)
    with torch.no_grad():
        decoder = model.decoder
        decoder.positional_embedding.mul_(6.0)
        for block in decoder.blocks:
            block.cross_attn.out.weight.mul_(30.0)
        words = sorted({t for w in WORDS for t in tokenizer.encode(" " + w)})
        timestamps = slice(tokenizer.timestamp_begin, None)
        embedding = decoder.token_embedding.weight
        embedding[:, 1:] *= 0.1
        embedding[words, 1:] *= 5.0
        embedding[timestamps, 1:] *= 3.0
        embedding[tokenizer.no_speech, 1:] *= 3.0
        bias = torch.zeros(embedding.shape[0])
        bias[words + tokenizer.encode(".") + tokenizer.encode(",")] = 8.0
        bias[timestamps] = 14.0 - 0.005 * torch.arange(1501)
        bias[tokenizer.eot] = 18.0
        bias[tokenizer.no_speech] = 22.2
        embedding[:, 0] = bias
        decoder.ln.weight.neg_()
        decoder.ln.weight[0] = 0.0
        decoder.ln.bias[0] = 1.0
    torch.save({"dims": dims, "model_state_dict": model.state_dict()}, path)
    return model, checkpoint.load(path).eval()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return _build(DIMS, tmp_path_factory.mktemp("whisper") / "tiny.pt")


@pytest.fixture(scope="module")
def english_models(tmp_path_factory):
    """An English-only checkpoint (n_vocab 51864: the GPT-2 tokenizer, no language tokens)."""
    return _build(dict(DIMS, n_vocab=51864), tmp_path_factory.mktemp("whisper") / "tiny.en.pt")


def _audio(seconds: float, seed: int) -> np.ndarray:
    """Stretches of 0.5-6 s: tone mixtures, noise or silence."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    out = np.zeros_like(t)
    position = 0.0
    while position < seconds:
        length = rng.uniform(0.5, 6)
        kind = rng.choice(["tone", "noise", "silence"], p=[0.5, 0.25, 0.25])
        inside = (t >= position) & (t < position + length)
        if kind == "tone":
            for _ in range(3):
                out[inside] += rng.uniform(0.05, 0.3) * np.sin(2 * np.pi * rng.uniform(100, 3000) * t[inside]
                                                                + rng.uniform(0, 6))
        elif kind == "noise":
            out[inside] += rng.normal(0, rng.uniform(0.01, 0.2), inside.sum())
        position += length
    return out.astype(np.float32)


AUDIO = {"10s": (10, 1), "45s": (45, 2), "70s": (70, 3)}


@pytest.fixture(scope="module")
def audio():
    return {name: _audio(*spec) for name, spec in AUDIO.items()}


def _same(got, want, where="result"):
    """Equal values of the same types, recursively (dict keys in any order)."""
    assert type(got) is type(want), f"{where}: {type(got).__name__} vs {type(want).__name__}"
    if isinstance(want, dict):
        assert got.keys() == want.keys(), f"{where}: keys {sorted(got)} vs {sorted(want)}"
        for key in want:
            _same(got[key], want[key], f"{where}[{key!r}]")
    elif isinstance(want, list):
        assert len(got) == len(want), f"{where}: {len(got)} items vs {len(want)}"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r} vs {want!r}"


def _both(models, audio, seed, **options):
    model, ours = models
    torch.manual_seed(seed)
    want = whisper.transcribe(model, audio, fp16=False, **copy.deepcopy(options))
    got = transcribe(ours, torch.from_numpy(audio), generator=torch.Generator().manual_seed(seed),
                     **copy.deepcopy(options))
    _same(got, want)
    return got


# Each case is (audio, seed, options); what it exercises besides the seek loop is noted.
CASES = {
    # temperatures 0, 0.2, ... 1.0: fallback on compression ratio and log probability, windows skipped as
    # silence, prompts reset after hot windows; the language detected on the first 30 s
    "default": ("70s", 0, {}),
    "greedy": ("45s", 1, dict(temperature=0.0)),
    # beams at temperature 0, two samples per hotter temperature
    "beam2-best_of2": ("45s", 2, dict(beam_size=2, best_of=2, temperature=(0.0, 0.5, 1.0), language="en")),
    "no-conditioning": ("70s", 3, dict(condition_on_previous_text=False)),
    "initial-prompt": ("45s", 4, dict(initial_prompt=" the name of the sound is Mizuoto, " * 3, language="en")),
    "carry-initial-prompt": ("70s", 5, dict(initial_prompt="Hello there, Mizuoto.", carry_initial_prompt=True,
                                            temperature=(0.0, 0.5, 1.0), language="English")),
    "translate": ("10s", 6, dict(language="ja", task="translate", logprob_threshold=-1.5)),
    "clips": ("45s", 7, dict(clip_timestamps="0,5,12", language="en")),
    # timestamp tokens sampled freely (no timestamp rules): unordered and unpaired timestamps
    "without-timestamps": ("45s", 11, dict(without_timestamps=True, temperature=0.0, language="en")),
    # word timestamps: the next window starts after the last word; zero-length segments are emptied
    "words": ("45s", 8, dict(word_timestamps=True, language="en", logprob_threshold=None)),
    # the first segment looks hallucinated after a silence: every window is dropped
    "hallucination": ("45s", 13, dict(word_timestamps=True, hallucination_silence_threshold=1.0)),
    # hallucinations surrounded by silence are cut off
    "hallucination-5s": ("45s", 9, dict(word_timestamps=True, hallucination_silence_threshold=5.0, language="en")),
}
EMPTY = {"hallucination"}  # cases whose result has no text (both sides)


@pytest.mark.parametrize("case", list(CASES))
def test_transcribe_matches_upstream(models, audio, case):
    name, seed, options = CASES[case]
    got = _both(models, audio[name], seed, **options)
    if case in EMPTY:
        assert got["text"] == "" and got["segments"] == []
    else:
        assert got["segments"] and got["text"].strip(), "a degenerate case: no text to compare"


def test_english_only_checkpoint(english_models, audio):
    """No language detection: English, with the GPT-2 tokenizer's special tokens."""
    got = _both(english_models, audio["10s"], 12)
    assert got["language"] == "en" and got["text"].strip()


def test_verbose_output(models, audio, capsys):
    """verbose=True prints the detected language and each segment as upstream does."""
    model, ours = models
    whisper.transcribe(model, audio["10s"], fp16=False, temperature=0.0, verbose=True)
    want = capsys.readouterr().out
    transcribe(ours, audio["10s"], temperature=0.0, verbose=True)
    got = capsys.readouterr().out
    assert got == want and "Detected language" in got and "-->" in got


def test_detected_language_equals_given_language(models, audio):
    """The language detected on the first 30 s, then given explicitly: the same result."""
    detected = _both(models, audio["10s"], 10, temperature=0.0)
    given = _both(models, audio["10s"], 10, temperature=0.0, language=detected["language"])
    assert given == detected


def test_progress_and_interruption(models, audio):
    _, ours = models
    seen = []
    result = transcribe(ours, audio["45s"], temperature=0.0, language="en",
                        progress=lambda done, total: seen.append((done, total)))
    total = 45 * 100
    assert seen and all(t == total for _, t in seen) and seen[-1][0] == total
    assert all(0 < done <= total for done, _ in seen)
    assert len(seen) >= len({s["seek"] for s in result["segments"]})

    class Stop(Exception):
        pass

    def stop(done, total):
        raise Stop

    with pytest.raises(Stop):
        transcribe(ours, audio["45s"], temperature=0.0, language="en", progress=stop)


def test_clip_past_the_end_stops_at_the_end(models, audio):
    """Upstream decodes zero-length windows there and can loop forever; ours cuts the clip at the end."""
    _, ours = models
    options = dict(temperature=0.0, language="en")
    assert transcribe(ours, audio["10s"], clip_timestamps="0,100", **options) == transcribe(ours, audio["10s"],
                                                                                           **options)
    assert transcribe(ours, audio["10s"], clip_timestamps="20", **options)["segments"] == []


def test_bad_inputs(models):
    _, ours = models
    with pytest.raises(InputError, match="not a file path"):
        transcribe(ours, "speech.wav")
    with pytest.raises(InputError, match="mono"):
        transcribe(ours, np.zeros((2, 16000), dtype=np.float32))
    with pytest.raises(InputError, match="clip_timestamps"):
        transcribe(ours, np.zeros(16000, dtype=np.float32), clip_timestamps="0,a", language="en")


def test_format_timestamp():
    from whisper.utils import format_timestamp as up_format

    for seconds in [0.0, 0.0004, 0.0005, 1.5, 59.9996, 61.25, 3599.9995, 3600.0, 7325.127, 123456.789]:
        for hours in (False, True):
            for marker in (".", ","):
                assert format_timestamp(seconds, hours, marker) == up_format(seconds, hours, marker)
