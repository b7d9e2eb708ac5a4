"""Native Whisper decoding against openai-whisper's `decode` / `detect_language` on a tiny random model:
the same tokens, text, average log probability, no-speech probability, compression ratio, language
and temperature, bit for bit, for greedy, sampled (best_of) and beam-search decoding with every option.

The random weights are shaped so that decoding is not degenerate: large decoder positions make the
chosen token change along the sequence, a few text tokens, the timestamps, <|endoftext|> and
<|nospeech|> get larger embeddings (so sequences hold timestamp pairs and end early), and stronger
encoder convolutions and cross attention make the two test audio decode differently. A scripted model
(logits a fixed function of each row's token history) drives the search bookkeeping into the corners a
random network rarely reaches: patience, unfinished beams, the length penalty, a full text context.
"""

import math
import zlib

import pytest
import torch

whisper = pytest.importorskip("whisper")

from mizuoto.engines.whisper import checkpoint, decoding  # noqa: E402

DIMS = dict(n_mels=80, n_audio_ctx=1500, n_audio_state=64, n_audio_head=2, n_audio_layer=2, n_vocab=51865,
            n_text_ctx=448, n_text_state=64, n_text_head=2, n_text_layer=2)
# upstream's beam search hands a torch tensor to np.argsort (NumPy 2 deprecates how torch wraps the result)
pytestmark = pytest.mark.filterwarnings("ignore:__array_wrap__ must accept context:DeprecationWarning")
FIELDS = ("tokens", "text", "avg_logprob", "no_speech_prob", "compression_ratio", "language", "temperature",
          "language_probs")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny matrices: one thread is several times faster than two on a busy two-core machine (and both
    implementations run under the same setting)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    torch.manual_seed(0)  # tests may seed the global generator; library code never does
    model = whisper.model.Whisper(whisper.model.ModelDimensions(**DIMS)).eval()
    tok = whisper.tokenizer.get_tokenizer(True, num_languages=model.num_languages)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "ln" in name:
                param.copy_(torch.randn_like(param) * 0.3 + (1.0 if name.endswith("ln.weight") else 0.0))
        model.decoder.positional_embedding.copy_(torch.randn_like(model.decoder.positional_embedding) * 8)
        embedding = model.decoder.token_embedding.weight
        favoured = torch.randint(220, 5000, (60,), generator=torch.Generator().manual_seed(7))
        embedding[favoured] *= 3
        embedding[tok.eot] *= 5
        embedding[tok.no_speech] *= 4
        embedding[tok.timestamp_begin: tok.timestamp_begin + 300] *= 2
        model.encoder.conv1.weight *= 4
        model.encoder.conv2.weight *= 4
        for block in model.decoder.blocks:
            block.cross_attn.out.weight *= 20
            block.cross_attn.query.weight *= 10
    path = tmp_path_factory.mktemp("whisper") / "tiny.pt"
    torch.save({"dims": DIMS, "model_state_dict": model.state_dict()}, path)
    return model, checkpoint.load(path)


@pytest.fixture(scope="module")
def mel():
    """Log-mel of two synthetic clips: an amplitude-modulated tone and noise."""
    t = torch.arange(16000 * 8) / 16000
    tone = 0.5 * torch.sin(2 * torch.pi * 300 * t) * torch.sin(2 * torch.pi * 0.5 * t)
    noise = 0.1 * torch.randn(16000 * 12, generator=torch.Generator().manual_seed(1))
    return torch.stack([whisper.log_mel_spectrogram(whisper.pad_or_trim(a)) for a in (tone, noise)])


def upstream_decode(model, mel, options: dict, seed=None):
    if seed is not None:
        torch.manual_seed(seed)
    return whisper.decode(model, mel, whisper.DecodingOptions(fp16=False, **options))


def ours_decode(model, mel, options: dict, seed=None):
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    # a scripted model has no layers to split into graph segments: its step is its forward
    steps = (lambda tokens, cache: model.decoder(tokens, None, cache)) if isinstance(model, ScriptedModel) else None
    return decoding.decode(model, mel, decoding.DecodingOptions(**options), generator=generator, steps=steps)


def assert_same(got, want):
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_same(g, w)
        return
    for name in FIELDS:
        a, b = getattr(got, name), getattr(want, name)
        same = a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
        assert same, f"{name}: ours {a!r}, upstream {b!r}"
    assert torch.equal(got.audio_features, want.audio_features)


