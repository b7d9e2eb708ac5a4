"""GPT-SoVITS's English text normaliser (text/english.py's text_normalize and text/en_normalization/expend.py at
48b1a01): numbers, money, times, units, fractions and arithmetic read out, accents stripped, everything but letters,
blanks and ' . , ? ! - dropped, runs of marks cut to their first.

The patterns say which spans are read and how; they are upstream's behaviour, quirks included: the table of
marks upstream means to fold (; : ，；) is matched as one literal string, so it never folds anything (and ’ is
dropped, not made an apostrophe); `-3` after a blank eats the blank ("is -3" -> "isnegative three"); km/h reads as
km; numbers from 1000 to 3000 read like years; larger ones keep inflect's commas, which become pauses."""

from __future__ import annotations

import re
import unicodedata

from .en_numbers import cardinal, ordinal_digits, ordinal_words, paired, spoken_ordinal

# Upstream joins re.escape of each key, so the bracketed first key only matches its own seven characters.
_FOLD = {"[;:：，；]": ",", '["’]': "'", "。": ".", "！": "!", "？": "?"}
_FOLD_RE = re.compile("|".join(re.escape(key) for key in _FOLD))
MARKS = "!?…,.-"  # text/symbols.py's punctuation (with the "-" it appends)
_REPEATED_MARKS = re.compile(f"([{re.escape(MARKS)}\\s])([{re.escape(MARKS)}])+")

UNITS = {"m": ("meter", "meters"), "km": ("kilometer", "kilometers"),
         "km/h": ("kilometer per hour", "kilometers per hour"), "ft": ("feet", "feet"), "L": ("liter", "liters"),
         "tbsp": ("tablespoon", "tablespoons"), "tsp": ("teaspoon", "teaspoons"), "h": ("hour", "hours"),
         "min": ("minute", "minutes"), "s": ("second", "seconds"), "°C": ("degree celsius", "degrees celsius"),
         "°F": ("degree fahrenheit", "degrees fahrenheit")}
_SUPERSCRIPTS = "⁰¹²³⁴⁵⁶⁷⁸⁹ˣʸⁿ"
# One operand of an operation: a signed number, a bare decimal, or one letter, each with superscripts.
_OPERAND = rf"((-?)((\d+)(\.\d+)?[{_SUPERSCRIPTS}]*)|(\.\d+[{_SUPERSCRIPTS}]*)|([A-Za-z][{_SUPERSCRIPTS}]*))"
_OPERATION = re.compile(rf"{_OPERAND}\s+([+\-×÷=])\s+{_OPERAND}")  # operands are groups 1 and 9, the sign 8
_OPERATORS = {"+": " plus ", "-": " minus ", "×": " times ", "÷": " divided by ", "=": " Equals "}

_LIST_NUMBER = re.compile(r"\b([0-9]+)\. ")  # "1. " as in a numbered list
_NEGATIVE = re.compile(r"(?:^|\s+)(-)(\d+)")
_GROUPED = re.compile(r"([0-9][0-9,]+[0-9])")
_TIME = re.compile(r"\b([01]?[0-9]|2[0-3]):([0-5][0-9])\b")
_MEASURE = re.compile(r"\b([0-9]+(\.[0-9]+)?(m|km|km/h|ft|L|tbsp|tsp|h|min|s|°C|°F))\b")
_POUNDS_BEFORE = re.compile(r"£([0-9.,]*[0-9]+)")
_POUNDS_AFTER = re.compile(r"([0-9.,]*[0-9]+)£")
_DOLLARS_BEFORE = re.compile(r"\$([0-9.,]*[0-9]+)")
_DOLLARS_AFTER = re.compile(r"([(0-9.,]*[0-9]+)\$")  # upstream's class has a stray "("
_DECIMAL = re.compile(r"([0-9]+\.\s*[0-9]+)")
_FRACTION = re.compile(r"([0-9]+/[0-9]+)")
_ORDINAL = re.compile(r"[0-9]+(st|nd|rd|th)")
_NUMBER = re.compile(r"[0-9]+")


def _operation(m: re.Match) -> str:
    return m.group(1) + _OPERATORS[m.group(8)] + m.group(9)


def _negative(m: re.Match) -> str:
    return f"negative {m.group(2)}"  # the blanks before the sign were part of the match


