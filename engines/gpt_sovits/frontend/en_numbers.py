"""English number words as inflect 7.5.0's engine writes them for GPT-SoVITS's English normaliser
(text/en_normalization/expend.py at 48b1a01 calls number_to_words and ordinal): only the forms it asks for, the
plain cardinal of a digit string (group 0, any `and` word), the two-digit grouping it reads years with, and the
ordinal suffixes of digits and of words. Our own code, written from inflect's behaviour: its spacing and commas
("five thousand, two hundred and one") are part of the text that reaches the phones, so they are kept exactly."""

from __future__ import annotations

import re

from mizuoto.core.errors import InputError

UNIT = ("", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
TEEN = ("ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
TEN = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
# The name after each group of three digits; inflect's first one is a blank, and it knows nothing past decillion.
MILL = (" ", " thousand", " million", " billion", " trillion", " quadrillion", " quintillion", " sextillion",
        " septillion", " octillion", " nonillion", " decillion")
_ORDINAL_WORD = (("ty", "tieth"), ("one", "first"), ("two", "second"), ("three", "third"), ("five", "fifth"),
                 ("eight", "eighth"), ("nine", "ninth"), ("twelve", "twelfth"))
_SUFFIXES = ("st", "nd", "rd", "th")


def _mill(index: int) -> str:
    if index >= len(MILL):
        raise InputError("a number in the English text is too long to read (more than 36 digits); write it in words")
    return MILL[index]


def _tens(tens: int, units: int, mill: int = 0) -> str:
    # inflect always closes this piece with the group's name, a blank for the lowest: later steps squeeze spaces.
    if tens == 1:
        return TEEN[units] + _mill(mill)
    return TEN[tens] + ("-" if tens and units else "") + UNIT[units] + _mill(mill)


def _hundreds(hundreds: int, tens: int, units: int, mill: int, andword: str) -> str:
    if hundreds:
        joint = f" {andword} " if tens or units else ""
        return f"{UNIT[hundreds]} hundred{joint}{_tens(tens, units)}{_mill(mill)}, "
    if tens or units:
        return f"{_tens(tens, units)}{_mill(mill)}, "
    return ""


def _tidy(words: str, andword: str | None) -> str:
    """The clean-up after the groups are written: the last ', ' off, spaces before commas dropped, a single last word
    after a comma joined by the `and` word (group 0 only), runs of blanks squeezed."""
    if words.endswith(", "):
        words = words[:-2]
    words = re.sub(r"\s+,", ",", words)
    if andword is not None:
        words = re.sub(r", (\S+)\s+\Z", lambda m: f" {andword} {m.group(1)}", words)
    return re.sub(r"\s+", " ", words).strip()


def cardinal(digits: str, andword: str = "and") -> str:
    """number_to_words of a digit string or int (group 0): 1234 -> 'one thousand, two hundred and thirty-four'."""
    digits = str(digits)
    if int(digits) <= 1:
        return ("zero", "one")[int(digits)]
    digits = digits.lstrip("0")
    head = len(digits) % 3
    groups = [digits[max(0, end - 3):end] for end in range(len(digits), head, -3)]  # lowest group first
    pieces = [_hundreds(int(g[0]), int(g[1]), int(g[2]), mill, andword) for mill, g in enumerate(groups)]
    if head == 2:
        pieces.append(f"{_tens(int(digits[0]), int(digits[1]), len(groups))}, ")
    elif head == 1:
        pieces.append(f"{UNIT[int(digits[0])]}{_mill(len(groups))}, ")
    return _tidy("".join(reversed(pieces)), andword)


def paired(digits: str, zero: str = "oh") -> str:
    """number_to_words(group=2): two digits at a time, a lone last digit alone; pieces joined by ', '."""
    pieces = []
    for i in range(0, len(digits) - 1, 2):
        tens, units = int(digits[i]), int(digits[i + 1])
        if tens:
            pieces.append(f"{_tens(tens, units)}, ")
        else:
            pieces.append(f" {zero} {UNIT[units]}, " if units else f" {zero} {zero}, ")
    if len(digits) % 2:
        units = int(digits[-1])
        pieces.append(f"{UNIT[units]}, " if units else f" {zero}, ")
    return ", ".join(_tidy("".join(pieces), None).split(", "))


def ordinal_words(words: str) -> str:
    """ordinal() of words: the last word's ending turned ('twenty-one' -> 'twenty-first'), else 'th' added."""
    for ending, replacement in _ORDINAL_WORD:
        if words.endswith(ending):
            return words[: -len(ending)] + replacement
    return words + "th"


def ordinal_digits(digits: str) -> str:
    """ordinal() of a digit string: '1' -> '1st', '12' -> '12th', '23' -> '23rd'."""
    n = int(digits)
    last_two = n % 100
    suffix = "th" if 11 <= last_two <= 13 else ("th", "st", "nd", "rd", "th", "th", "th", "th", "th", "th")[n % 10]
    return digits + suffix


def spoken_ordinal(text: str) -> str:
    """number_to_words of '21st' (digits and a suffix): the cardinal with its last word made ordinal."""
    if text[-2:] in _SUFFIXES:
        return ordinal_words(cardinal(text[:-2]))
    return cardinal(text)
