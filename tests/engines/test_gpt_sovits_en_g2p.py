"""GPT-SoVITS's English front end (engines/gpt_sovits/frontend/: english.py, en_normalize.py, en_numbers.py,
en_tokenize.py, en_tagger.py, en_g2p_net.py, en_data.py) against golden phones written by upstream's own code at
48b1a01 (scripts/parity/gpt_sovits_en_g2p_references.py: english.text_normalize with inflect, english.g2p over
g2p_en 2.1.0 with nltk 3.9.2's TweetTokenizer and pos_tag, wordsegment and g2p_en's GRU predictor, then clean_text
and the v2 phone ids). The tagger is the set's tiny averaged perceptron (nltk_data/), read here by our own loader;
the predictor's weights are g2p_en's real checkpoint20.npz, whose every choice on these words was at least 4e-2
ahead of the next. Strings and integers: compared exactly."""

import hashlib
import json
import shutil

import pytest
from helpers import reference_sets

from mizuoto.core.errors import InputError
from mizuoto.engines.gpt_sovits.frontend import en_data, english
from mizuoto.engines.gpt_sovits.frontend.clean import clean_text, phone_ids
from mizuoto.engines.gpt_sovits.frontend.en_g2p_net import Predictor
from mizuoto.engines.gpt_sovits.frontend.en_tokenize import tokenize


@pytest.fixture(scope="module")
def folder():
    return reference_sets().SETS["gpt_sovits_en_g2p"].committed


@pytest.fixture(scope="module")
def golden(folder):
    return json.loads((folder / "golden" / "en_g2p.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def tagger(folder):
    return english.load_tagger(folder)  # the set's folder holds nltk_data/ as an assets folder does


def cases(golden, prefix):
    return {name: case for name, case in golden["cases"].items() if name.startswith(prefix)}


def digest(table):
    return hashlib.sha256(json.dumps(table, sort_keys=True).encode()).hexdigest()


def test_the_golden_is_upstreams(golden):
    assert golden["upstream"]["commit"].startswith("48b1a01") and not golden["upstream"]["modified"]
    assert len(golden["cases"]) >= 45 and golden["predictor_margin"] >= 1e-2


def test_the_dictionaries_are_the_ones_upstream_builds(golden):
    # Upstream's engdict_cache.pickle is not in the checkout, so it built it from the two .rep files, as we do.
    tables = golden["tables"]
    assert not tables["engdict_cache_in_checkout"]
    cmu = {word: [phones] for word, phones in en_data.dictionary().items()}
    assert (len(cmu), digest(cmu)) == (tables["cmu_entries"], tables["cmu_sha256"])
    names = {name: [phones] for name, phones in en_data.names().items()}
    assert (len(names), digest(names)) == (tables["names_entries"], tables["names_sha256"])


def test_text_normalize_is_upstreams(golden):
    for name, case in {**cases(golden, "normalize_"), **cases(golden, "clean_")}.items():
        expected = case["normalized"] if "normalized" in case else case["clean_text"][2]
        assert english.text_normalize(case["text"]) == expected, name


def test_tokens_and_tags_are_nltks(golden, tagger):
    for name, case in cases(golden, "g2p_").items():
        assert [list(pair) for pair in tagger.tag(tokenize(case["text"]))] == case["tags"], name


def test_wordsegment_splits_as_upstream(golden):
    for word, parts in golden["segmented"].items():
        assert english._segmenter().segment(word) == parts, word


def test_the_predictor_is_g2p_ens():
    predictor = Predictor.load(en_data.predictor_path())
    assert predictor("") is not None  # the end mark alone still decodes


def test_predicted_words_are_upstreams(golden):
    predictor = Predictor.load(en_data.predictor_path())
    for word, phones in golden["predicted"].items():
        assert predictor(word) == phones, word


def test_phones_are_upstreams(golden, tagger):
    for name, case in {**cases(golden, "g2p_"), **cases(golden, "normalize_")}.items():
        text = case["normalized"] if name.startswith("normalize_") else case["text"]
        assert english.g2p(text, tagger) == case["phones"], name


def test_homographs_were_read_both_ways(golden):
    phones = " ".join(golden["cases"]["g2p_homograph_read"]["phones"])
    assert "R IY1 D" in phones and "R EH1 D" in phones


def test_clean_text_and_ids_are_upstreams(golden, tagger):
    for name, case in cases(golden, "clean_").items():
        phones, word2ph, normalized = clean_text(case["text"], "en", tagger=tagger)
        assert [phones, word2ph, normalized] == case["clean_text"], name
        assert phone_ids(phones) == case["ids"], name


def test_english_without_the_tagger_is_a_clear_error():
    with pytest.raises(InputError, match="part-of-speech tagger"):
        clean_text("hello", "en")


@pytest.mark.parametrize("kind", ["weights", "tagdict", "classes"])
def test_a_missing_tagger_file_is_named_in_one_line(folder, tmp_path, kind):
    shutil.copytree(folder / "nltk_data", tmp_path / "nltk_data")
    missing = tmp_path.joinpath("nltk_data", "taggers", "averaged_perceptron_tagger_eng",
                                f"averaged_perceptron_tagger_eng.{kind}.json")
    missing.unlink()
    with pytest.raises(InputError) as error:
        english.load_tagger(tmp_path)
    assert str(missing) in str(error.value) and "\n" not in str(error.value)


def test_missing_predictor_weights_are_named_in_one_line(tmp_path):
    with pytest.raises(InputError) as error:
        Predictor.load(tmp_path / "checkpoint20.npz")
    assert "checkpoint20.npz" in str(error.value) and "\n" not in str(error.value)


def test_numbers_past_inflects_range_are_a_clear_error():
    with pytest.raises(InputError, match="too long"):
        english.text_normalize("1" + "0" * 40)
