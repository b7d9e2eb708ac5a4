"""GPT-SoVITS's Chinese text normaliser (text/zh_normalization/text_normlization.py's TextNormalizer and
char_convert.py at 48b1a01, from PaddleSpeech): text -> sentences with numbers, dates, times, phone numbers,
measures, arithmetic and Greek letters written out in Chinese characters.

    split: spaces and decorative marks dropped, a break after each of ：、，；。？！,;?! (and a closing quote)
    per sentence: traditional -> simplified, full-width letters and digits -> ASCII, then the rules in
    upstream's order (zh_numbers.py), then the leftovers (/ 每, circled numbers, Greek letters, + - × ÷ =)
    and the marks no phone can carry removed."""

from __future__ import annotations

import json
import re
import string
from functools import cache

from . import zh_numbers as n
from .zh_data import DATA

_SENTENCE_END = re.compile(r"([：、，；。？！,;?!][”’]?)")
# Full-width letters and digits to ASCII. Upstream also means to map the ideographic space (U+3000) to " ", but
# its table is keyed by the string, which str.translate ignores: the space stays, as here.
_FULL_WIDTH = str.maketrans({chr(ord(c) + 65248): c for c in string.ascii_letters + string.digits})
_WORDS = (("/", "每"), ("①", "一"), ("②", "二"), ("③", "三"), ("④", "四"), ("⑤", "五"), ("⑥", "六"), ("⑦", "七"),
          ("⑧", "八"), ("⑨", "九"), ("⑩", "十"), ("α", "阿尔法"), ("β", "贝塔"), ("γ", "伽玛"), ("Γ", "伽玛"),
          ("δ", "德尔塔"), ("Δ", "德尔塔"), ("ε", "艾普西龙"), ("ζ", "捷塔"), ("η", "依塔"), ("θ", "西塔"),
          ("Θ", "西塔"), ("ι", "艾欧塔"), ("κ", "喀帕"), ("λ", "拉姆达"), ("Λ", "拉姆达"), ("μ", "缪"), ("ν", "拗"),
          ("ξ", "克西"), ("Ξ", "克西"), ("ο", "欧米克伦"), ("π", "派"), ("Π", "派"), ("ρ", "肉"), ("ς", "西格玛"),
          ("Σ", "西格玛"), ("σ", "西格玛"), ("τ", "套"), ("υ", "宇普西龙"), ("φ", "服艾"), ("Φ", "服艾"), ("χ", "器"),
          ("ψ", "普赛"), ("Ψ", "普赛"), ("ω", "欧米伽"), ("Ω", "欧米伽"),
          # what arithmetic left (and lazy writing: 1+1)
          ("+", "加"), ("-", "减"), ("×", "乘"), ("÷", "除"), ("=", "等"))


@cache
def _char_tables() -> tuple[dict[str, str], dict[str, str]]:
    """(traditional -> simplified, simplified -> traditional), pairing char_convert's two strings by position
    (a later pair wins, as upstream's loop)."""
    pairs = json.loads((DATA / "zh_char_convert.json").read_text(encoding="utf-8"))
    to_simplified, to_traditional = {}, {}
    for simplified, traditional in zip(pairs["simplified"], pairs["traditional"], strict=True):
        to_traditional[simplified] = traditional
        to_simplified[traditional] = simplified
    return to_simplified, to_traditional


def traditional_to_simplified(text: str) -> str:
    table = _char_tables()[0]
    return "".join(table.get(char, char) for char in text)


def simplified_to_traditional(text: str) -> str:
    table = _char_tables()[1]
    return "".join(table.get(char, char) for char in text)


def split_sentences(text: str) -> list[str]:
    text = text.replace(" ", "")
    text = re.sub(r"[——《》【】<>{}()（）#&@“”^_|\\]", "", text)
    text = _SENTENCE_END.sub(r"\1\n", text).strip()
    return [sentence.strip() for sentence in re.split(r"\n+", text)]


def _leftovers(sentence: str) -> str:
    for symbol, words in _WORDS:
        sentence = sentence.replace(symbol, words)
    return re.sub(r"[-——《》【】<=>{}()（）#&@“”^_|\\]", "", sentence)


def normalize_sentence(sentence: str) -> str:
    sentence = traditional_to_simplified(sentence).translate(_FULL_WIDTH)
    sentence = n.RE_DATE.sub(n.replace_date, sentence)
    sentence = n.RE_DATE2.sub(n.replace_date2, sentence)
    sentence = n.RE_TIME_RANGE.sub(n.replace_time, sentence)  # ranges before single times
    sentence = n.RE_TIME.sub(n.replace_time, sentence)
    sentence = n.RE_TO_RANGE.sub(n.replace_to_range, sentence)  # 3~5kg: ~ read 至
    sentence = n.RE_TEMPERATURE.sub(n.replace_temperature, sentence)
    sentence = n.replace_measures(sentence)
    while n.RE_ASMD.search(sentence):  # operators between operands, until none is left (1+2+3)
        sentence = n.RE_ASMD.sub(n.replace_asmd, sentence)
    sentence = n.RE_POWER.sub(n.replace_power, sentence)
    sentence = n.RE_FRAC.sub(n.replace_frac, sentence)
    sentence = n.RE_PERCENTAGE.sub(n.replace_percentage, sentence)
    sentence = n.RE_MOBILE_PHONE.sub(n.replace_mobile, sentence)
    sentence = n.RE_TELEPHONE.sub(n.replace_phone, sentence)
    sentence = n.RE_NATIONAL_UNIFORM_NUMBER.sub(n.replace_phone, sentence)
    sentence = n.RE_RANGE.sub(n.replace_range, sentence)
    sentence = n.RE_INTEGER.sub(n.replace_negative_num, sentence)
    sentence = n.RE_VERSION_NUM.sub(n.replace_version_num, sentence)
    sentence = n.RE_DECIMAL_NUM.sub(n.replace_number, sentence)
    sentence = n.RE_POSITIVE_QUANTIFIERS.sub(n.replace_positive_quantifier, sentence)
    sentence = n.RE_DEFAULT_NUM.sub(n.replace_default_num, sentence)
    sentence = n.RE_NUMBER.sub(n.replace_number, sentence)
    return _leftovers(sentence)


def normalize(text: str) -> list[str]:
    """TextNormalizer().normalize: the text's sentences, each normalised."""
    return [normalize_sentence(sentence) for sentence in split_sentences(text)]