S = {"sample_len": 32}  # short runs keep the suite fast; the default (n_text_ctx // 2) runs in two cases
CASES = {
    # name: (options, audio in the batch, seed)
    "greedy-timestamps-detect": ({}, 2, None),
    "greedy-no-timestamps-en": ({**S, "without_timestamps": True, "language": "en"}, 2, None),
    "greedy-cut-at-sample_len": ({"sample_len": 5, "language": "en"}, 2, None),
    "sampling-best_of": ({**S, "temperature": 0.7, "best_of": 3}, 1, 5),
    "sampling-one-each": ({**S, "temperature": 0.7, "language": "en"}, 2, 11),
    "beam-patience-1": ({**S, "beam_size": 3, "patience": 1.0}, 1, None),
    "beam-patience-2-penalty": ({**S, "beam_size": 3, "patience": 2.0, "length_penalty": 0.6}, 1, None),
    "beam-no-timestamps": ({**S, "beam_size": 3, "without_timestamps": True, "language": "en"}, 1, None),
    "prompt-prefix-text": ({**S, "prompt": " hello there, general", "prefix": "so the"}, 2, None),
    "prompt-prefix-ids-beam": ({**S, "prompt": [400, 401, 402], "prefix": [2321], "beam_size": 3}, 1, None),
    # the last n_text_ctx // 2 - 1 prompt ids are kept; the text context fills up before sample_len
    "long-prompt-fills-context": ({"prompt": list(range(300, 600)), "language": "en"}, 1, None),
    # a prefix longer than n_text_ctx // 2 - sample_len keeps its end
    "long-prefix-cut": ({"sample_len": 221, "prefix": [2321, 4376, 3203, 2457, 1563], "language": "en"}, 1, None),
    "translate": ({**S, "task": "translate", "language": "fr"}, 2, None),
    "suppress-none": ({**S, "suppress_tokens": "", "suppress_blank": False}, 2, None),
    "suppress-list": ({**S, "suppress_tokens": [2321, 4376, 50579], "language": "en"}, 2, None),
    "suppress-string-with-minus-one": ({**S, "suppress_tokens": "-1,2321"}, 1, None),
    "max-initial-timestamp-0": ({**S, "max_initial_timestamp": 0.0}, 2, None),
    "max-initial-timestamp-none-sampled": ({**S, "max_initial_timestamp": None, "temperature": 1.0, "best_of": 2},
                                           1, 3),
}


@pytest.mark.parametrize("case", list(CASES))
def test_decode_matches_upstream(models, mel, case):
    options, n_audio, seed = CASES[case]
    upstream, ours = models
    want = upstream_decode(upstream, mel[:n_audio], options, seed)
    state = torch.random.get_rng_state()
    got = ours_decode(ours, mel[:n_audio], options, seed)
    assert torch.equal(torch.random.get_rng_state(), state), "our decoding touched the global generator"
    assert_same(got, want)


def test_the_test_model_decodes_something(models, mel):
    """Guard against a degenerate test model: timestamp pairs, text, and the two audio differ."""
    upstream, _ = models
    results = upstream_decode(upstream, mel, {})
    tok = whisper.tokenizer.get_tokenizer(True)
    assert results[0].tokens != results[1].tokens
    for result in results:
        stamps = [t for t in result.tokens if t >= tok.timestamp_begin]
        assert len(stamps) >= 2 and result.text and 0 < result.no_speech_prob < 1


@pytest.mark.parametrize("options,seed", [({"beam_size": 3}, None), ({"temperature": 0.7, "best_of": 3}, 4)])
def test_several_audio_with_groups_decode_as_each_alone(models, mel, options, seed):
    """upstream 20250625 raises here (its cross attention gets n_audio rows of audio for n_audio * n_group
    rows of text); we decode each audio as upstream decodes it alone, one after the other."""
    upstream, ours = models
    if seed is not None:
        torch.manual_seed(seed)
    want = [upstream_decode(upstream, mel[i:i + 1], {**S, **options})[0] for i in range(2)]
    assert_same(ours_decode(ours, mel, {**S, **options}, seed), want)


def test_single_mel_and_audio_features(models, mel):
    upstream, ours = models
    want = upstream_decode(upstream, mel[1], {"language": "en"})
    got = ours_decode(ours, mel[1], {"language": "en"})
    assert isinstance(got, decoding.DecodingResult)
    assert_same(got, want)
    with torch.no_grad():
        features = upstream.encoder(mel)
    assert_same(ours_decode(ours, features, {}), upstream_decode(upstream, features, {}))


def test_lang_id_task(models, mel):
    upstream, ours = models
    want = upstream_decode(upstream, mel, {"task": "lang_id"})
    got = ours_decode(ours, mel, {"task": "lang_id"})
    assert_same(got, want)
    assert got[0].language_probs is not None


