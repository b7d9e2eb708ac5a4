"""CosyVoice 2/3's text normalisation, exact to ace7c47's `CosyVoiceFrontEnd.text_normalize`
(cosyvoice/cli/frontend.py) and `cosyvoice/utils/frontend_utils.py`.

Upstream picks its text frontend once: ttsfrd (proprietary, not supported here), else wetext's FST normalizers
(zh with remove_erhua=False, and en), else none (`text_frontend == ''`, its own fallback). We do the same without
ttsfrd: wetext when it imports and its normalizers can be built (wetext 0.0.4 downloads its FSTs from ModelScope
when built), else none; `text_frontend().name` says which ("wetext" or "none") for the engine's info line.

Then the rules, in upstream's order. Chinese text (any character in U+4E00..U+9FFF): wetext zh, newlines removed,
blanks between non-ASCII characters removed, ² ³ spelled, '.' -> '。', ' - ' -> '，', brackets dropped, a trailing
comma run -> '。', pieces of at most about 80 characters. Other text: wetext en, digit runs spelled by inflect, pieces
of at most about 80 tokens. Pieces that are only punctuation or symbols are dropped. A text holding both '<|' and
'|>' (a special token such as <|endofprompt|>) skips all of it, as does `frontend=False`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

import regex  # tiktoken's dependency, installed with ours; `re` has no \p{P} / \p{S}

from mizuoto.core.errors import InputError

_CHINESE = re.compile(r"[\u4e00-\u9fff]+")
_ONLY_PUNCTUATION = regex.compile(r"^[\p{P}\p{S}]*$")
_TRAILING_COMMAS = re.compile(r"[，,、]+$")
# split_paragraph's sentence ends per language; a closing quote right after one stays with its sentence
_ENDS = {"zh": ("。", "？", "！", "；", "：", "、", ".", "?", "!", ";"), "en": (".", "?", "!", ";", ":")}
_CLOSING_QUOTES = ('"', "”")
# text_normalize's split_paragraph arguments, the same in both branches
TOKEN_MAX, TOKEN_MIN, MERGE_LEN = 80, 60, 20


@dataclass(frozen=True)
class TextFrontend:
    """Which text frontend runs before the rules: "wetext" (its zh and en normalizers) or "none"."""

    name: str
    zh: object | None = None
    en: object | None = None


NO_FRONTEND = TextFrontend("none")


@cache
def text_frontend() -> TextFrontend:
    """wetext's normalizers when wetext can be imported and built, else none; tried once per process, as upstream
    tries once per frontend. Upstream's bare `except` also swallows KeyboardInterrupt; we let that through."""
    try:
        from wetext import Normalizer

        return TextFrontend("wetext", zh=Normalizer(remove_erhua=False), en=Normalizer())
    except Exception:
        return NO_FRONTEND


def contains_chinese(text: str) -> bool:
    return _CHINESE.search(text) is not None


def replace_corner_mark(text: str) -> str:
    return text.replace("²", "平方").replace("³", "立方")


def remove_bracket(text: str) -> str:
    # upstream removes '`' twice (a full-width backquote was presumably meant); once is the same
    for mark in ("（", "）", "【", "】", "`"):
        text = text.replace(mark, "")
    return text.replace("——", " ")


def replace_blank(text: str) -> str:
    """Keep a space only between two ASCII non-space characters. As upstream indexes: the character before a
    leading space is the text's last one; a trailing space has no next character (upstream raises IndexError)."""
    out = []
    for i, c in enumerate(text):
        if c != " ":
            out.append(c)
            continue
        if i + 1 == len(text):
            raise InputError("CosyVoice's text rules cannot read a text ending in a space here (upstream fails too); "
                             "remove the trailing space")
        after, before = text[i + 1], text[i - 1]
        if after.isascii() and after != " " and before.isascii() and before != " ":
            out.append(c)
    return "".join(out)


@cache
def _inflect():
    import inflect

    return inflect.engine()


