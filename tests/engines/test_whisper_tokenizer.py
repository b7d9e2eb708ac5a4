"""Whisper tokenizer against openai-whisper's own (the oracle): special tokens, start-of-transcript
sequences, suppressed tokens, encode/decode, timestamps and word splitting."""

import random

import pytest

from mizuoto.engines.whisper import languages, tokenizer

W = pytest.importorskip("whisper.tokenizer")

# (multilingual, num_languages, language, task) as given to get_tokenizer.
CONFIGS = [
    (True, 99, None, None),
    (True, 99, "en", "transcribe"),
    (True, 99, "fr", "translate"),
    (True, 99, "ja", "transcribe"),
    (True, 99, "zh", "translate"),
    (True, 99, "th", None),
    (True, 99, "Mandarin", "transcribe"),
    (True, 99, "castilian", "translate"),
    (True, 100, None, None),
    (True, 100, "de", "transcribe"),
    (True, 100, "yue", "translate"),
    (True, 100, "Japanese", "transcribe"),
    (True, 100, "my", "transcribe"),
    (False, 99, None, None),
    (False, 99, "en", "translate"),  # ignored by English-only tokenizers
]

TEXTS = [
    "",
    " ",
    "Hello world!",
    " Hello world, it's me. I'm here; you'll see -- don't worry.",
    "   leading spaces and trailing   ",
    "Ça va? Déjà vu, naïve café, Straße, ñandú, Ångström.",
    "Привет, как дела? Ελληνικά. שלום עולם. مرحبا بالعالم",
    "我们今天去公园散步，天气很好。",
    "日本語のテキストです。カタカナとひらがな、漢字。",
    "สวัสดีครับ ยินดีที่ได้รู้จัก",
    "한국어 문장입니다.",
    "emoji 😀👍🏽 🇯🇵 family 👨‍👩‍👧 ♪♪ music ♫",
    "numbers 1234567 3.14159 and symbols (( [DAVID] )) <<>> {{x}} ~@#",
    "line\nbreaks\n\n\ttabs",
    "\u200b zero width, \u00a0nbsp, and \ufffd replacement",
]


def ours_and_theirs(multilingual, num_languages, language, task):
    kwargs = dict(num_languages=num_languages, language=language, task=task)
    return tokenizer.get_tokenizer(multilingual, **kwargs), W.get_tokenizer(multilingual, **kwargs)


def ids(config):
    return "-".join(str(part) for part in config)


@pytest.fixture(params=CONFIGS, ids=ids)
def pair(request):
    return ours_and_theirs(*request.param)


def outcome(fn, *args):
    """Result, or the exception type, so that upstream's failures are matched too."""
    try:
        return fn(*args)
    except Exception as error:
        return type(error)


def test_language_tables_equal_upstream():
    assert list(languages.LANGUAGES.items()) == list(W.LANGUAGES.items())
    assert list(languages.TO_LANGUAGE_CODE.items()) == list(W.TO_LANGUAGE_CODE.items())
    assert tokenizer.LANGUAGES is languages.LANGUAGES


@pytest.mark.parametrize("name,num_languages,n_vocab", [("gpt2", 99, 51864), ("multilingual", 99, 51865),
                                                        ("multilingual", 100, 51866)])
def test_encoding_equals_upstream(name, num_languages, n_vocab):
    ours = tokenizer.get_encoding(name=name, num_languages=num_languages)
    theirs = W.get_encoding(name=name, num_languages=num_languages)
    assert ours.n_vocab == theirs.n_vocab == n_vocab
    assert ours.name == theirs.name
    assert ours._pat_str == theirs._pat_str
    assert ours._mergeable_ranks == theirs._mergeable_ranks
    assert ours._special_tokens == theirs._special_tokens
    assert ours.eot_token == theirs.eot_token
    assert tokenizer.get_encoding(name=name, num_languages=num_languages) is ours


def test_special_tokens_equal_upstream(pair):
    ours, theirs = pair
    assert ours.special_tokens == theirs.special_tokens
    assert list(ours.special_tokens.values()) == sorted(ours.special_tokens.values())
    assert (ours.language, ours.task, ours.num_languages) == (theirs.language, theirs.task, theirs.num_languages)
    for name in ("eot", "transcribe", "translate", "sot", "sot_lm", "sot_prev", "no_speech", "no_timestamps",
                 "timestamp_begin"):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert outcome(lambda: ours.language_token) == outcome(lambda: theirs.language_token)
    for code in [*W.LANGUAGES, "xx", "english"]:
        assert outcome(ours.to_language_token, code) == outcome(theirs.to_language_token, code), code


def test_sequences_and_suppression_equal_upstream(pair):
    ours, theirs = pair
    assert ours.sot_sequence == theirs.sot_sequence
    assert ours.sot_sequence_including_notimestamps == theirs.sot_sequence_including_notimestamps
    assert ours.non_speech_tokens == theirs.non_speech_tokens


