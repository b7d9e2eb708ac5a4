"""GPT-SoVITS's Cantonese front end (text/cantonese.py at 48b1a01, the v2 family's `yue`): text -> normalised text
-> Jyutping -> phones of the v2 table, with word2ph (how many phones each character has).

text_normalize: the Chinese normaliser (zh_normalize.py; it turns traditional characters into simplified ones, so
ToJyutping reads 佢个锄头, not 佢個鋤頭), then cantonese.py's own punctuation folding (quotes and brackets vanish,
～ and ~ become -, and unlike chinese2 runs of marks stay as they are), and everything that is neither a CJK
unified ideograph (U+4E00..U+9FA5) nor one of the six marks dropped.
g2p: ToJyutping's reading of every character (its longest dictionary word wins), a mark stands for itself; a
syllable is cut at the first of upstream's ordered "initials" it starts with, the rest (or that initial's last
letter when nothing is left: ng5 -> ng + g5, aa5 -> aa + a5) takes the tone, and both are prefixed with Y so that
no Cantonese phone is a Mandarin one. A character ToJyutping reads as two syllables (卅 saa1 aa6) keeps them in one
final, which the v2 table does not have: clean() makes it UNK, as upstream's cleaner does.

ToJyutping (PyPI, BSD-2-Clause, pure Python, no dependencies; its dictionary comes from rime-cantonese) is used at
run time, imported on first use: its readings are its dictionary, pinned at 3.2.0 (what the golden set was written
with), and depending on the package keeps that dictionary's licence its own instead of ours to redistribute.

BERT: upstream's TextPreprocessor gives BERT features only to "zh"; Cantonese phones get zeros (1024 x phones), so
nothing here feeds the BERT model (cantonese.get_bert_feature exists upstream but nothing calls it for yue)."""

from __future__ import annotations

import re
from functools import cache

from mizuoto.core.errors import InputError, MizuotoError

from .zh_data import punctuation, symbol_ids

# cantonese.py's rep_map. "'" is not a mark of the phone set, so the quotes and brackets mapped to it vanish with
# the sweep that follows; they are kept as upstream wrote them so that the table reads as upstream's.
_FOLD = {"：": ",", "；": ",", "，": ",", "。": ".", "！": "!", "？": "?", "\n": ".", "·": ",", "、": ",",
         "...": "…", "$": ".", "“": "'", "”": "'", '"': "'", "‘": "'", "’": "'", "（": "'", "）": "'", "(": "'",
         ")": "'", "《": "'", "》": "'", "【": "'", "】": "'", "[": "'", "]": "'", "—": "-", "～": "-", "~": "-",
         "「": "'", "」": "'"}
# The cut points, tried in this order; the order is what decides (aa before aai, so aai never cuts; gw before g).
# ts and dz are not Jyutping onsets and sp, spl, spn, sil no syllable starts with: they never cut, kept as upstream.
_INITIALS = ("aa aai aak aap aat aau ai au ap at ak a p b e ts t dz d kw k gw g f h l m ng n s y w c z j ong on ou "
             "oi ok o uk ung sp spl spn sil").split()
_READING = re.compile(r"(?:[a-z]+[1-6]+ ?)+")  # what upstream accepts from ToJyutping: syllables with tones
TOJYUTPING = "3.2.0"


@cache
def _fold_pattern() -> re.Pattern:
    return re.compile("|".join(re.escape(mark) for mark in _FOLD))


def replace_punctuation(text: str) -> str:
    text = _fold_pattern().sub(lambda match: _FOLD[match.group()], text)
    return re.sub(r"[^\u4e00-\u9fa5" + "".join(punctuation()) + r"]+", "", text)


def text_normalize(text: str) -> str:
    from .zh_normalize import normalize

    return "".join(replace_punctuation(sentence) for sentence in normalize(text))


# --- g2p ----------------------------------------------------------------------------------------------------

@cache
def _reader():
    try:
        import ToJyutping
    except ImportError as error:
        raise MizuotoError(f"Cantonese text needs the ToJyutping package: pip install ToJyutping=={TOJYUTPING}") \
            from error
    return ToJyutping.get_jyutping_list


def jyutping(text: str) -> list[str]:
    """One entry per character: its Jyutping (one or more syllables, space-separated) or, for a mark, the mark."""
    marks = set(punctuation())
    readings = []
    for char, reading in _reader()(text):
        if char in marks:
            readings.append(char)
        elif reading is None or not _READING.fullmatch(reading):
            # Upstream fails here with a TypeError (re.search on None) or its ValueError.
            raise InputError(f"ToJyutping has no Cantonese reading for {char!r} in {text!r}")
        else:
            readings.append(reading)
    return readings


def syllable_phones(syllable: str) -> list[str]:
    """A reading (tone last) -> [Y + initial, Y + final + tone]; a mark -> [mark]."""
    if syllable in punctuation():
        return [syllable]
    body, tone = syllable[:-1], syllable[-1]
    for initial in _INITIALS:
        if body.startswith(initial):
            return ["Y" + initial, "Y" + (body[len(initial):] or initial[-1]) + tone]
    # Upstream silently drops such a syllable and its cleaner then fails; no ToJyutping 3.2.0 reading gets here.
    raise InputError(f"the Jyutping {syllable!r} starts with none of GPT-SoVITS's Cantonese initials")


def g2p(normalized: str) -> tuple[list[str], list[int]]:
    """Normalised Cantonese text -> (phones, word2ph)."""
    phones: list[str] = []
    word2ph: list[int] = []
    for syllable in jyutping(normalized):
        unit = syllable_phones(syllable)
        phones += unit
        word2ph.append(len(unit))
    return phones, word2ph


def clean(text: str) -> tuple[list[str], list[int], str]:
    """cleaner.clean_text(text, "yue"): (phones, word2ph, normalised text), phones outside the v2 table as UNK.
    The ￥ / ^ pause marks are Chinese only upstream: here the normaliser simply drops them."""
    normalized = text_normalize(text)
    phones, word2ph = g2p(normalized)
    if len(normalized) != len(word2ph):
        raise InputError(f"{len(word2ph)} characters got phones out of {len(normalized)} in {normalized!r}")
    known = symbol_ids()
    return ["UNK" if phone not in known else phone for phone in phones], word2ph, normalized
