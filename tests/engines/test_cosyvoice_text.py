"""CosyVoice 2/3's text side (engines/cosyvoice/tokenizer.py, text.py) against golden outputs written by upstream's
own code at ace7c47 (scripts/parity/cosyvoice_text_references.py): CosyVoice2Tokenizer / CosyVoice3Tokenizer over
transformers 4.51.3 on a BlankEN-like folder (rebuilt here from the set, byte for byte), CosyVoiceFrontEnd
.text_normalize on its fallback path (no ttsfrd, no wetext) with inflect 7.3.1, and with stand-in wetext normalizers
to show where they run. Strings and integers: compared exactly on every machine."""

import hashlib
import json
import sys
import types
from pathlib import Path

import pytest
from helpers import parity_module, reference_sets

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.engines.cosyvoice import text as cvtext
from mizuoto.engines.cosyvoice.tokenizer import SPECIAL_TOKENS, CosyVoiceTokenizer

# upstream failures and the one-line errors we raise in their place
OUR_ERRORS = {"IndexError": "nothing to speak|cannot read", "NumOutOfRangeError": "too long for CosyVoice"}


def _set() -> Path:
    return reference_sets().SETS["cosyvoice_text"].committed


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads((_set() / "golden" / "cosyvoice_text.json").read_text(encoding="utf-8"))


def build_folder(golden: dict, folder: Path, clean_up: bool = False) -> Path:
    """The folder upstream read (cosyvoice_release.tokenizer_folder; the sha256 below pins it)."""
    return parity_module("cosyvoice_release").tokenizer_folder(_set().parent, folder, clean_up)


@pytest.fixture(scope="module")
def folder(golden, tmp_path_factory) -> Path:
    folder = build_folder(golden, tmp_path_factory.mktemp("cosyvoice_text") / "CosyVoice-BlankEN")
    sha256 = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}
    assert sha256 == golden["folder"]["sha256"]
    return folder


@pytest.fixture(scope="module")
def tokenizers(folder) -> dict:
    return {v: CosyVoiceTokenizer.from_folder(folder, v) for v in ("cv2", "cv3")}


class FakeNormalizer:
    """The writer's stand-in for wetext, from the replacements recorded with it."""

    def __init__(self, replacements):
        self.replacements, self.calls = replacements, []

    def normalize(self, text: str) -> str:
        self.calls.append(text)
        for old, new in self.replacements:
            text = text.replace(old, new)
        return text


def _same(expected, call):
    if isinstance(expected, dict) and "error" in expected:
        with pytest.raises(InputError, match=OUR_ERRORS[expected["error"]]) as error:
            call()
        assert "\n" not in str(error.value)
    else:
        assert call() == expected


def test_set_is_upstreams(golden):
    assert golden["upstream"]["commit"].startswith("ace7c47") and not golden["upstream"]["modified"]
    assert golden["packages"]["transformers"] == "4.51.3" and golden["packages"]["inflect"] == "7.3.1"
    assert len(golden["cases"]) >= 40


def test_special_tokens_and_ids_as_upstream(golden, tokenizers):
    for version, tok in tokenizers.items():
        recorded = golden["versions"][version]
        assert SPECIAL_TOKENS[version] == recorded["special_tokens"]
        assert {c: tok.token_id(c) for c in recorded["ids"]} == recorded["ids"]
        assert len(tok) == recorded["length"]
        assert tok.endofprompt == 151646  # what CosyVoice 3's LM asserts


def test_encode_and_decode_as_upstream(golden, tokenizers):
    for name, case in golden["cases"].items():
        for version, tok in tokenizers.items():
            assert tok.encode(case["text"]) == case[version]["ids"], (name, version)
            assert tok.decode(case[version]["ids"]) == case[version]["decoded"], (name, version)
            if "piece_ids" in case[version]:  # the pieces upstream's LM would get, one by one
                pieces = case[version]["split"]
                assert [tok.encode(p) for p in pieces] == case[version]["piece_ids"], (name, version)


def test_decode_with_clean_up_spaces_as_upstream(golden, tmp_path):
    tok = CosyVoiceTokenizer.from_folder(build_folder(golden, tmp_path / "clean", clean_up=True), "cv2")
    assert tok.clean_up_spaces
    for name, case in golden["cases"].items():
        assert tok.decode(tok.encode(case["text"])) == case["clean_up_decoded"], name


def test_normalize_without_a_text_frontend_as_upstream(golden, tokenizers):
    none = cvtext.NO_FRONTEND
    for name, case in golden["cases"].items():
        text = case["text"]
        for version, tok in tokenizers.items():
            recorded = case[version]
            _same(recorded["split"], lambda t=tok, x=text: cvtext.normalize(x, t, split=True, using=none))
            _same(recorded["whole"], lambda t=tok, x=text: cvtext.normalize(x, t, split=False, using=none))
            assert cvtext.normalize(text, tok, frontend=False, using=none) == recorded["no_frontend"], name


