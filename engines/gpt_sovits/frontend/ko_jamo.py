"""Hangul letters as GPT-SoVITS's Korean front end moves between them, the way jamo 0.4.1 does (its h2j, j2hcj and
j2h): a precomposed syllable (U+AC00..U+D7A3) is lead + vowel (+ tail) by Unicode's arithmetic; a conjoining letter
(U+11xx) becomes the compatibility letter (U+31xx) whose Unicode name is the same with LETTER for CHOSEONG,
JUNGSEONG or JONGSEONG, and stays as it is where there is none.

jamo knows the names of U+11xx and U+31xx only, so the extended letters (U+A960.., U+D7B0..), which it still counts as
jamo, make it raise: here they are an InputError."""

from __future__ import annotations

import re
import unicodedata
from functools import cache

from mizuoto.core.errors import InputError

_SYLLABLES = 0xAC00
_LEADS, _VOWELS, _TAILS = 0x1100, 0x1161, 0x11A7  # the first lead and vowel; tails count from 1
_PER_LEAD, _PER_VOWEL = 588, 28  # 21 vowels x 28 tails, 27 tails + none


def _is_syllable(char: str) -> bool:
    return 0xAC00 <= ord(char) <= 0xD7A3


def decompose(text: str) -> str:
    """jamo.h2j: every precomposed syllable as its conjoining letters; anything else unchanged."""
    out = []
    for char in text:
        if not _is_syllable(char):
            out.append(char)
            continue
        index = ord(char) - _SYLLABLES
        lead, rest = divmod(index, _PER_LEAD)
        vowel, tail = divmod(rest, _PER_VOWEL)
        out.append(chr(_LEADS + lead) + chr(_VOWELS + vowel) + (chr(_TAILS + tail) if tail else ""))
    return "".join(out)


def syllable(lead: str, vowel: str, tail: str = "") -> str:
    """jamo.j2h for modern conjoining letters (all g2pk2 composes): one precomposed syllable."""
    tail_index = ord(tail) - _TAILS if tail else 0
    return chr(_SYLLABLES + (ord(lead) - _LEADS) * _PER_LEAD + (ord(vowel) - _VOWELS) * _PER_VOWEL + tail_index)


def _unnamed(code: int) -> bool:
    # jamo's is_jamo ranges outside the two blocks it has names for.
    return 0xA960 <= code <= 0xA97C or 0xD7B0 <= code <= 0xD7C6 or 0xD7CB <= code <= 0xD7FB


@cache
def _compat_table() -> dict[str, str]:
    compat = {}
    for code in range(0x3131, 0x318F):
        if code != 0x3164:  # HANGUL FILLER is not a letter to jamo
            compat[unicodedata.name(chr(code))] = chr(code)
    table = {}
    for code in range(0x1100, 0x1200):
        name = re.sub(r"(?<=HANGUL )\w+", "LETTER", unicodedata.name(chr(code)), count=1)
        if name in compat:
            table[chr(code)] = compat[name]
    return table


def to_compat(text: str) -> str:
    """jamo.j2hcj: conjoining letters as compatibility letters; anything else unchanged."""
    table = _compat_table()
    for char in text:
        if _unnamed(ord(char)):
            raise InputError(f"the Korean front end cannot read the old Hangul letter U+{ord(char):04X} in {text!r}")
    return "".join(table.get(char, char) for char in text)
