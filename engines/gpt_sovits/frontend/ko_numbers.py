"""Arabic numbers read in Korean as g2pk2 0.0.3 reads them (numerals.py: convert_num, process_num), after its
analyser has marked bound nouns ("/B"): a number before a bound noun is spelled out, in native Korean where the
noun is a counter for native numbers (개, 마리, 시, ...), else in Sino-Korean; every other digit is read alone."""

from __future__ import annotations

import re

from mizuoto.core.errors import InputError

# g2pk2 asks whether the noun is a substring of this string, so 데 (of 군데) and 루 (of 그루, 보루) count too.
_NATIVE_COUNTERS = ("군데 권 개 그루 닢 대 두 마리 모 모금 뭇 발 발짝 방 번 벌 보루 살 수 술 시 "
                    "쌈 움큼 정 짝 채 척 첩 축 켤레 톨 통")
_SINO = dict(zip("123456789", "일이삼사오육칠팔구", strict=True))
_NATIVE = dict(zip("123456789", "한 두 세 네 다섯 여섯 일곱 여덟 아홉".split(), strict=True))
_NATIVE_TENS = dict(zip("123456789", "열 스물 서른 마흔 쉰 예순 일흔 여든 아흔".split(), strict=True))
# The unit of each place from 10^2; places 2..7 drop a leading 일 (백, not 일백), higher ones keep it (일억).
_UNITS = {2: "백", 3: "천", 4: "만", 5: "십", 6: "백", 7: "천", 8: "억", 9: "십", 10: "백", 11: "천", 12: "조",
          13: "십", 14: "백", 15: "천"}
_BOUND = re.compile(r"([\d][\d,]*)([ㄱ-힣]+)/B")  # \d: any Unicode digit, as upstream's pattern


def spell(number: str, sino: bool = True) -> str:
    """numerals.process_num: "123,456" -> 십이만삼천사백오십육 (sino) or its native reading of the last two places."""
    digits = number.replace(",", "")
    if digits == "0":
        return "영"
    if not sino and digits == "20":
        return "스무"
    words: list[str] = []
    for offset, digit in enumerate(digits):
        place = len(digits) - 1 - offset
        if digit == "0" and (place % 4 or "".join(words[-3:]) == ""):
            words.append("")  # a zero is silent, except that 만 (and 억, 조) is kept after a non-zero group
            continue
        if place == 0:
            words.append((_SINO if sino else _NATIVE).get(digit, ""))
        elif place == 1:
            words.append((_SINO.get(digit, "") + "십").replace("일십", "십") if sino else _NATIVE_TENS.get(digit, ""))
        elif place in _UNITS:
            word = _SINO.get(digit, "") + _UNITS[place]
            words.append(word.replace("일" + _UNITS[place], _UNITS[place]) if place <= 7 else word)
        else:  # upstream has no name for 10^16 and up: its loop fails on an unbound variable
            raise InputError(f"the Korean front end cannot read the number {number!r} before a counter (16 digits "
                             "at most)")
    return "".join(words)


def convert(annotated: str) -> str:
    """numerals.convert_num over text the analyser annotated."""
    # Upstream replaces each (number, noun) pair in set order, so "1개" can rewrite the end of "11개" first; the
    # longest numbers first gives every pair its own reading, the one upstream gives when its order allows.
    pairs = sorted(set(_BOUND.findall(annotated)), key=lambda pair: (-len(pair[0]), pair))
    for number, noun in pairs:
        annotated = annotated.replace(f"{number}{noun}/B", f"{spell(number, noun not in _NATIVE_COUNTERS)}{noun}/B")
    for digit, name in zip("0123456789", "영일이삼사오육칠팔구", strict=True):
        annotated = annotated.replace(digit, name)
    return annotated