def test_detect_language(models, mel):
    upstream, ours = models
    with torch.no_grad():
        want_tokens, want_probs = whisper.decoding.detect_language(upstream, mel)
    got_tokens, got_probs = decoding.detect_language(ours, mel)
    # equal dicts; upstream's key order follows set iteration (the hash seed), ours is the token order
    assert torch.equal(got_tokens, want_tokens) and got_probs == want_probs
    with torch.no_grad():
        want_token, want_single = whisper.decoding.detect_language(upstream, mel[0])
    got_token, got_single = decoding.detect_language(ours, mel[0])
    assert got_token.shape == () and torch.equal(got_token, want_token) and got_single == want_single


def test_english_only_model_cannot_detect(tmp_path):
    dims = dict(DIMS, n_vocab=51864)
    torch.manual_seed(1)
    model = whisper.model.Whisper(whisper.model.ModelDimensions(**dims)).eval()
    torch.save({"dims": dims, "model_state_dict": model.state_dict()}, tmp_path / "en.pt")
    ours = checkpoint.load(tmp_path / "en.pt")
    with pytest.raises(ValueError, match="doesn't have language tokens"):
        decoding.detect_language(ours, torch.zeros(80, 3000))


@pytest.mark.parametrize("options,message", [
    ({"beam_size": 2, "best_of": 2}, "can't be given together"),
    ({"best_of": 2}, "not compatible"),
    ({"patience": 2.0}, "requires beam_size"),
    ({"length_penalty": 1.5}, "between 0 and 1"),
    ({"beam_size": 1, "patience": 0.1}, "Invalid beam size"),
])
def test_bad_options(models, options, message):
    _, ours = models
    with pytest.raises(ValueError, match=message):
        decoding.decode(ours, torch.zeros(80, 3000), decoding.DecodingOptions(**options))


def test_compression_ratio_is_upstreams():
    for text in ("", "a", "hello hello hello hello", "ééé — 日本語"):
        if text:
            assert decoding.compression_ratio(text) == whisper.utils.compression_ratio(text)


# ---------------------------------------------------------------------------------------------------
# A scripted "model" for the search bookkeeping: its logits are a fixed function of each row's whole
# token history, so both implementations see the same numbers for the same prefixes, and the weights
# can make many beams end at once, or run until the text context is full.


class ScriptedDecoder:
    """Both caches keep each row's token history: upstream's dict (under the blocks' key and value
    modules, which its beam search reorders) and ours (an object with length, reorder and cross)."""

    def __init__(self, favoured: torch.Tensor, scale: float, eot_bias: float, vocab: int):
        key, value = torch.nn.Identity(), torch.nn.Identity()
        self.blocks = [type("Block", (), {"attn": type("Attn", (), {"key": key, "value": value})()})()]
        self.token_embedding = torch.nn.Embedding(1, 1)
        self.favoured, self.scale, self.eot_bias, self.vocab = favoured, scale, eot_bias, vocab

    def logits_of(self, history: torch.Tensor) -> torch.Tensor:
        rows = []
        for row in history.tolist():
            generator = torch.Generator().manual_seed(zlib.crc32(str(row).encode()))
            logits = torch.full((self.vocab,), -8.0)
            logits[self.favoured] = torch.randn(len(self.favoured), generator=generator) * self.scale
            logits[EOT] += self.eot_bias
            rows.append(logits)
        return torch.stack(rows)

    def new_cache(self, batch, capacity=None):
        return ScriptedCache()

    def __call__(self, tokens, audio, cache=None, kv_cache=None):
        if kv_cache is not None:  # upstream
            key = self.blocks[0].attn.key
            history = tokens if key not in kv_cache else torch.cat([kv_cache[key], tokens], dim=1)
            kv_cache[key] = kv_cache[self.blocks[0].attn.value] = history
        else:
            history = tokens if cache.history is None else torch.cat([cache.history, tokens], dim=1)
            cache.history, cache.length = history, history.shape[1]
        n = tokens.shape[1]
        return torch.stack([self.logits_of(history[:, : history.shape[1] - n + i + 1]) for i in range(n)], dim=1)


class ScriptedCache:
    def __init__(self):
        self.history, self.length, self.cross = None, 0, None

    def reorder(self, order):
        self.history = self.history[order]


class ScriptedModel:
    is_multilingual, num_languages = True, 99

    def __init__(self, **kwargs):
        self.dims = whisper.model.ModelDimensions(**dict(DIMS, n_audio_state=1))
        self.decoder = ScriptedDecoder(vocab=DIMS["n_vocab"], **kwargs)

    def install_kv_cache_hooks(self):
        return {}, []


