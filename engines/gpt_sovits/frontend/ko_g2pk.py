"""Korean spelling -> how it is pronounced, in Hangul, as g2pk2 0.0.3's G2p does it with its defaults (prescriptive,
vowels kept apart, syllables composed), for text whose Latin letters GPT-SoVITS has already named in Hangul.

The steps, in upstream's order: the idiom list (regular expressions, assets/g2pk2-idioms.txt); the analyser's marks
(python-mecab-ko with mecab-ko-dic: /J on the particle 의, /E on an ending in ㄹ, /P on a verb or adjective stem
ending in ㄴ ㄵ ㅁ ㄻ ㄺ ㄼ ㄾ, /B on a bound noun); numbers (ko_numbers); letters decomposed; the special rules
(_SPECIAL); the coda x onset table (assets/g2pk2-table.csv), which also works across one space; the liaisons
(_LINKS); syllables composed again.

g2pk2's English step is not here: GPT-SoVITS names every ASCII letter before g2pk2 runs, so that step only ever
sees runs of apostrophes, and no word of CMUdict is apostrophes only (the golden set records both). g2pk2 writes
the syllables in its special rules as decomposed letters (they run on decomposed text); here they are written as
syllables and decomposed on load, so [그] is the class of ᄀ and ᅳ as upstream's is."""

from __future__ import annotations

import re
from functools import cache

from mizuoto.core.errors import InputError

from .ko_jamo import decompose, syllable
from .ko_numbers import convert as convert_numbers
from .zh_data import DATA

INSTALL = "pip install python-mecab-ko==1.3.7 python-mecab-ko-dic==2.1.1.post2"

# (pattern, replacement) in order: special.py's jyeo, consonant_ui, josa_ui (prescriptive: the mark goes), jamo,
# rieulgiyeok, rieulbieub, verb_nieun, balb, palatalize, modifying_rieul. ye and vowel_ui act only when descriptive.
_SPECIAL_SPELLED = (
    ("([ᄌᄍᄎ])ᅧ", r"\1ᅥ"),
    ("([ᄀᄁᄂᄃᄄᄅᄆᄇᄈᄉᄊᄌᄍᄎᄏᄐᄑᄒ])ᅴ", r"\1ᅵ"),
    ("/J", ""),
    ("([그])ᆮᄋ", r"\1ᄉ"), ("([으])[ᆽᆾᇀᇂ]ᄋ", r"\1ᄉ"), ("([으])[ᆿ]ᄋ", r"\1ᄀ"), ("([으])[ᇁ]ᄋ", r"\1ᄇ"),
    ("ᆰ/P([ᄀᄁ])", "ᆯᄁ"),
    *((f"([ᆲᆴ])/P{plain}", rf"\1{tense}") for plain, tense in zip("ᄀᄃᄉᄌ", "ᄁᄄᄊᄍ", strict=True)),
    *((f"([ᆫᆷ])/P{plain}", rf"\1{tense}") for plain, tense in zip("ᄀᄃᄉᄌ", "ᄁᄄᄊᄍ", strict=True)),
    *((f"ᆬ/P{plain}", f"ᆫ{tense}") for plain, tense in zip("ᄀᄃᄉᄌ", "ᄁᄄᄊᄍ", strict=True)),
    *((f"ᆱ/P{plain}", f"ᆷ{tense}") for plain, tense in zip("ᄀᄃᄉᄌ", "ᄁᄄᄊᄍ", strict=True)),
    ("(바)ᆲ(($|[^ᄋᄒ]))", r"\1ᆸ\2"), ("(너)ᆲ([ᄌᄍ]ᅮ|[ᄃᄄ]ᅮ)", r"\1ᆸ\2"),
    ("ᆮᄋ([ᅵᅧ])", r"ᄌ\1"), ("ᇀᄋ([ᅵᅧ])", r"ᄎ\1"), ("ᆴᄋ([ᅵᅧ])", r"ᆯᄎ\1"), ("ᆮᄒ([ᅵ])", r"ᄎ\1"),
    *((f"ᆯ/E {plain}", f"ᆯ {tense}") for plain, tense in zip("ᄀᄃᄇᄉᄌ", "ᄁᄄᄈᄊᄍ", strict=True)),
    ("ᆯ걸", "ᆯ껄"), ("ᆯ밖에", "ᆯ빠께"), ("ᆯ세라", "ᆯ쎄라"), ("ᆯ수록", "ᆯ쑤록"), ("ᆯ지라도", "ᆯ찌라도"),
    ("ᆯ지언정", "ᆯ찌언정"), ("ᆯ진대", "ᆯ찐대"),
)
_SPECIAL = tuple((decompose(pattern), decompose(replacement)) for pattern, replacement in _SPECIAL_SPELLED)
# regular.py's link1 (a coda before a silent ㅇ moves over), link2 (a double coda's second half moves), link4 (ㅎ
# codas fall silent); plain replacements, in order. link3 does nothing in 0.0.3.
_LINKS = (
    *((coda + "ᄋ", onset) for coda, onset in zip("ᆨᆩᆫᆮᆯᆷᆸᆺᆻᆽᆾᆿᇀᇁ", "ᄀᄁᄂᄃᄅᄆᄇᄉᄊᄌᄎᄏᄐᄑ", strict=True)),
    *((coda + "ᄋ", moved) for coda, moved in zip("ᆪᆬᆰᆱᆲᆳᆴᆵᆹ", "ᆨᄊ ᆫᄌ ᆯᄀ ᆯᄆ ᆯᄇ ᆯᄊ ᆯᄐ ᆯᄑ ᆸᄊ".split(), strict=True)),
    ("ᇂᄋ", "ᄋ"), ("ᆭᄋ", "ᄂ"), ("ᆶᄋ", "ᄅ"),
)
_STEM_CODAS = "ᆫᆬᆷᆱᆰᆲᆴ"  # a verb or adjective whose last syllable ends so gets /P


