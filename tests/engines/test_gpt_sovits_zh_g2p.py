"""GPT-SoVITS's Chinese front end (engines/gpt_sovits/frontend/: chinese.py, tone_sandhi.py, g2pw.py) against
golden phones written by upstream's own code at 48b1a01 (scripts/parity/gpt_sovits_zh_g2p_references.py:
chinese2.text_normalize and g2p with jieba_fast, pypinyin, ToneSandhi and G2PW through onnxruntime, then
clean_text and the v2 phone ids). G2PW is the set's tiny random network (g2pw/g2pW.onnx) in a tiny G2PWModel
folder, read here by our own loader and network; every choice it makes is at least 1e-3 apart from the next,
so the same phones are expected on every machine. Strings and integers: compared exactly."""

import json

import pytest
from helpers import reference_sets

from mizuoto.core.errors import InputError
from mizuoto.engines.gpt_sovits.bert_features import load_tokenizer
from mizuoto.engines.gpt_sovits.frontend import chinese, tone_sandhi
from mizuoto.engines.gpt_sovits.frontend.clean import clean_text, phone_ids
from mizuoto.engines.gpt_sovits.frontend.g2pw import G2PW


@pytest.fixture(scope="module")
def folder():
    return reference_sets().SETS["gpt_sovits_zh_g2p"].committed


@pytest.fixture(scope="module")
def golden(folder):
    return json.loads((folder / "golden" / "zh_g2p.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def g2pw(folder):
    return G2PW.load(folder / "g2pw", load_tokenizer(folder / "bert"))


def test_the_golden_is_upstreams(golden):
    assert golden["upstream"]["commit"].startswith("48b1a01") and not golden["upstream"]["modified"]
    assert len(golden["cases"]) >= 19 and golden["g2pw_margin"] >= 1e-3


def test_text_normalize_is_upstreams(golden):
    for name, case in golden["cases"].items():
        assert chinese.text_normalize(case["text"]) == case["normalized"], name


def test_phones_and_word2ph_are_upstreams(golden, g2pw):
    for name, case in golden["cases"].items():
        assert chinese.g2p(case["normalized"], g2pw) == (case["phones"], case["word2ph"]), name


def test_clean_text_and_ids_are_upstreams(golden, g2pw):
    for name, case in golden["cases"].items():
        phones, word2ph, normalized = clean_text(case["text"], "zh", g2pw=g2pw)
        assert [phones, word2ph, normalized] == case["clean_text"], name
        assert phone_ids(phones) == case["ids"], name


def test_tone_sandhi_rules_are_upstreams(golden):
    for word, pos, finals, expected in golden["rules"]["modified_tone"]:
        assert tone_sandhi.modified_tone(word, pos, list(finals)) == expected, word


def test_word_merging_is_upstreams(golden):
    import jieba.posseg

    for sentence, segments, expected in golden["rules"]["pre_merge_for_modify"]:
        # jieba (ours) and jieba_fast (upstream's) cut the same way: the same dictionary and HMM.
        assert [list(pair) for pair in jieba.posseg.lcut(sentence)] == segments, sentence
        assert [list(unit) for unit in tone_sandhi.pre_merge_for_modify(segments)] == expected, sentence


def test_erhua_is_upstreams(golden):
    for word, pos, initials, finals, expected in golden["rules"]["merge_erhua"]:
        assert [list(x) for x in chinese._merge_erhua(list(initials), list(finals), word, pos)] == expected, word


def test_a_language_without_a_front_end_is_refused():
    with pytest.raises(InputError, match="no 'fr' text front end"):
        clean_text("bonjour", "fr")


def test_chinese_without_g2pw_is_a_clear_error():
    with pytest.raises(InputError, match="needs the G2PW model"):
        clean_text("你好", "zh")
