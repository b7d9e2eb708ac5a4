"""Chinese readings of numbers, dates, times, phone numbers, measures and arithmetic, as GPT-SoVITS's text
normaliser writes them (text/zh_normalization/ num.py, chronology.py, phonecode.py, quantifier.py at 48b1a01,
from PaddleSpeech). The patterns are upstream's to the character: which spans they take is the behaviour.

Each `replace_*` takes an re.Match of its pattern and returns the words; zh_normalize.py applies them in order."""

from __future__ import annotations

import re

DIGITS = "零一二三四五六七八九"
UNITS = ((8, "亿"), (4, "万"), (3, "千"), (2, "百"), (1, "十"))  # digits below each unit, largest first


# --- reading a number ------------------------------------------------------------------------------------------

def read_digits(digits: str, alt_one: bool = False) -> str:
    """Digit by digit; phone numbers read 一 as 幺."""
    words = "".join(DIGITS[int(d)] for d in digits)
    return words.replace("一", "幺") if alt_one else words


def _cardinal_parts(value: str, use_zero: bool = True) -> list[str]:
    stripped = value.lstrip("0")
    if not stripped:
        return []
    if len(stripped) == 1:
        # A dropped leading zero is read (一千零五's 零), once.
        return [DIGITS[0], DIGITS[int(stripped)]] if use_zero and len(stripped) < len(value) else [
            DIGITS[int(stripped)]]
    power, unit = next((p, u) for p, u in UNITS if p < len(stripped))
    return _cardinal_parts(value[:-power]) + [unit] + _cardinal_parts(value[-power:])


def read_cardinal(value: str) -> str:
    """An integer's reading: 10 十, 15 十五, 105 一百零五, 10000 一万."""
    if not value:
        return ""
    value = value.lstrip("0")
    if not value:
        return DIGITS[0]
    parts = _cardinal_parts(value)
    if len(parts) >= 2 and parts[0] == "一" and parts[1] == "十":
        parts = parts[1:]  # 十五, not 一十五 (only at the very start)
    return "".join(parts)


def read_number(value: str) -> str:
    """An integer or decimal: 12.50 十二点五零 keeps one trailing zero, 0.5 零点五, .5 点五 -> 零点五."""
    whole, _, decimals = value.partition(".")
    if "." in decimals:
        raise ValueError(f"The value string: '${value}' has more than one point in it.")
    words = read_cardinal(whole)
    decimals = decimals.rstrip("0") + "0" if decimals.endswith("0") else decimals.rstrip("0")
    if decimals:
        words = (words or "零") + "点" + read_digits(decimals)
    return words


def _sign(sign: str, negative: str = "负") -> str:
    return negative if sign else ""


# --- numbers ---------------------------------------------------------------------------------------------------

MEASURE_WORDS = ("(处|台|架|枚|趟|幅|平|方|堵|间|床|株|批|项|例|列|篇|栋|注|亩|封|艘|把|目|套|段|人|所|朵|匹|张|座|回|"
                 "场|尾|条|个|首|阙|阵|网|炮|顶|丘|棵|只|支|袭|辆|挑|担|颗|壳|窠|曲|墙|群|腔|砣|座|客|贯|扎|捆|刀|令|打|"
                 "手|罗|坡|山|岭|江|溪|钟|队|单|双|对|出|口|头|脚|板|跳|枝|件|贴|针|线|管|名|位|身|堂|课|本|页|家|户|层|"
                 "丝|毫|厘|分|钱|两|斤|担|铢|石|钧|锱|忽|(千|毫|微)克|毫|厘|(公)分|分|寸|尺|丈|里|寻|常|铺|程|(千|分|厘|"
                 "毫|微)米|米|撮|勺|合|升|斗|石|盘|碗|碟|叠|桶|笼|盆|盒|杯|钟|斛|锅|簋|篮|盘|桶|罐|瓶|壶|卮|盏|箩|箱|煲|"
                 "啖|袋|钵|年|月|日|季|刻|时|周|天|秒|分|小时|旬|纪|岁|世|更|夜|春|夏|秋|冬|代|伏|辈|丸|泡|粒|颗|幢|堆|"
                 "条|根|支|道|面|片|张|颗|块|元|(亿|千万|百万|万|千|百)|(亿|千万|百万|万|千|百|美|)元|(亿|千万|百万|万|"
                 "千|百|十|)吨|(亿|千万|百万|万|千|百|)块|角|毛|分)")