def _time(m: re.Match) -> str:
    hours, minutes = int(m.group(1)), int(m.group(2))
    period = "a.m." if hours < 12 else "p.m."
    hours = hours - 12 if hours > 12 else hours
    if minutes == 0:
        return f"{cardinal(hours)} o'clock {period}"
    return f"{cardinal(hours)} {cardinal(minutes)} {period}"


def _measure(m: re.Match) -> str:
    unit = m.group(3)
    # Upstream reads the value with the unit's letters and the point removed: 1.0 and 0.1 are plural, 1 singular.
    value = int(m.group(1).replace(unit, "").replace(".", ""))
    singular = m.group(2) is None and value == 1
    return m.group(1).replace(unit, " " + UNITS[unit][0 if singular else 1])


def _money(one: str, many: str, one_cent: str, cents_name: str):
    def read(m: re.Match) -> str:
        amount = m.group(1)
        parts = amount.split(".")
        if len(parts) > 2:
            return f"{amount} {many}"
        whole = int(parts[0]) if parts[0] else 0
        cents = int(parts[1].ljust(2, "0")) if len(parts) > 1 and parts[1] else 0
        whole_words = f"{whole} {one if whole == 1 else many}"
        cent_words = f"{cents} {one_cent if cents == 1 else cents_name}"
        if whole and cents:
            return f"{whole_words} and {cent_words}"
        if whole or cents:
            return whole_words if whole else cent_words
        return f"zero {many}"
    return read


_pounds = _money("pound", "pounds", "penny", "pence")
_dollars = _money("dollar", "dollars", "cent", "cents")


def _decimal(m: re.Match) -> str:
    whole, fraction = m.group(1).split(".")[:2]
    return whole + " point " + " ".join(fraction)  # digit by digit; the blanks after the point count as digits


def _fraction(m: re.Match) -> str:
    numerator, denominator = (int(x) for x in m.group(0).split("/"))
    top = cardinal(numerator)
    if denominator == 2:
        return f"{top} {'half' if numerator == 1 else 'halves'}"
    if denominator == 1:
        return top
    return f"{top} {ordinal_words(cardinal(denominator))}{'s' if numerator > 1 else ''}"


def _number(m: re.Match) -> str:
    value = int(m.group(0))
    if 1000 < value < 3000:  # read like a year
        if value == 2000:
            return "two thousand"
        if 2000 < value < 2010:
            return "two thousand " + cardinal(value % 100)
        if value % 100 == 0:
            return cardinal(value // 100) + " hundred"
        return paired(str(value)).replace(", ", " ")
    return cardinal(value, andword="")


def expand(text: str) -> str:
    """expend.py's normalize: the readings in upstream's order, then the character clean-up."""
    text = _LIST_NUMBER.sub(lambda m: ordinal_digits(m.group(1)) + ", ", text)
    while _OPERATION.search(text):
        text = _OPERATION.sub(_operation, text)
    text = _NEGATIVE.sub(_negative, text)
    text = _GROUPED.sub(lambda m: m.group(1).replace(",", ""), text)
    text = _TIME.sub(_time, text)
    text = _MEASURE.sub(_measure, text)
    text = _POUNDS_BEFORE.sub(_pounds, text)
    text = _POUNDS_AFTER.sub(_pounds, text)
    text = _DOLLARS_BEFORE.sub(_dollars, text)
    text = _DOLLARS_AFTER.sub(_dollars, text)
    text = _DECIMAL.sub(_decimal, text)
    text = _FRACTION.sub(_fraction, text)
    text = _ORDINAL.sub(lambda m: spoken_ordinal(m.group(0)), text)
    text = _NUMBER.sub(_number, text)
    text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
    text = text.replace("%", " percent")
    text = re.sub(r"[^ A-Za-z'.,?!\-]", "", text)
    text = re.sub(r"(?i)i\.e\.", "that is", text)
    text = re.sub(r"(?i)e\.g\.", "for example", text)
    return re.sub(r"(?<!^)(?<!\s)([A-Z])", r" \1", text)  # capitals inside a word are read one by one


def text_normalize(text: str) -> str:
    text = _FOLD_RE.sub(lambda m: _FOLD[m.group()], text)
    return _REPEATED_MARKS.sub(r"\1", expand(text))  # repeated marks would leak the reference's prosody
