"""GPT-SoVITS's text cutting (engines/gpt_sovits/text_split.py) against golden fragments written by upstream's own
code at 48b1a01 (scripts/parity/gpt_sovits_text_split_references.py: text_segmentation_method.py, and
TextPreprocessor's replace_consecutive_punctuation / pre_seg_text / filter_text run from its syntax tree):
every method on Chinese, English with decimals, mixed, Japanese, a short first phrase, runs of punctuation, blank
lines, a text over 510 characters, and an all-blank one. Strings: compared exactly on every machine."""

import json

import pytest
from helpers import reference_sets

from mizuoto.core.errors import InputError
from mizuoto.engines.gpt_sovits import text_split


def golden() -> dict:
    folder = reference_sets().SETS["gpt_sovits_text_split"].committed
    return json.loads((folder / "golden" / "text_split.json").read_text(encoding="utf-8"))


def test_every_method_cuts_as_upstream():
    cases = golden()["cases"]
    assert golden()["upstream"]["commit"].startswith("48b1a01") and len(cases) >= 50
    for name, case in cases.items():
        if "method" not in case:
            continue
        text = case["text"]
        assert text_split.METHODS[case["method"]](text.strip("\n") or " ") == case["method_output"], name
        if isinstance(case["fragments"], dict):  # upstream refused it
            with pytest.raises(InputError, match="nothing to speak"):
                text_split.fragments(text, case["language"], case["method"])
        else:
            assert text_split.fragments(text, case["language"], case["method"]) == case["fragments"], name


def test_long_text_is_cut_at_punctuation_as_upstream():
    case = golden()["cases"]["long/split_big_text"]
    assert text_split.split_big_text(case["text"]) == case["pieces"]
    assert case["pieces"][0] == ""  # upstream's own quirk: a first run longer than the limit leaves an empty piece


def test_an_unknown_method_is_a_one_line_error():
    with pytest.raises(InputError, match="not one of cut0, cut1, cut2, cut3, cut4, cut5"):
        text_split.fragments("你好。", "zh", "cut9")
    assert text_split.fragments("", "zh") == []