def test_wetext_runs_where_upstream_runs_it(golden, tokenizers):
    """Stand-in normalizers (string replacements whose results a later rule changes: '~' -> '.' becomes '。',
    '|' -> '（注）' loses its brackets, '%' -> ' 100' is spelled by inflect): same pieces, same calls, only in the
    text's own branch, never for a text that bypasses the frontend."""
    tok = tokenizers["cv2"]
    for name, case in golden["cases"].items():
        recorded = case["wetext"]
        for split, key in ((True, "split"), (False, "whole")):
            fakes = cvtext.TextFrontend("wetext", FakeNormalizer(golden["fake_wetext"]["zh"]),
                                        FakeNormalizer(golden["fake_wetext"]["en"]))
            _same(recorded[key], lambda f=fakes, s=split, x=case["text"]: cvtext.normalize(x, tok, split=s, using=f))
            assert fakes.zh.calls == recorded["zh_calls"][:len(fakes.zh.calls)], name
            assert fakes.en.calls == recorded["en_calls"][:len(fakes.en.calls)], name
        if recorded["zh_calls"] or recorded["en_calls"]:  # upstream called it once per split value
            assert len(recorded["zh_calls"]) + len(recorded["en_calls"]) == 2
    assert golden["cases"]["fake/zh"]["wetext"]["split"] == ["增长了五百分之。注好。"]


def test_numbers_spelled_as_inflect_7_3_1(golden):
    """spell_out_number hands inflect only digit runs (leading zeros and over-long runs included)."""
    assert len(golden["numbers"]) > 300
    for digits, words in golden["numbers"].items():
        _same(words, lambda d=digits: cvtext.spell_out_number(d))


def _fake_wetext(monkeypatch, normalizer):
    monkeypatch.setitem(sys.modules, "wetext", types.SimpleNamespace(Normalizer=normalizer))
    cvtext.text_frontend.cache_clear()


def test_text_frontend_is_wetext_when_it_can_be_built(monkeypatch):
    built = []

    class Normalizer:
        def __init__(self, **kwargs):
            built.append(kwargs)

    _fake_wetext(monkeypatch, Normalizer)
    try:
        chosen = cvtext.text_frontend()
        assert chosen.name == "wetext" and built == [{"remove_erhua": False}, {}]  # zh, then en, as upstream
        assert cvtext.text_frontend() is chosen  # built once
    finally:
        cvtext.text_frontend.cache_clear()


def test_text_frontend_falls_back_as_upstream(monkeypatch):
    class Unreachable:
        def __init__(self, **kwargs):
            raise ConnectionError("ModelScope is unreachable")  # wetext 0.0.4 downloads its FSTs when built

    for normalizer in (Unreachable, None):
        if normalizer is None:
            monkeypatch.setitem(sys.modules, "wetext", None)  # not installed: the import fails
            cvtext.text_frontend.cache_clear()
        else:
            _fake_wetext(monkeypatch, normalizer)
        try:
            assert cvtext.text_frontend() is cvtext.NO_FRONTEND and cvtext.NO_FRONTEND.name == "none"
        finally:
            cvtext.text_frontend.cache_clear()


def test_normalize_uses_the_process_text_frontend(monkeypatch, tokenizers):
    _fake_wetext(monkeypatch, lambda **kwargs: FakeNormalizer([["1", "one "]]))
    try:
        assert cvtext.normalize("room 1", tokenizers["cv2"]) == ["room one ."]
    finally:
        cvtext.text_frontend.cache_clear()


def test_cv3_prompt_needs_endofprompt(tokenizers):
    cv2, cv3 = tokenizers["cv2"], tokenizers["cv3"]
    cv3.check_prompt(cv3.encode("You are a helpful assistant.<|endofprompt|>你好"))
    cv2.check_prompt(cv2.encode("你好"))
    with pytest.raises(InputError, match="must contain <\\|endofprompt\\|>"):
        cv3.check_prompt(cv3.encode("你好"))


@pytest.mark.parametrize(("change", "message"), [
    (lambda f: [p.unlink() for p in f.iterdir()] and f.rmdir(), "folder .* is missing"),
    (lambda f: (f / "vocab.json").unlink(), "vocab.json is missing"),
    (lambda f: (f / "merges.txt").unlink(), "merges.txt is missing"),
    (lambda f: (f / "tokenizer_config.json").unlink(), "tokenizer_config.json is missing"),
    (lambda f: (f / "tokenizer_config.json").write_text('{"tokenizer_class": "BertTokenizer"}', encoding="utf-8"),
     "not a Qwen2 tokenizer"),
    (lambda f: (f / "vocab.json").write_text("{not json", encoding="utf-8"), "cannot read"),
])
def test_bad_folders_are_one_line(golden, tmp_path, change, message):
    folder = build_folder(golden, tmp_path / "CosyVoice-BlankEN")
    change(folder)
    with pytest.raises(CheckpointError, match=message) as error:
        CosyVoiceTokenizer.from_folder(folder, "cv2")
    assert "\n" not in str(error.value) and "CosyVoice-BlankEN" in str(error.value)


def test_unknown_version(folder):
    with pytest.raises(InputError, match="not one of cv2, cv3"):
        CosyVoiceTokenizer.from_folder(folder, "cv1")
