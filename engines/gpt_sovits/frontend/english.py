"""GPT-SoVITS's English front end (text/english.py at 48b1a01, the v2 family's `en`): normalised text -> ARPAbet
phones, through its en_G2p (g2p_en's G2p with larger dictionaries).

Per token of the text (en_tokenize, tagged by en_tagger): a token without letters is its own phone; one letter is
the dictionary's (capital A alone reads EY1); a homograph takes one of its two readings by its tag; anything else is
looked up (`_lookup`): the CMU dictionaries, then the names (title case only), then spelled when three characters or
shorter, then a possessive 's after the stem's last phone, then split into known words by wordsegment, and what is
still unknown goes to g2p_en's predictor. Blanks between tokens and phones outside the v2 table are dropped (an
apostrophe becomes "-")."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from . import en_data
from .en_g2p_net import Predictor
from .en_normalize import text_normalize  # noqa: F401  (the language module's pair, as upstream's)
from .en_tagger import FOLDER, Tagger
from .en_tokenize import tokenize
from .zh_data import symbol_ids

_VOICELESS = ("P", "T", "K", "F", "TH", "HH")  # 's after these is S
_SIBILANT = ("S", "Z", "SH", "ZH", "CH", "JH")  # and after these AH0 Z; after anything else Z
_DROPPED = (" ", "<pad>", "UW", "</s>", "<s>")  # what upstream's g2p filters out of g2p_en's output


def load_tagger(assets: Path) -> Tagger:
    """nltk's averaged_perceptron_tagger_eng from an assets folder (assets/nltk_data/taggers/...)."""
    return Tagger.load(Path(assets).joinpath(*FOLDER))


@cache
def _segmenter():
    """wordsegment's segmenter with its unigram and bigram counts, our own instance (the module's is global)."""
    import wordsegment

    segmenter = wordsegment.Segmenter()
    segmenter.load()
    return segmenter


@cache
def _predictor() -> Predictor:
    return Predictor.load(en_data.predictor_path())


def _lookup(word: str) -> list[str]:
    """en_G2p.qryword: `word` as written (case decides the name dictionary)."""
    lower = word.lower()
    cmu = en_data.dictionary()
    if len(lower) > 1 and lower in cmu:
        return cmu[lower]
    if word.istitle() and lower in en_data.names():
        return en_data.names()[lower]
    if len(lower) <= 3:  # short unknowns are spelled; "a" as the letter's name
        phones = []
        for char in lower:
            if char == "a":
                phones.append("EY1")
            elif not char.isalpha():
                phones.append(char)
            else:
                phones.extend(cmu[char])
        return phones
    if re.match(r"^([a-z]+)('s)$", lower):
        phones = list(_lookup(lower[:-2]))  # the stem in lower case: no longer a name
        if phones[-1] in _VOICELESS:
            return [*phones, "S"]
        if phones[-1] in _SIBILANT:
            return [*phones, "AH0", "Z"]
        return [*phones, "Z"]
    parts = _segmenter().segment(lower)
    if len(parts) == 1:
        return _predictor()(lower)
    return [phone for part in parts for phone in _lookup(part)]


def _pronounce(word: str, tag: str) -> list[str]:
    lower = word.lower()
    if re.search("[a-z]", lower) is None:
        return [lower]
    if len(lower) == 1:
        return ["EY1"] if word == "A" else en_data.dictionary()[lower]
    homographs = en_data.homographs()
    if lower in homographs:
        when, otherwise, pos = homographs[lower]
        # A tag shorter than the homograph's POS still counts when it is its start (only "read"'s VBP has two).
        return when if tag.startswith(pos) or (len(tag) < len(pos) and pos.startswith(tag)) else otherwise
    return _lookup(word)


def g2p(text: str, tagger: Tagger) -> list[str]:
    """english.g2p: the phones of normalised text, UNK for the predictor's unknown, v2 phones only."""
    phones: list[str] = []
    for i, (word, tag) in enumerate(tagger.tag(tokenize(text))):
        if i:
            phones.append(" ")
        phones.extend(_pronounce(word, tag))
    known = symbol_ids()
    kept = []
    for phone in phones:
        if phone in _DROPPED:
            continue
        phone = "UNK" if phone == "<unk>" else phone
        if phone in known:
            kept.append(phone)
        elif phone == "'":
            kept.append("-")
        # anything else (a run of marks the tokenizer kept whole, "--") is dropped, as upstream drops it
    return kept