@cache
def _idioms() -> tuple[tuple[str, str], ...]:
    """idioms.txt: `pattern===replacement` per line, # starts a comment."""
    rules = []
    for line in (DATA / "g2pk2-idioms.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if "===" in line:
            pattern, replacement = line.split("===")
            rules.append((pattern, replacement))
    return tuple(rules)


@cache
def _table() -> tuple[tuple[str, str], ...]:
    """table.csv: the header's onsets (each a pattern with an optional space) x each row's coda -> the cell's
    replacement, read row by row; a cell's "(12/23)" names the rules it comes from."""
    lines = (DATA / "g2pk2-table.csv").read_text(encoding="utf-8").splitlines()
    onsets = lines[0].split(",")
    rules = []
    for line in lines[1:]:
        cells = line.split(",")
        for onset, cell in zip(onsets[1:], cells[1:], strict=True):
            if cell:
                rules.append((cells[0] + onset, cell.split("(")[0]))
    return tuple(rules)


@cache
def analyser():
    """python-mecab-ko's MeCab over mecab-ko-dic, loaded once per process (its dictionary is 108 MB installed)."""
    try:
        import mecab
    except ImportError as error:
        raise InputError(f"Korean text needs the morphological analyser python-mecab-ko ({INSTALL})") from error
    return mecab.MeCab()


def annotate(text: str) -> str:
    """utils.annotate: the analyser's marks after the last character of each morpheme that takes one; the text is
    left alone where the analyser's morphemes do not spell it out (only spaces may be dropped)."""
    morphemes = analyser().pos(text)
    if text.replace(" ", "") != "".join(surface for surface, _ in morphemes):
        return text
    tags = []
    for surface, tag in morphemes:
        last = tag.split("+")[-1]
        tags.extend("_" * (len(surface) - 1) + ("B" if last == "NNBC" else last[0]))
    tags = iter(tags)
    out = []
    for char in text:
        tag = " " if char == " " else next(tags)
        out.append(char)
        coda = decompose(char)[-1]
        if tag == "J" and char == "의":
            out.append("/J")
        elif tag == "E" and coda == "ᆯ":
            out.append("/E")
        elif tag == "V" and coda in _STEM_CODAS:
            out.append("/P")
        elif tag == "B":
            out.append("/B")
    return "".join(out)


def compose(letters: str) -> str:
    """utils.compose: a vowel with no lead before it gets a silent ㅇ, then lead + vowel + tail and lead + vowel
    become syllables; letters that make neither stay as they are."""
    letters = re.sub("(^|[^\u1100-\u1112])([\u1161-\u1175])", "\\1\u110b\\2", letters)
    letters = re.sub("[\u1100-\u1112][\u1161-\u1175][\u11a8-\u11c2]", lambda m: syllable(*m.group()), letters)
    return re.sub("[\u1100-\u1112][\u1161-\u1175]", lambda m: syllable(*m.group()), letters)


def pronounce(text: str) -> str:
    """G2p()(text) with its defaults."""
    for pattern, replacement in _idioms():
        text = re.sub(pattern, replacement, text)
    letters = decompose(convert_numbers(annotate(text)))
    for pattern, replacement in _SPECIAL:
        letters = re.sub(pattern, replacement, letters)
    letters = re.sub("/[PJEB]", "", letters)
    for pattern, replacement in _table():
        letters = re.sub(pattern, replacement, letters)
    for old, new in _LINKS:
        letters = letters.replace(old, new)
    return compose(letters)