def spell_out_number(text: str) -> str:
    """Each run of characters str.isdigit() accepts (superscripts and other scripts' digits too) -> inflect's
    number_to_words, as upstream; runs over 36 digits are out of inflect's range."""
    import inflect

    def words(run: str) -> str:
        try:
            return _inflect().number_to_words(run)
        except inflect.NumOutOfRangeError:
            raise InputError(f"the number {run[:12]}... ({len(run)} digits) is too long for CosyVoice's number "
                             "reading (inflect reads up to 36 digits); write it in words or split it") from None

    out, start = [], None
    for i, c in enumerate(text):
        if c.isdigit():
            if start is None:
                start = i
            continue
        if start is not None:
            out.append(words(text[start:i]))
            start = None
        out.append(c)
    if start is not None:
        out.append(words(text[start:]))
    return "".join(out)


def split_paragraph(text: str, encode, lang: str) -> list[str]:
    """Upstream's split_paragraph at text_normalize's settings (80/60/20, no comma split): sentences cut after
    each end mark, then gathered while the piece stays within TOKEN_MAX or is not yet over TOKEN_MIN; a last piece
    under MERGE_LEN joins the one before. Lengths are characters for zh, `len(encode(piece))` for en."""
    def length(piece: str) -> int:
        return len(piece) if lang == "zh" else len(encode(piece))

    if not text:
        raise InputError("the text is empty after CosyVoice's text normalisation; nothing to speak")
    ends = _ENDS[lang]
    if text[-1] not in ends:
        text += "。" if lang == "zh" else "."
    sentences, start = [], 0
    for i, c in enumerate(text):
        if c not in ends:
            continue
        if i > start:
            sentences.append(text[start:i] + c)
        if i + 1 < len(text) and text[i + 1] in _CLOSING_QUOTES:
            # upstream pops the last sentence even when this end mark made none (it then takes the one before)
            if not sentences:
                raise InputError("CosyVoice's sentence splitting cannot read a text that starts with an end mark "
                                 "and a closing quote (upstream fails too)")
            sentences.append(sentences.pop() + text[i + 1])
            start = i + 2
        else:
            start = i + 1
    pieces, current = [], ""
    for sentence in sentences:
        if length(current + sentence) > TOKEN_MAX and length(current) > TOKEN_MIN:
            pieces.append(current)
            current = ""
        current += sentence
    if current:
        if length(current) < MERGE_LEN and pieces:
            pieces[-1] += current
        else:
            pieces.append(current)
    return pieces


def is_only_punctuation(text: str) -> bool:
    return _ONLY_PUNCTUATION.fullmatch(text) is not None


def normalize(text: str, tokenizer, split: bool = True, frontend: bool = True,
              using: TextFrontend | None = None) -> list[str] | str:
    """upstream's text_normalize(text, split, text_frontend=frontend): with split the pieces to speak one by one
    (tts text), without it the whole normalised text (prompt and instruct text). `tokenizer` has
    `encode(text) -> ids` (CosyVoiceTokenizer); `using` defaults to `text_frontend()`."""
    if "<|" in text and "|>" in text:
        frontend = False  # upstream: a special token in the text means it was written for the LM as is
    if not frontend or text == "":
        return [text] if split else text
    text = text.strip()
    chosen = text_frontend() if using is None else using
    if contains_chinese(text):
        if chosen.zh is not None:
            text = chosen.zh.normalize(text)
        text = text.replace("\n", "")
        text = replace_blank(text)
        text = replace_corner_mark(text)
        text = text.replace(".", "。").replace(" - ", "，")
        text = remove_bracket(text)
        text = _TRAILING_COMMAS.sub("。", text)
        pieces = split_paragraph(text, tokenizer.encode, "zh")
    else:
        if chosen.en is not None:
            text = chosen.en.normalize(text)
        text = spell_out_number(text)
        pieces = split_paragraph(text, tokenizer.encode, "en")
    pieces = [p for p in pieces if not is_only_punctuation(p)]
    return pieces if split else text