_UNIT_SUFFIX = "(%|°C|℃|度|摄氏度|cm2|cm²|cm3|cm³|cm|db|ds|kg|km|m2|m²|m³|m3|ml|m|mm|s)"
_NUMBER = r"((-?)((\d+)(\.\d+)?)|(\.(\d+)))"
_ASMD_OPERAND = r"((-?)((\d+)(\.\d+)?[⁰¹²³⁴⁵⁶⁷⁸⁹ˣʸⁿ]*)|(\.\d+[⁰¹²³⁴⁵⁶⁷⁸⁹ˣʸⁿ]*)|([A-Za-z][⁰¹²³⁴⁵⁶⁷⁸⁹ˣʸⁿ]*))"

RE_FRAC = re.compile(r"(-?)(\d+)/(\d+)")
RE_PERCENTAGE = re.compile(r"(-?)(\d+(\.\d+)?)%")
RE_INTEGER = re.compile(r"(-)(\d+)")
RE_DEFAULT_NUM = re.compile(r"\d{3}\d*")
RE_ASMD = re.compile(_ASMD_OPERAND + r"([\+\-\×÷=])" + _ASMD_OPERAND)
RE_POWER = re.compile(r"[⁰¹²³⁴⁵⁶⁷⁸⁹ˣʸⁿ]+")
RE_DECIMAL_NUM = re.compile(r"(-?)((\d+)(\.\d+))|(\.(\d+))")
RE_POSITIVE_QUANTIFIERS = re.compile(r"(\d+)([多余几\+])?" + MEASURE_WORDS)
RE_NUMBER = re.compile(r"(-?)((\d+)(\.\d+)?)|(\.(\d+))")
# A range not touching other digits or operators: 1-2, 3~5.
RE_RANGE = re.compile(r"(?<![\d\+\-\×÷=])((-?)((\d+)(\.\d+)?))[-~]((-?)((\d+)(\.\d+)?))(?![\d\+\-\×÷=])")
RE_TO_RANGE = re.compile(_NUMBER + _UNIT_SUFFIX + "[~]" + _NUMBER + _UNIT_SUFFIX)
RE_VERSION_NUM = re.compile(r"((\d+)(\.\d+)(\.\d+)?(\.\d+)+)")
_OPERATORS = {"+": "加", "-": "减", "×": "乘", "÷": "除", "=": "等于"}
_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹ˣʸⁿ", "0123456789xyn")


def replace_frac(m: re.Match) -> str:
    return f"{_sign(m.group(1))}{read_number(m.group(3))}分之{read_number(m.group(2))}"


def replace_percentage(m: re.Match) -> str:
    return f"{_sign(m.group(1))}百分之{read_number(m.group(2))}"


def replace_negative_num(m: re.Match) -> str:
    return f"{_sign(m.group(1))}{read_number(m.group(2))}"


def replace_default_num(m: re.Match) -> str:
    return read_digits(m.group(0), alt_one=True)  # three or more bare digits: a code, read digit by digit


def replace_asmd(m: re.Match) -> str:
    return m.group(1) + _OPERATORS[m.group(8)] + m.group(9)  # the operands stay digits for the later rules


def replace_power(m: re.Match) -> str:
    return "的" + m.group(0).translate(_SUPERSCRIPTS) + "次方"


def replace_positive_quantifier(m: re.Match) -> str:
    approx = "多" if m.group(2) == "+" else (m.group(2) or "")
    number = read_number(m.group(1))
    return f"{'两' if number == '二' else number}{approx}{m.group(3)}"


def replace_number(m: re.Match) -> str:
    if m.group(5):  # a bare decimal (.5)
        return read_number(m.group(5))
    return f"{_sign(m.group(1))}{read_number(m.group(2))}"


def replace_range(m: re.Match) -> str:
    first = RE_NUMBER.sub(replace_number, m.group(1))
    second = RE_NUMBER.sub(replace_number, m.group(6))
    return f"{first}到{second}"


def replace_to_range(m: re.Match) -> str:
    return m.group(0).replace("~", "至")


