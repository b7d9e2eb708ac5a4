"""GPT-SoVITS's Japanese front end (text/japanese.py at 48b1a01, the v2 family's `ja`): text -> OpenJTalk's phones
with prosody marks between them, the marks of espnet's pyopenjtalk_g2p_prosody:

    [ pitch rises   ] pitch falls   # accent-phrase border   _ pause   ? a question's end (dropped with the ends)

text_normalize folds runs of symbols.py's marks into their first. g2p: ％ read パーセント; the text lower-cased
(English words are read through the user dictionary in lower case); cut at every character outside the Japanese
class below (one piece per character: a space is dropped, any other is kept as itself); each run of Japanese
characters through OpenJTalk (ja_openjtalk) and its labels' phones without the ^ and $ / ? of its two ends; then
CJK marks as ASCII ones. clean_text reads a phone outside the v2 table as UNK (so # and 「 become UNK), and Japanese
has no word2ph and zero BERT features.

The Japanese class counts Python's \\d, which is every Unicode digit (０ included), while its full-width digits run
from １: both as upstream.
"""

from __future__ import annotations

import re

from mizuoto.core.errors import InputError

from . import ja_openjtalk
from .zh_data import replace_consecutive_punctuation, symbol_ids

_JAPANESE = r"A-Za-z\d\u3005\u3040-\u30ff\u4e00-\u9fff\uff11-\uff19\uff21-\uff3a\uff41-\uff5a\uff66-\uff9d"
_JAPANESE_CHARACTER = re.compile(f"[{_JAPANESE}]")
_MARK = re.compile(f"[^{_JAPANESE}]")
_MARKS = {"：": ",", "；": ",", "，": ",", "。": ".", "！": "!", "？": "?", "\n": ".", "·": ",", "、": ","}


def text_normalize(text: str) -> str:
    return replace_consecutive_punctuation(text)


def _feature(pattern: str, label: str) -> int:
    """A numeric field of a full-context label; -50 where the label has none (the "xx" of an absent context)."""
    match = re.search(pattern, label)
    return -50 if match is None else int(match.group(1))


def prosody_phones(labels: list[str]) -> list[str]:
    """pyopenjtalk_g2p_prosody over full-context labels: ^ phones and marks $ (or ? for a question)."""
    phones = []
    last = len(labels) - 1
    for n, label in enumerate(labels):
        phone = re.search(r"\-(.*?)\+", label).group(1)
        if phone in "AEIOU":  # a substring test, as upstream's: unvoiced vowels read as voiced ones
            phone = phone.lower()
        if phone == "sil":
            if 0 < n < last:
                raise InputError(f"OpenJTalk put a silence inside {label!r}; this text cannot be read as Japanese")
            if n == 0:
                phones.append("^")
            else:
                question = _feature(r"!(\d+)_", label)
                phones += {0: ["$"], 1: ["?"]}.get(question, [])
            continue
        if phone == "pau":
            phones.append("_")
            continue
        phones.append(phone)
        accent = _feature(r"/A:([0-9\-]+)\+", label)  # mora position relative to the accent nucleus
        forward = _feature(r"\+(\d+)\+", label)  # mora position in the accent phrase, from its start
        backward = _feature(r"\+(\d+)/", label)  # ... and from its end
        moras = _feature(r"/F:(\d+)_", label)  # moras in the accent phrase
        forward_next = _feature(r"\+(\d+)\+", labels[n + 1])
        if backward == 1 and forward_next == 1 and phone in "aeiouAEIOUNcl":
            phones.append("#")
        elif accent == 0 and forward_next == forward + 1 and forward != moras:
            phones.append("]")
        elif forward == 1 and forward_next == 2:
            phones.append("[")
    return phones


def _pieces(text: str) -> list[str]:
    """preprocess_jap with prosody: phones of each Japanese run and the marks between them (spaces dropped)."""
    text = text.replace("％", "パーセント").lower()
    sentences = _MARK.split(text)
    marks = _MARK.findall(text)
    out: list[str] = []
    for i, sentence in enumerate(sentences):
        if _JAPANESE_CHARACTER.match(sentence):
            out += prosody_phones(ja_openjtalk.labels(sentence))[1:-1]
        if i < len(marks) and marks[i] != " ":
            out.append(marks[i])
    return out


def g2p(text: str) -> list[str]:
    return [_MARKS.get(piece, piece) for piece in _pieces(text)]


def clean(text: str) -> tuple[list[str], None, str]:
    """cleaner.clean_text(text, "ja"): (phones with UNK for those outside the v2 table, None, normalised text)."""
    normalized = text_normalize(text)
    known = symbol_ids()
    return ["UNK" if phone not in known else phone for phone in g2p(normalized)], None, normalized
