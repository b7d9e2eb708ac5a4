"""GPT-SoVITS's Chinese front end (text/chinese2.py at 48b1a01, the v2 family's `zh`): normalised text -> phones
and word2ph (how many phones each character has, for the BERT features).

text_normalize: PaddleSpeech's normaliser, then punctuation folded to the five marks the phone set has (and
everything that is neither Chinese nor such a mark dropped), then runs of marks cut to their first.
g2p: per sentence (split after each mark), jieba's words with part-of-speech tags, re-merged for tone sandhi;
every character's pinyin from G2PW for the whole sentence, whole-word corrections from polyphonic-fix, tone
sandhi and erhua per word; each syllable -> (initial, final + tone) through opencpop-strict."""

from __future__ import annotations

import re
from functools import cache

from pypinyin.contrib.tone_convert import to_finals_tone3, to_initials

from mizuoto.core.errors import InputError

from . import tone_sandhi, zh_data
from .zh_data import opencpop, pronunciation_corrections, punctuation, replace_consecutive_punctuation, word_set

_FOLD = {"：": ",", "；": ",", "，": ",", "。": ".", "！": "!", "？": "?", "\n": ".", "·": ",", "、": ",",
         "...": "…", "$": ".", "/": ",", "—": "-", "~": "…", "～": "…"}


@cache
def _fold_pattern() -> re.Pattern:
    # One alternation in the table's order, as upstream builds it ("..." before its single dots).
    return re.compile("|".join(re.escape(mark) for mark in _FOLD))


def replace_punctuation(text: str) -> str:
    text = text.replace("嗯", "恩").replace("呣", "母")
    text = _fold_pattern().sub(lambda match: _FOLD[match.group()], text)
    return re.sub(r"[^\u4e00-\u9fa5" + "".join(punctuation()) + r"]+", "", text)


def text_normalize(text: str) -> str:
    from .zh_normalize import normalize

    folded = "".join(replace_punctuation(sentence) for sentence in normalize(text))
    return replace_consecutive_punctuation(folded)  # repeated marks would leak the reference's prosody


# --- g2p ----------------------------------------------------------------------------------------------------

def _correct(word: str, pinyins: list[str]) -> list[str]:
    """polyphonic(-fix).rep: a listed word takes its listed pinyin whole; else each listed character its first."""
    table = pronunciation_corrections()
    if word in table:
        return table[word]
    for i, char in enumerate(word):
        if char in table:
            pinyins[i] = table[char][0]
    return pinyins


def _merge_erhua(initials: list[str], finals: list[str], word: str, pos: str):
    for i, final in enumerate(finals):  # a word-final 儿 read er1 is er2
        if i == len(finals) - 1 and word[i] == "儿" and final == "er1":
            finals[i] = "er2"
    if word not in word_set("must_erhua") and (word in word_set("not_erhua") or pos in {"a", "j", "nr"}):
        return initials, finals
    if len(finals) != len(word):  # "……" and the like
        return initials, finals
    merged_finals: list[str] = []
    for i, final in enumerate(finals):
        if (i == len(finals) - 1 and word[i] == "儿" and final in {"er2", "er5"}
                and word[-2:] not in word_set("not_erhua") and merged_finals):
            final = "er" + merged_finals[-1][-1]  # 儿 takes the tone of the syllable it joins
        merged_finals.append(final)
    return list(initials), merged_finals


# Syllables pypinyin spells one way and opencpop another.
_AFTER_INITIAL = {"uei": "ui", "iou": "iu", "uen": "un"}
_ALONE = {"ing": "ying", "i": "yi", "in": "yin", "u": "wu"}
_ALONE_FIRST_LETTER = {"v": "yu", "e": "e", "i": "y", "u": "w"}


def _syllable_phones(initial: str, final: str, sentence: str) -> list[str]:
    toneless, tone = final[:-1], final[-1]
    if tone not in "12345":
        raise InputError(f"G2PW gave {initial + final!r} without a tone in {sentence!r}")
    syllable = initial + toneless
    if initial:
        syllable = initial + _AFTER_INITIAL.get(toneless, toneless)
    elif syllable in _ALONE:
        syllable = _ALONE[syllable]
    elif syllable[0] in _ALONE_FIRST_LETTER:
        syllable = _ALONE_FIRST_LETTER[syllable[0]] + syllable[1:]
    if syllable not in opencpop():
        raise InputError(f"the pinyin {initial + final!r} of {sentence!r} has no phones in opencpop-strict")
    phone_initial, phone_final = opencpop()[syllable]
    return [phone_initial, phone_final + tone]


def _sentence_phones(sentence: str, pinyins: list[str]) -> tuple[list[str], list[int]]:
    import jieba.posseg

    zh_data.jieba()  # quiet
    initials: list[str] = []
    finals: list[str] = []
    start = 0
    for word, pos in tone_sandhi.pre_merge_for_modify(jieba.posseg.lcut(sentence)):
        end = start + len(word)
        if pos == "eng":
            start = end
            continue
        word_initials, word_finals = [], []
        for syllable in _correct(word, pinyins[start:end]):
            if syllable[0].isalpha():
                word_initials.append(to_initials(syllable))
                word_finals.append(to_finals_tone3(syllable, neutral_tone_with_five=True))
            else:  # a mark stands for itself
                word_initials.append(syllable)
                word_finals.append(syllable)
        start = end
        word_finals = tone_sandhi.modified_tone(word, pos, word_finals)
        word_initials, word_finals = _merge_erhua(word_initials, word_finals, word, pos)
        initials += word_initials
        finals += word_finals
    phones: list[str] = []
    word2ph: list[int] = []
    for initial, final in zip(initials, finals, strict=True):
        if initial == final:
            if initial not in punctuation():
                raise InputError(f"{initial!r} in {sentence!r} is neither a syllable nor a mark")
            syllable = [initial]
        else:
            syllable = _syllable_phones(initial, final, sentence)
        phones += syllable
        word2ph.append(len(syllable))
    return phones, word2ph


def g2p(text: str, g2pw) -> tuple[list[str], list[int]]:
    """Normalised Chinese `text` -> (phones, word2ph), G2PW (a g2pw.G2PW) choosing the polyphonic readings."""
    marks = "".join(punctuation())
    sentences = [s for s in re.split(r"(?<=[{0}])\s*".format(marks), text) if s.strip() != ""]
    sentences = [re.sub("[a-zA-Z]+", "", sentence) for sentence in sentences]  # letters were never kept
    readings = iter(g2pw([s for s in sentences if s]) if any(sentences) else [])
    phones: list[str] = []
    word2ph: list[int] = []
    for sentence in sentences:
        pinyins = next(readings) if sentence else []
        sentence_phones, sentence_word2ph = _sentence_phones(sentence, pinyins)
        phones += sentence_phones
        word2ph += sentence_word2ph
    return phones, word2ph
