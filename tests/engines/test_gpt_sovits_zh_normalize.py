"""GPT-SoVITS's Chinese text normaliser (engines/gpt_sovits/frontend/zh_normalize.py, zh_numbers.py) against golden
sentences written by upstream's own TextNormalizer and char_convert at 48b1a01
(scripts/parity/gpt_sovits_zh_normalize_references.py): every rule, upstream's quirks included (a time range's
second time reads 半 when the first one's minutes are 30; a temperature is always 度; the ideographic space is
kept), and numbers 0..120, powers of ten, digit runs and
decimals. Strings: compared exactly on every machine."""

import json

import pytest
from helpers import reference_sets

from mizuoto.engines.gpt_sovits.frontend import zh_normalize


@pytest.fixture(scope="module")
def golden():
    folder = reference_sets().SETS["gpt_sovits_zh_normalize"].committed
    return json.loads((folder / "golden" / "zh_normalize.json").read_text(encoding="utf-8"))


def test_the_golden_is_upstreams(golden):
    assert golden["upstream"]["commit"].startswith("48b1a01") and not golden["upstream"]["modified"]
    assert len(golden["cases"]) >= 200


def test_every_sentence_is_upstreams(golden):
    for name, case in golden["cases"].items():
        assert zh_normalize.normalize(case["text"]) == case["sentences"], name


def test_a_time_range_reads_half_from_its_first_time(golden):
    assert golden["cases"]["time_range"]["sentences"][0] == "营业时间八点半至十七点半，"  # 17:45, as upstream reads it


def test_character_conversion_is_upstreams(golden):
    for name, case in golden["conversions"].items():
        assert zh_normalize.traditional_to_simplified(case["text"]) == case["simplified"], name
        assert zh_normalize.simplified_to_traditional(case["text"]) == case["traditional"], name
