"""cleaner.clean_text for the v2 family (text/cleaner.py at 48b1a01): one language's text -> (phones, word2ph,
normalised text), and the phones' ids in the 732-phone v2 table (text/__init__.cleaned_text_to_sequence).

English text has no word2ph (None), and fewer than four phones get a comma in front, as upstream does. Cantonese
(yue) is frontend/cantonese.py's whole path, Korean (ko) frontend/korean.py's (its morphological analyser is the
optional python-mecab-ko), Japanese (ja) frontend/japanese.py's (over the optional pyopenjtalk).

A Chinese text holding ￥ or ^ takes upstream's pause path: the mark is read as a comma and every comma phone
becomes SP2 (￥) or SP3 (^), a longer pause than a comma."""

from __future__ import annotations

from mizuoto.core.errors import InputError

from . import chinese
from .zh_data import symbol_ids

_PAUSES = (("￥", "SP2"), ("^", "SP3"))  # cleaner.special: the first one present wins, for Chinese only
BUILT = ("zh", "en", "yue", "ko", "ja")


def clean_text(text: str, language: str, *, g2pw=None, tagger=None) -> tuple[list[str], list[int] | None, str]:
    """`g2pw`: G2PW for zh; `tagger`: english.load_tagger(assets) (nltk's part-of-speech tagger) for en."""
    if language not in BUILT:
        raise InputError(f"GPT-SoVITS has no {language!r} text front end; use zh, en, ja, ko or yue")
    if language == "en":
        return _clean_english(text, tagger)
    if language == "yue":
        from . import cantonese

        return cantonese.clean(text)
    if language == "ko":
        from . import korean

        return korean.clean(text)
    if language == "ja":
        from . import japanese

        return japanese.clean(text)
    if g2pw is None:
        raise InputError("Chinese text needs the G2PW model (g2pw.G2PW.load of the G2PWModel folder)")
    for mark, pause in _PAUSES:
        if mark in text:
            normalized = chinese.text_normalize(text.replace(mark, ","))
            phones, word2ph = chinese.g2p(normalized, g2pw)
            return [pause if phone == "," else phone for phone in phones], word2ph, normalized
    normalized = chinese.text_normalize(text)
    phones, word2ph = chinese.g2p(normalized, g2pw)
    if len(normalized) != len(word2ph):
        raise InputError(f"{len(word2ph)} characters got phones out of {len(normalized)} in {normalized!r}")
    known = symbol_ids()
    return ["UNK" if phone not in known else phone for phone in phones], word2ph, normalized


def _clean_english(text: str, tagger) -> tuple[list[str], None, str]:
    from . import english

    if tagger is None:
        raise InputError("English text needs nltk's part-of-speech tagger (english.load_tagger of the assets folder)")
    normalized = english.text_normalize(text)
    phones = english.g2p(normalized, tagger)
    if len(phones) < 4:
        phones = [",", *phones]
    known = symbol_ids()
    return ["UNK" if phone not in known else phone for phone in phones], None, normalized


def phone_ids(phones: list[str]) -> list[int]:
    known = symbol_ids()
    unknown = [phone for phone in phones if phone not in known]
    if unknown:
        raise InputError(f"phones {unknown[:5]} are not in GPT-SoVITS's v2 phone table")
    return [known[phone] for phone in phones]
