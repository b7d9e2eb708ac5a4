"""GPT-SoVITS's Cantonese front end (engines/gpt_sovits/frontend/cantonese.py) against golden phones written by
upstream's own code at 48b1a01 over ToJyutping 3.2.0 (scripts/parity/gpt_sovits_yue_g2p_references.py:
cantonese.text_normalize, get_jyutping and g2p, then clean_text(text, "yue") and the v2 phone ids). Upstream's
quirks are reproduced: traditional characters read as simplified, runs of marks kept, ng5 cut as ng + g5, aa3 as
aa + a3, a character with two syllables (卅 saa1 aa6) and 瓮 (ung + g3) as UNK. Where upstream crashes (a character
ToJyutping cannot read) ours refuses with one line. Strings and integers: compared exactly."""

import json
import sys
from importlib import metadata

import pytest
from helpers import reference_sets

from mizuoto.core.errors import InputError, MizuotoError
from mizuoto.engines.gpt_sovits.frontend import cantonese
from mizuoto.engines.gpt_sovits.frontend.clean import phone_ids


@pytest.fixture(scope="module")
def golden():
    folder = reference_sets().SETS["gpt_sovits_yue_g2p"].committed
    return json.loads((folder / "golden" / "yue_g2p.json").read_text(encoding="utf-8"))


def _cases(golden, key):
    return [(name, case) for name, case in golden["cases"].items() if key in case]


def test_the_golden_is_upstreams_over_the_same_tojyutping(golden):
    assert golden["upstream"]["commit"].startswith("48b1a01") and not golden["upstream"]["modified"]
    assert len(golden["cases"]) >= 40
    # ToJyutping's readings are its dictionary: another release may read differently.
    assert metadata.version("ToJyutping") == golden["tojyutping"] == cantonese.TOJYUTPING


def test_text_normalize_is_upstreams(golden):
    for name, case in _cases(golden, "normalized"):
        assert cantonese.text_normalize(case["text"]) == case["normalized"], name


def test_jyutping_phones_and_word2ph_are_upstreams(golden):
    for name, case in _cases(golden, "phones"):
        text = case.get("normalized", case.get("g2p_text"))
        if "jyutping" in case:
            assert cantonese.jyutping(text) == case["jyutping"], name
        assert cantonese.g2p(text) == (case["phones"], case["word2ph"]), name


def test_clean_and_ids_are_upstreams(golden):
    for name, case in _cases(golden, "clean_text"):
        phones, word2ph, normalized = cantonese.clean(case["text"])
        assert [phones, word2ph, normalized] == case["clean_text"], name
        assert phone_ids(phones) == case["ids"], name


def test_where_upstream_fails_ours_is_a_one_line_error(golden):
    failing = _cases(golden, "error")
    assert {case["error"]["stage"] for _, case in failing} == {"g2p"} and len(failing) >= 4
    for name, case in failing:
        with pytest.raises(InputError) as error:
            if "g2p_text" in case:
                cantonese.g2p(case["g2p_text"])
            else:
                cantonese.clean(case["text"])
        assert "ToJyutping has no Cantonese reading" in str(error.value) and "\n" not in str(error.value), name


def test_upstreams_quirks_are_in_the_golden(golden):
    cases = golden["cases"]
    assert cases["syllabic_nasals"]["phones"][:2] == ["Yng", "Yg5"]  # 五 ng5: the initial ng, its last letter + tone
    assert cases["two_syllable_chars"]["clean_text"][0][:2] == ["Ys", "UNK"]  # 卅 saa1 aa6 -> Yaa1 aa6 -> UNK
    assert cases["null_onsets"]["clean_text"][0][-3:] == ["UNK", "Yg3", "."]  # 瓮 ung3 -> Yung (not a v2 phone)
    assert cases["runs"]["normalized"] == "真系???!!系呀...冇错……好行-"  # runs kept, unlike Chinese
    assert cases["pause_marks"]["clean_text"][2] == "你好我哋走啦好"  # ￥ and ^ pause only Chinese


def test_a_missing_tojyutping_is_a_clear_error(monkeypatch):
    cantonese._reader.cache_clear()
    monkeypatch.setitem(sys.modules, "ToJyutping", None)
    try:
        with pytest.raises(MizuotoError, match=r"pip install ToJyutping==3\.2\.0") as error:
            cantonese.g2p("你好")
        assert "\n" not in str(error.value)
    finally:
        cantonese._reader.cache_clear()
