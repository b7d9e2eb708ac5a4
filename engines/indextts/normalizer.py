"""IndexTTS 2's text normalisation, matching upstream's `TextNormalizer.normalize` (indextts/utils/front.py at
ee40fa7) as `IndexTTS2.__init__` builds it (enable_glossary=True, the glossary read from the model folder's
glossary.yaml when there is one).

Upstream picks its FST normaliser by platform: off Linux wetext's zh (remove_erhua=False) and en TN normalizers,
on Linux WeTextProcessing's, which compiles its FSTs with pynini. We run wetext everywhere (no pynini), so on Linux
the FSTs are not upstream's Linux ones. What differs there: WeTextProcessing's zh normaliser also turns traditional
characters into simplified ones and full-width characters into half-width ones, and runs on every text, while wetext
(at upstream's arguments) leaves those as they are and skips its FSTs for text without a digit. Upstream has no
path without a normaliser (IndexTTS2 fails to load without its package), so neither do we by default: without
wetext `load_normaliser("wetext")` raises one line. `normaliser="none"` is upstream's TextTokenizer built with
normalizer=None (its own path, which IndexTTS2 never takes): the text goes to the CJK split unchanged.

The rules around the FSTs, in upstream's order: `<word|reading>` annotations swapped for letter-only placeholders;
then, for text that "uses Chinese" (a CJK ideograph, no ASCII letter, an e-mail address, or a pinyin syllable
with a tone digit), "what's"-style contractions -> "what is", the glossary's zh readings, hyphenated technical
terms (GPT-5-nano) protected, pinyin syllables with tones and hyphenated/dotted Chinese names replaced by
placeholders, the zh FST, all restored (jqx + u/ü pinyin respelled with v and upper-cased), punctuation mapped
by the zh table; other text gets contractions, the glossary's en readings, technical terms, the en FST and the
plain table. Differences: upstream replaces the pinyin and name strings it found in `set` order, which changes
with the process's hash seed; that is visible only when one is part of another (a name match takes in the
ideographs around it, so 由克里斯托弗·诺兰执导 holds 克里斯托弗·诺兰): replaced first, the shorter one can break the
longer one (a pinyin syllable then loses its respelling), or the FST sees a few more characters. We replace the
longest first, which breaks nothing and is one of upstream's orders. A failing
FST is upstream's bare `except` (zh: empty text, en: the text before the FST) without its traceback print.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mizuoto.core.errors import MizuotoError

WETEXT_INSTALL = "pip install wetext==0.1.0"  # upstream's uv.lock; the wheel carries its FSTs (needs kaldifst)

# Punctuation after the FST, as (what, becomes) in upstream's order: the alternation tries them in this order at
# each position, so "，，，" is three commas and "……" becomes "…" only where "…" pairs start.
_PUNCTUATION = (
    ("：", ","), ("；", ","), (";", ","), ("，", ","), ("。", "."), ("！", "!"), ("？", "?"), ("\n", " "),
    ("·", "-"), ("、", ","), ("...", "…"), (",,,", "…"), ("，，，", "…"), ("……", "…"), ("“", "'"), ("”", "'"),
    ('"', "'"), ("‘", "'"), ("’", "'"), ("（", "'"), ("）", "'"), ("(", "'"), (")", "'"), ("《", "'"), ("》", "'"),
    ("【", "'"), ("】", "'"), ("[", "'"), ("]", "'"), ("—", "-"), ("～", "-"), ("~", "-"), ("「", "'"), ("」", "'"),
    (":", ","),
)
_ZH_PUNCTUATION = (("$", "."), *_PUNCTUATION)  # Chinese text also reads a dollar sign as a full stop


def _table(pairs) -> tuple[re.Pattern, dict]:
    return re.compile("|".join(re.escape(p) for p, _ in pairs)), dict(pairs)


_PLAIN_TABLE, _ZH_TABLE = _table(_PUNCTUATION), _table(_ZH_PUNCTUATION)

PINYIN_WITH_TONE = re.compile(
    r"(?<![a-z])((?:[bpmfdtnlgkhjqxzcsryw]|[zcs]h)?(?:[aeiouüv]|[ae]i|u[aio]|ao|ou|i[aue]|[uüv]e|[uvü]ang?|uai"
    r"|[aeiuv]n|[aeio]ng|ia[no]|i[ao]ng)|ng|er)([1-5])", re.IGNORECASE)
# Chinese names joined by ·, - or — (克里斯托弗·诺兰, 约瑟夫·高登-莱维特): kept away from the zh FST
CHINESE_NAME = re.compile(r"[\u4e00-\u9fff]+(?:[-·—][\u4e00-\u9fff]+){1,2}", re.IGNORECASE)
# letter-led hyphenated terms (GPT-5-nano, F5-TTS); a phone number 135-4567-8900 starts with a digit and is left
TECH_TERM = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)+")
CONTRACTION = re.compile(r"(what|where|who|which|how|t?here|it|s?he|that|this)'s", re.IGNORECASE)
ANNOTATION = re.compile(r"<([^|>\n]+)\|([^>\n]+)>")
_EMAIL = re.compile(r"^[a-zA-Z0-9]+@[a-zA-Z0-9]+\.[a-zA-Z]+$")
_IDEOGRAPH = re.compile(r"[\u4e00-\u9fff]")
_ASCII_LETTER = re.compile(r"[a-zA-Z]")
_HYPHEN_MARK = re.compile(r"\s*<H>\s*")  # the FST may put blanks around the protected hyphen
_JQX_U = re.compile(r"([jqx])[uü](n|e|an)*(\d)", re.IGNORECASE)


def uses_chinese(text: str) -> bool:
    """Whether the zh branch normalises `text` (upstream's use_chinese)."""
    if _IDEOGRAPH.search(text) or not _ASCII_LETTER.search(text) or _EMAIL.match(text):
        return True
    return PINYIN_WITH_TONE.search(text) is not None


def _letters(n: int) -> str:
    """0 -> a, 25 -> z, 26 -> aa: the annotation placeholders' names (letters only, so no FST touches them)."""
    name = ""
    while True:
        name = chr(ord("a") + n % 26) + name
        n = n // 26 - 1
        if n < 0:
            return name


def _annotation_key(n: int) -> str:
    return f"PRONPLACEHOLDER{_letters(n)}PRONPLACEHOLDER"


def _respell_pinyin(syllable: str) -> str:
    """j/q/x + u or ü is written with v (ju4 -> JV4, xün -> XVN) and upper-cased; other syllables are kept."""
    if syllable[0] not in "jqxJQX":
        return syllable
    return _JQX_U.sub(r"\g<1>v\g<2>\g<3>", syllable).upper()


def _placeholders(text: str, found: list[str], mark: str) -> tuple[str, list[str]]:
    """Each distinct string of `found` replaced by <mark_a>, <mark_b>, ..., the longest first (so none is
    replaced inside a longer one: upstream's set order may do that and lose the longer one). Upstream's letters
    run on past z into '{', '|', ... after 26 strings; so do these."""
    distinct = sorted(dict.fromkeys(found), key=len, reverse=True)
    for i, value in enumerate(distinct):
        text = text.replace(value, f"<{mark}_{chr(ord('a') + i)}>")
    return text, distinct


def _restore(text: str, values: list[str], mark: str, spell=lambda v: v) -> str:
    for i, value in enumerate(values):
        text = text.replace(f"<{mark}_{chr(ord('a') + i)}>", spell(value))
    return text


def _protect_tech_terms(text: str) -> tuple[str, bool]:
    terms = sorted(dict.fromkeys(TECH_TERM.findall(text)), key=len, reverse=True)  # longest first
    for term in terms:
        text = text.replace(term, term.replace("-", "<H>"))
    return text, bool(terms)


def apply_glossary(text: str, glossary: dict, lang: str) -> str:
    """Upstream's apply_glossary_terms: longest term first, matched case-blind; a term's reading is its entry
    for `lang` (else the term itself) or the one string given for both. The reading is a re.sub template, as
    upstream passes it."""
    for term in sorted(glossary, key=len, reverse=True):
        reading = glossary[term]
        if isinstance(reading, dict):
            reading = reading.get(lang, term)
        text = re.compile(re.escape(term), re.IGNORECASE).sub(reading, text)
    return text


@dataclass
class TextNormaliser:
    """The rules above around a zh and an en FST normaliser (anything with `.normalize(text) -> str`); `name` says
    which ran ("wetext" or "none"). `glossary`: {term: reading or {"zh": ..., "en": ...}}, as glossary.yaml."""

    name: str
    zh: object | None = None
    en: object | None = None
    glossary: dict = field(default_factory=dict)

    def normalise(self, text: str) -> str:
        if self.zh is None or self.en is None:
            return text  # the "none" normaliser: upstream's TextTokenizer without a normalizer
        originals = []  # each <word|reading>, swapped for a placeholder the FSTs leave alone

        def swap(match: re.Match) -> str:
            originals.append(match.group(0))
            return _annotation_key(len(originals) - 1)

        text = ANNOTATION.sub(swap, text)
        result = self._chinese(text) if uses_chinese(text) else self._other(text)
        for i, original in enumerate(originals):
            result = result.replace(_annotation_key(i), original)
        return result

    def _chinese(self, text: str) -> str:
        text = CONTRACTION.sub(r"\1 is", text)
        if self.glossary:
            text = apply_glossary(text, self.glossary, "zh")
        text, has_terms = _protect_tech_terms(text.rstrip())
        text, syllables = _placeholders(text, ["".join(m) for m in PINYIN_WITH_TONE.findall(text)], "pinyin")
        text, names = _placeholders(text, CHINESE_NAME.findall(text), "n")
        try:
            result = self.zh.normalize(text)
        except Exception:  # upstream: traceback printed, nothing spoken
            result = ""
        result = _restore(result, names, "n")
        result = _restore(result, syllables, "pinyin", _respell_pinyin)
        if has_terms:
            result = _HYPHEN_MARK.sub("-", result)
        pattern, table = _ZH_TABLE
        return pattern.sub(lambda m: table[m.group()], result)

    def _other(self, text: str) -> str:
        try:
            text = CONTRACTION.sub(r"\1 is", text)
            if self.glossary:
                text = apply_glossary(text, self.glossary, "en")
            protected, has_terms = _protect_tech_terms(text)
            result = self.en.normalize(protected)
            if has_terms:
                result = _HYPHEN_MARK.sub("-", result)
        except Exception:  # upstream: traceback printed, the text as it was before the FST
            result = text
        pattern, table = _PLAIN_TABLE
        return pattern.sub(lambda m: table[m.group()], result)


def load_normaliser(kind: str = "wetext", glossary: dict | None = None) -> TextNormaliser:
    """"wetext": wetext's zh and en TN normalizers at upstream's arguments; "none": no normalisation."""
    if kind == "none":
        return TextNormaliser("none", glossary=dict(glossary or {}))
    if kind != "wetext":
        raise MizuotoError(f"unknown IndexTTS text normaliser {kind!r}: use 'wetext' or 'none'")
    try:
        from wetext import Normalizer
    except ImportError:
        raise MizuotoError("IndexTTS's text normalisation needs wetext (upstream cannot run without its normaliser): "
                           f"{WETEXT_INSTALL}, or choose the text normaliser 'none' to speak the text as written"
                           ) from None
    return TextNormaliser("wetext", zh=Normalizer(remove_erhua=False, lang="zh", operator="tn"),
                          en=Normalizer(lang="en", operator="tn"), glossary=dict(glossary or {}))