def test_language_tokens_equal_upstream_as_sets(pair):
    ours, theirs = pair
    # Upstream lists them in set-iteration order, which follows the hash seed; ours are in id order.
    assert ours.all_language_tokens == tuple(sorted(theirs.all_language_tokens))
    assert dict(zip(ours.all_language_tokens, ours.all_language_codes, strict=True)) == dict(
        zip(theirs.all_language_tokens, theirs.all_language_codes, strict=True))
    assert ours.all_language_codes == tuple(W.LANGUAGES)[: len(ours.all_language_codes)]


def test_encode_decode_equal_upstream(pair):
    ours, theirs = pair
    for text in TEXTS:
        tokens = ours.encode(text)
        assert tokens == theirs.encode(text), text
        assert ours.decode(tokens) == theirs.decode(tokens) == text
    special = "<|endoftext|> and <|0.00|>"
    assert outcome(ours.encode, special) == outcome(theirs.encode, special)
    assert outcome(ours.encode, special) is ValueError
    assert ours.encode(special, allowed_special="all") == theirs.encode(special, allowed_special="all")
    cut = ours.encode("日本")[:1] + ours.encode("語")[:1]
    for errors in ("replace", "ignore"):
        assert ours.decode(cut, errors=errors) == theirs.decode(cut, errors=errors)


def test_decode_with_timestamps_equal_upstream(pair):
    ours, theirs = pair
    ts = ours.timestamp_begin
    words = ours.encode(" Hello there, friend.") + ours.encode("日本語のテキスト")
    mixes = [
        [*ours.sot_sequence, ts, *words[:3], ts + 54, ts + 60, *words[3:], ts + 1500, ours.eot],
        [ours.sot_prev, *words, ours.sot, ours.no_timestamps, ts + 1, ts + 749, ours.no_speech, ours.sot_lm],
        [ts + i for i in range(0, 1501, 37)],
        words[1::2] + [ts + 7],
    ]
    for tokens in mixes:
        assert ours.decode_with_timestamps(tokens) == theirs.decode_with_timestamps(tokens)
        assert ours.decode(tokens) == theirs.decode(tokens)
    assert ours.decode_with_timestamps([ts, ts + 54, ts + 1500]) == "<|0.00|><|1.08|><|30.00|>"


def test_split_to_word_tokens_equal_upstream(pair):
    ours, theirs = pair
    ts = ours.timestamp_begin
    lone_ff = ours.encoding.encode_single_token(b"\xff")
    cases = [ours.encode(text) for text in TEXTS]
    cases += [
        [*ours.encode(" It's a test, isn't it? Yes -- 'quoted' (aside)."), ours.eot],
        [ts, *ours.encode(" Hello world"), ts + 50, *ours.encode(" again!"), ts + 100, ours.eot],
        ours.encode(" a") + [lone_ff] + ours.encode("b c"),  # a genuinely invalid byte
        ours.encode("日本語")[:-1],  # ends inside a character: the tail is dropped
        ours.encode("我们今天去公园散步") + [ts + 20] + ours.encode("，天气很好。") + [ours.eot],
    ]
    for tokens in cases:
        for split in ("split_to_word_tokens", "split_tokens_on_unicode", "split_tokens_on_spaces"):
            assert getattr(ours, split)(tokens) == getattr(theirs, split)(tokens), (split, tokens)


def test_split_random_token_streams_equal_upstream():
    ours, theirs = ours_and_theirs(True, 99, "zh", "transcribe")
    rng = random.Random(0)
    # Whole-vocabulary ids, pieces of multi-byte characters and lone continuation/lead bytes.
    pool = [t for text in TEXTS[7:12] for t in ours.encode(text)]
    pool += [ours.encoding.encode_single_token(bytes([b])) for b in range(0x80, 0x100)]
    for _ in range(200):
        tokens = [rng.choice(pool) if rng.random() < 0.7 else rng.randrange(ours.eot)
                  for _ in range(rng.randrange(1, 12))]
        if rng.random() < 0.3:
            tokens.insert(rng.randrange(len(tokens) + 1), ours.timestamp_begin + rng.randrange(1501))
        for split in ("split_tokens_on_unicode", "split_tokens_on_spaces"):
            assert outcome(getattr(ours, split), tokens) == outcome(getattr(theirs, split), tokens), tokens


def test_get_tokenizer_defaults_caching_and_errors():
    assert tokenizer.get_tokenizer(True) is tokenizer.get_tokenizer(True)
    multi = tokenizer.get_tokenizer(True)
    assert (multi.language, multi.task) == ("en", "transcribe")
    english = tokenizer.get_tokenizer(False, language="fr", task="translate")
    assert (english.language, english.task, english.sot_sequence) == (None, None, (50257,))
    assert english.split_to_word_tokens(english.encode(" two words")) == ([" two", " words"], [[734], [2456]])
    for module in (tokenizer, W):
        with pytest.raises(ValueError):
            module.get_tokenizer(True, language="klingon")
        with pytest.raises(ValueError):  # Cantonese needs the 100-language vocabulary
            module.get_tokenizer(True, num_languages=99, language="yue")
    assert outcome(lambda: tokenizer.get_tokenizer(False).language_token) is ValueError
    odd = ours_and_theirs(True, 99, "en", "summarise")  # any task but "transcribe" means translate
    assert odd[0].sot_sequence == odd[1].sot_sequence
