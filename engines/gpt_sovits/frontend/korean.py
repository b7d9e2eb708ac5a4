"""GPT-SoVITS's Korean front end (text/korean.py at 48b1a01, the v2 family's `ko`): text -> one phone per Hangul
letter of its pronunciation, from the 26 letters + 2 marks of symbols2.py's ko_symbols.

g2p: every ASCII letter by its Korean name (case-insensitive, so KELVIN SIGN is k and LONG S is s, as Python's
re folds them); g2pk2's pronunciation (ko_g2pk, which needs python-mecab-ko); the syllables split into
compatibility letters and each compound vowel into two (ㅘ -> ㅗㅏ, ㅕ -> ㅣㅓ, ...); an "을 ㄹ" or "를 ㄹ" that
g2pk2's liquidisation made across a space read ㄴ again; a full stop after a final letter; then per character:
CJK punctuation as its ASCII mark, a space as 空, anything outside the v2 table as 停.

Upstream's module has no text_normalize: clean_text keeps the text as given (text_normalize here returns it), and
TextPreprocessor gives Korean phones zero BERT features, as it does every language but Chinese."""

from __future__ import annotations

import re

from .ko_g2pk import pronounce
from .ko_jamo import decompose, to_compat
from .zh_data import symbol_ids

_LETTER_NAMES = dict(zip("abcdefghijklmnopqrstuvwxyz", (
    "에이 비 시 디 이 에프 지 에이치 아이 제이 케이 엘 엠 엔 오 피 큐 "
    "아르 에스 티 유 브이 더블유 엑스 와이 제트").split(), strict=True))
# Compound vowels as two phones. Double codas stay whole (upstream's pairs for them are commented out), so one
# that g2pk2 leaves (닭 before a Hanja, which is no \W and no onset to its table) is 停.
_VOWEL_HALVES = tuple(zip("ㅘㅙㅚㅝㅞㅟㅢㅑㅒㅕㅖㅛㅠ",
                          "ㅗㅏ ㅗㅐ ㅗㅣ ㅜㅓ ㅜㅔ ㅜㅣ ㅡㅣ ㅣㅏ ㅣㅐ ㅣㅓ ㅣㅔ ㅣㅗ ㅣㅜ".split(), strict=True))
_MARKS = {"：": ",", "；": ",", "，": ",", "。": ".", "！": "!", "？": "?", "\n": ".", "·": ",", "、": ",", " ": "空"}


def text_normalize(text: str) -> str:
    """Upstream's korean.py has none, so cleaner.clean_text normalises nothing."""
    return text


def latin_to_hangul(text: str) -> str:
    for letter, name in _LETTER_NAMES.items():
        text = re.sub(letter, name, text, flags=re.IGNORECASE)
    return text


def divide_hangul(text: str) -> str:
    text = to_compat(decompose(text))
    for compound, halves in _VOWEL_HALVES:
        text = text.replace(compound, halves)
    return text


def _restore_nieun(letters: str) -> str:
    # fix_g2pk2_error: scanning left to right, "ㅇㅡㄹ ㄹ" and "ㄹㅡㄹ ㄹ" end in ㄴ again.
    return re.sub("([ㅇㄹ]ㅡㄹ )ㄹ", "\\1ㄴ", letters)


def _phone(char: str) -> str:
    char = _MARKS.get(char, char)
    return char if char in symbol_ids() else "停"


def g2p(text: str) -> list[str]:
    letters = _restore_nieun(divide_hangul(pronounce(latin_to_hangul(text))))
    letters = re.sub(r"([\u3131-\u3163])$", r"\1.", letters)  # $: also before a final newline, as upstream's
    return [_phone(char) for char in letters]


def clean(text: str) -> tuple[list[str], None, str]:
    """cleaner.clean_text(text, "ko"): (phones, no word2ph, the text as given)."""
    normalized = text_normalize(text)
    known = symbol_ids()
    return ["UNK" if phone not in known else phone for phone in g2p(normalized)], None, normalized