EOT = 50257


def scripted(seed: int, scale: float, eot_bias: float, timestamps: int = 40) -> ScriptedModel:
    generator = torch.Generator().manual_seed(seed)
    text = torch.randint(220, 5000, (24,), generator=generator)
    stamps = 50364 + torch.randint(0, 200, (timestamps,), generator=generator)
    favoured = torch.cat([text, torch.tensor([EOT, 50362]), stamps]).unique()  # 50362: <|nospeech|>
    return ScriptedModel(favoured=favoured, scale=scale, eot_bias=eot_bias)


SCRIPTED = {
    # name: (model seed, scale, end-of-text bias, options, audio, sampling seed)
    "beams-patience": (2, 3.0, 2.0, {"beam_size": 3, "patience": 2.0, "language": "en", "without_timestamps": True,
                                     "sample_len": 30}, 1, None),
    "beams-unfinished": (2, 3.0, 0.0, {"beam_size": 3, "language": "en", "without_timestamps": True,
                                       "sample_len": 30}, 1, None),
    "beams-length-penalty": (3, 2.0, 4.0, {"beam_size": 3, "length_penalty": 0.2, "language": "de",
                                           "sample_len": 30}, 1, None),
    "beams-fill-context": (3, 2.0, -30.0, {"beam_size": 2, "language": "en", "without_timestamps": True,
                                           "prompt": list(range(300, 600))}, 1, None),
    "greedy-fills-context": (4, 2.0, -30.0, {"language": "en", "prompt": list(range(300, 600))}, 2, None),
    "sampled-flat": (5, 0.5, 0.0, {"temperature": 1.0, "best_of": 4, "language": "en", "sample_len": 40}, 1, 7),
}


@pytest.mark.parametrize("case", list(SCRIPTED))
def test_search_bookkeeping_matches_upstream(case):
    seed, scale, eot_bias, options, n_audio, sample_seed = SCRIPTED[case]
    model = scripted(seed, scale, eot_bias)
    features = torch.zeros(n_audio, DIMS["n_audio_ctx"], 1)
    assert_same(ours_decode(model, features, options, sample_seed),
                upstream_decode(model, features, options, sample_seed))


def test_sampling_probabilities_and_draws_are_categoricals():
    """Our probabilities are Categorical(logits=logits / T).probs bit for bit, and multinomial1 on them
    with a generator seeded N draws what Categorical.sample() draws after torch.manual_seed(N)."""
    from mizuoto.runtime.sampling import multinomial1

    logits = torch.randn(16, 51865, generator=torch.Generator().manual_seed(0)) * 4
    logits[:, 50000:] = -math.inf
    for temperature in (0.2, 0.7, 1.0):
        want = torch.distributions.Categorical(logits=logits / temperature)
        probs = decoding.categorical_probs(logits, temperature)
        assert torch.equal(probs, want.probs)
        torch.manual_seed(9)
        drawn = want.sample()
        assert torch.equal(multinomial1(probs, torch.Generator().manual_seed(9))[0][:, 0], drawn)


class HostReads(torch.overrides.TorchFunctionMode):
    """Counts the tensor methods that wait on the device to hand a value to Python."""

    READS = {"__bool__", "item", "tolist", "cpu", "nonzero", "__int__", "__float__", "__index__"}

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += getattr(func, "__name__", "") in self.READS
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("options", [{}, {"temperature": 0.7, "best_of": 2},
                                     {"beam_size": 3, "without_timestamps": True}])
def test_one_host_read_per_step(models, mel, options):
    """Each step reads the device once (greedy: whether all rows ended; sampling: that and the
    distribution's validity; beam search: its candidates), plus a few reads for the whole run."""
    _, ours = models
    with torch.no_grad():
        features = ours.encoder(mel[:1])
    steps = 12
    with HostReads() as reads:
        options = decoding.DecodingOptions(language="en", sample_len=steps, **options)
        result = decoding.decode(ours, features[0], options, generator=torch.Generator().manual_seed(0))
    assert len(result.tokens) >= 1
    assert reads.count <= steps + 4, reads.count


def test_empty_candidate_ranks_last(models, mel):
    """With suppress_blank=False a beam may end at once; upstream then divides by its length, zero, and
    raises. We rank the empty candidate last."""
    upstream, ours = models
    options = {"language": "en", "sample_len": 12, "beam_size": 3, "without_timestamps": True,
               "suppress_blank": False}
    with pytest.raises(ZeroDivisionError):
        upstream_decode(upstream, mel[0], options)
    result = ours_decode(ours, mel[0], options)
    assert result.tokens and result.avg_logprob == result.avg_logprob