def replace_version_num(m: re.Match) -> str:
    return "".join("点" if c == "." else read_number(c) for c in m.group(1))


# --- dates and times (chronology.py) ---------------------------------------------------------------------------

_CLOCK = r"([0-1]?[0-9]|2[0-3]):([0-5][0-9])(:([0-5][0-9]))?"
RE_TIME = re.compile(_CLOCK)
RE_TIME_RANGE = re.compile(_CLOCK + r"(~|-)" + _CLOCK)
RE_DATE = re.compile(r"(\d{4}|\d{2})年((0?[1-9]|1[0-2])月)?(((0?[1-9])|((1|2)[0-9])|30|31)([日号]))?")
RE_DATE2 = re.compile(r"(\d{4})([- /.])(0[1-9]|1[012])\2(0[1-9]|[12][0-9]|3[01])")


def _clock_number(value: str) -> str:
    words = read_number(value.lstrip("0"))
    return DIGITS[0] + words if value.startswith("0") else words  # 08 分: 零八分


def _clock(hour: str, minute: str, second: str | None, half_from: str) -> str:
    words = f"{read_number(hour)}点"
    if minute.lstrip("0"):
        # Upstream reads 半 when the *first* time's minutes are 30, for the second time of a range too.
        words += "半" if int(half_from) == 30 else f"{_clock_number(minute)}分"
    if second and second.lstrip("0"):
        words += f"{_clock_number(second)}秒"
    return words


def replace_time(m: re.Match) -> str:
    words = _clock(m.group(1), m.group(2), m.group(4), m.group(2))
    if len(m.groups()) > 5:  # a range (RE_TIME_RANGE)
        words += "至" + _clock(m.group(6), m.group(7), m.group(9), m.group(2))
    return words


def replace_date(m: re.Match) -> str:
    words = f"{read_digits(m.group(1))}年" if m.group(1) else ""
    if m.group(3):
        words += f"{read_cardinal(m.group(3))}月"
    if m.group(5):
        words += f"{read_cardinal(m.group(5))}{m.group(9)}"
    return words


def replace_date2(m: re.Match) -> str:
    return f"{read_digits(m.group(1))}年{read_cardinal(m.group(3))}月{read_cardinal(m.group(4))}日"


# --- phone numbers (phonecode.py) -------------------------------------------------------------------------------

RE_MOBILE_PHONE = re.compile(r"(?<!\d)((\+?86 ?)?1([38]\d|5[0-35-9]|7[678]|9[89])\d{8})(?!\d)")
RE_TELEPHONE = re.compile(r"(?<!\d)((0(10|2[1-3]|[3-9]\d{2})-?)?[1-9]\d{6,7})(?!\d)")
RE_NATIONAL_UNIFORM_NUMBER = re.compile(r"(400)(-)?\d{3}(-)?\d{4}")


def replace_mobile(m: re.Match) -> str:
    return "，".join(read_digits(part, alt_one=True) for part in m.group(0).strip("+").split())


def replace_phone(m: re.Match) -> str:
    return "，".join(read_digits(part, alt_one=True) for part in m.group(0).split("-"))


# --- temperatures and measures (quantifier.py) ------------------------------------------------------------------

RE_TEMPERATURE = re.compile(r"(-?)(\d+(\.\d+)?)(°C|℃|度|摄氏度)")
MEASURES = {"cm2": "平方厘米", "cm²": "平方厘米", "cm3": "立方厘米", "cm³": "立方厘米", "cm": "厘米", "db": "分贝",
            "ds": "毫秒", "kg": "千克", "km": "千米", "m2": "平方米", "m²": "平方米", "m³": "立方米", "m3": "立方米",
            "ml": "毫升", "m": "米", "mm": "毫米", "s": "秒"}  # replaced in this order, anywhere in the sentence


def replace_temperature(m: re.Match) -> str:
    # Always 度: upstream means to keep 摄氏度 but compares the decimals' group with it, which never matches.
    return f"{_sign(m.group(1), '零下')}{read_number(m.group(2))}度"


def replace_measures(sentence: str) -> str:
    for symbol, words in MEASURES.items():
        sentence = sentence.replace(symbol, words)
    return sentence
