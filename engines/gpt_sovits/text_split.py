"""How GPT-SoVITS cuts a text into fragments before its front end (48b1a01): `TTS_infer_pack/
text_segmentation_method.py` (the cut0..cut5 methods, split_big_text) and TextPreprocessor's preprocess /
pre_seg_text (consecutive punctuation folded, a short first phrase prefixed with a full stop, the method's
lines, empty and symbol-only lines dropped, lines under 5 characters merged forward, a full stop appended,
lines over 510 characters cut at punctuation).

The methods (upstream's names; api_v2's default is cut5):
- cut0: no cut;            cut1: every four sentences;      cut2: about 50 characters;
- cut3: at "。";           cut4: at "." (not between digits); cut5: at every punctuation mark.
"""

from __future__ import annotations

import re
from typing import Callable

from mizuoto.core.errors import InputError

# text_segmentation_method.splits: the marks that end a sentence
SPLITS = {"，", "。", "？", "！", ",", ".", "?", "!", "~", ":", "：", "—", "…"}
# the methods' "only punctuation" test (text_segmentation_method.punctuation: the space included)
METHOD_PUNCTUATION = {"!", "?", "…", ",", ".", "-", " "}
# TextPreprocessor.punctuation: what replace_consecutive_punctuation folds (no space)
FOLDED_PUNCTUATION = {"!", "?", "…", ",", ".", "-"}
CUT5_MARKS = {",", ".", ";", "?", "!", "、", "，", "。", "？", "！", "：", "…"}
MAX_FRAGMENT = 510  # the BERT's limit: longer lines are cut at punctuation
SHORT = 5  # lines shorter than this join the next one


def sentences(text: str) -> list[str]:
    """text_segmentation_method.split: after each sentence mark, "……" and "——" first read as "。" and "，"."""
    text = text.replace("……", "。").replace("——", "，")
    if text[-1] not in SPLITS:
        text += "。"
    out, start = [], 0
    for i, char in enumerate(text):
        if char in SPLITS:
            out.append(text[start:i + 1])
            start = i + 1
    return out


def _only_punctuation(item: str, marks: set) -> bool:
    return set(item).issubset(marks)


def _kept(items: list[str]) -> str:
    return "\n".join(item for item in items if not _only_punctuation(item, METHOD_PUNCTUATION))


def cut0(text: str) -> str:
    return text if not _only_punctuation(text, METHOD_PUNCTUATION) else "\n"


def cut1(text: str) -> str:
    text = text.strip("\n")
    parts = sentences(text)
    bounds = list(range(0, len(parts), 4))
    bounds[-1] = None
    if len(bounds) > 1:
        groups = ["".join(parts[bounds[i]:bounds[i + 1]]) for i in range(len(bounds) - 1)]
    else:
        groups = [text]
    return _kept(groups)


def cut2(text: str) -> str:
    text = text.strip("\n")
    parts = sentences(text)
    if len(parts) < 2:
        return text
    groups, count, current = [], 0, ""
    for part in parts:
        count += len(part)
        current += part
        if count > 50:
            groups.append(current)
            count, current = 0, ""
    if current != "":
        groups.append(current)
    if len(groups) > 1 and len(groups[-1]) < 50:  # a short last group joins the one before
        groups[-2] += groups[-1]
        groups = groups[:-1]
    return _kept(groups)


def cut3(text: str) -> str:
    text = text.strip("\n")
    return _kept(text.strip("。").split("。"))


def cut4(text: str) -> str:
    text = text.strip("\n")
    return _kept(re.split(r"(?<!\d)\.(?!\d)", text.strip(".")))


def cut5(text: str) -> str:
    text = text.strip("\n")
    merged, current = [], []
    for i, char in enumerate(text):
        current.append(char)
        if char in CUT5_MARKS:
            decimal = char == "." and 0 < i < len(text) - 1 and text[i - 1].isdigit() and text[i + 1].isdigit()
            if not decimal:
                merged.append("".join(current))
                current = []
    if current:
        merged.append("".join(current))
    return "\n".join(item for item in merged if not _only_punctuation(item, CUT5_MARKS))


METHODS: dict[str, Callable[[str], str]] = {"cut0": cut0, "cut1": cut1, "cut2": cut2, "cut3": cut3, "cut4": cut4,
                                            "cut5": cut5}


def split_big_text(text: str, max_len: int = MAX_FRAGMENT) -> list[str]:
    """Pieces of at most max_len characters where the punctuation allows (a longer run stays whole)."""
    marks = "".join(SPLITS)  # upstream builds the character class from the set's own order
    result, current = [], ""
    for segment in re.split("([" + marks + "])", text):
        if len(current + segment) > max_len:
            result.append(current)
            current = segment
        else:
            current += segment
    if current:
        result.append(current)
    return result


def fold_punctuation(text: str) -> str:
    """replace_consecutive_punctuation: a run of marks becomes its first."""
    marks = "".join(re.escape(p) for p in FOLDED_PUNCTUATION)
    return re.sub(f"([{marks}])([{marks}])+", r"\1", text)


def first_phrase(text: str) -> str:
    return re.split("[" + "".join(re.escape(sep) for sep in SPLITS) + "]", text)[0].strip()


def merge_short(texts: list[str], threshold: int) -> list[str]:
    """merge_short_text_in_array: lines gathered until they reach `threshold` characters; a short tail joins the
    last line."""
    if len(texts) < 2:
        return texts
    result, current = [], ""
    for text in texts:
        current += text
        if len(current) >= threshold:
            result.append(current)
            current = ""
    if current:
        if result:
            result[-1] += current
        else:
            result.append(current)
    return result


def fragments(text: str, language: str, method: str = "cut5") -> list[str]:
    """TextPreprocessor.preprocess's cutting: the text's fragments, each ending in a sentence mark."""
    if method not in METHODS:
        raise InputError(f"text split method {method!r} is not one of {', '.join(METHODS)}")
    stop = "." if language == "en" else "。"
    text = fold_punctuation(text).strip("\n")
    if len(text) == 0:
        return []
    if text[0] not in SPLITS and len(first_phrase(text)) < 4:
        text = stop + text
    text = METHODS[method](text)
    while "\n\n" in text:
        text = text.replace("\n\n", "\n")
    lines = text.split("\n")
    if all(line in (" ", "\n", "") for line in lines):
        raise InputError("the text has nothing to speak (only spaces or line breaks); give some words")
    lines = merge_short([line for line in lines if line not in (" ", "")], SHORT)
    out = []
    for line in lines:
        if len(line.strip()) == 0 or not re.sub(r"\W+", "", line):
            continue  # blank or symbols only
        if line[-1] not in SPLITS:
            line += stop
        out.extend(split_big_text(line) if len(line) > MAX_FRAGMENT else [line])
    return out
