#!/usr/bin/env python
"""Golden sentences of GPT-SoVITS's Chinese text normaliser, written by upstream's own code from an
RVC-Boss/GPT-SoVITS checkout: text/zh_normalization's TextNormalizer().normalize and char_convert's two
conversions, imported from the checkout's GPT_SoVITS/ folder (they need only re and pypinyin's constants).
Strings only: the same on every machine.

    python scripts/parity/gpt_sovits_zh_normalize_references.py OUTDIR --checkout PATH   (in the upstream venv)

Cases: every rule at least once (dates, times and their ranges, ~ ranges with units, temperatures, measures,
arithmetic and powers, fractions, percentages, mobile / fixed / 400 numbers, ranges, negatives, versions,
decimals, measure words, digit runs, Greek letters, circled numbers, full-width characters, traditional
characters, the sentence splitting), and systematic numbers (0..120, powers of ten, zeros inside).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import checkout_golden_arguments, write_golden_set  # noqa: E402

TEXTS = {
    "date": "2024年3月15日是星期五，1999年12月31号也是。",
    "date_short": "24年5月",
    "date_year": "2008年",
    "date2": "会议定在2023-07-09，或2023/10/01，或2023.1.5。",
    "time": "现在是12:30，闹钟在07:05:09响，还有8:00。",
    "time_range": "营业时间8:30-17:45，另有9:30~10:05。",
    "to_range": "温度25℃~30℃，长度3cm~5cm，增幅2%~5%。",
    "temperature": "今天-3°C，明天5.5℃，后天十度，体温37摄氏度。",
    "measures": "跑了3.5km，买了2kg，面积30m²和20cm2，容量500ml，响度60db，用时3s，体积2m3。",
    "arithmetic": "1+1=2，3×4=12，8÷2=4，5-3=2，x²+y²=z²，a+b。",
    "power": "10⁵和2ⁿ",
    "fraction": "三分之一写作1/3，-2/5也行。",
    "percentage": "增长了25%，下降-3.5%，达到100%。",
    "mobile": "手机13812345678，+86 13912345678，15012345678。",
    "telephone": "电话010-12345678，021-87654321，0571-8888888。",
    "uniform": "客服400-123-4567或4001234567。",
    "range": "1-2个，3~5天，-1~-3度，10-20人。",
    "negative": "温度是-15，余额-200元。",
    "version": "版本1.2.3和2.0.1.4。",
    "decimal": "圆周率3.14159，0.5，.75，10.0，12.50，100.000。",
    "quantifier": "3个人，2只猫，5+本书，20多天，100余元，2万元，3千克。",
    "default_num": "编号123和0001，代码987654。",
    "number": "我有2个苹果和15个梨，第1名，0个。",
    "greek": "α粒子、β射线、γ刀，Δ和Ω，π约等于3.14，μ、σ。",
    "circled": "①②③④⑤⑥⑦⑧⑨⑩",
    "full_width": "ＡＢＣ１２３\u3000全角，ｘｙｚ４５６。",
    "traditional": "這是繁體中文，長髮與頭髮，學習與說話。",
    "marks": "《三体》【第一章】（序）<注>{x}#标签&@某人“引号”^_|\\结束",
    "slash": "速度100km/h，价格5元/斤。",
    "splitting": "第一句：第二句、第三句，第四句；第五句。第六句？第七句！eight,nine;ten?eleven!“引”后",
    "quote": "他说：“好。”然后‘走’。",
    "empty": "",
    "spaces": "   ",
    "english": "Hello World, this is GPT-SoVITS v2.",
    "mixed": "我买了iPhone 15 Pro，花了8999元。",
    "long": "在2024年的第3季度，公司营收增长了15.6%，达到了1,234,567元，" * 3,
    "zeros": "10001，100000000，1000000001，20300，5007，1010，100，10，11，110，1100，11000，101010。",
    "money": "¥100，$20，€30，100元，3.5亿元，2千万元，5百万美元。",
    "ordinal": "第1，第2，第10，第100，第101。",
    "year_like": "公元前221年，1900年代，00年，15年前。",
    "score": "比分3:2，比例1:1000。",
    "plus_more": "10+人，3+天。",
    "chain": "1+2+3+4=10",
    "ranges_dec": "1.5-2.5米，0.5~1.5公斤。",
    "phone_like": "12345，1234567，12345678，123456789。",
    "unit_order": "mm和cm和m和km",
    "tilde": "约10~20，大概~5。",
    "degree": "角度90度，北纬30度。",
    "per": "每小时60km/h，3/4杯。",
    "punct_only": "，。！？",
    "newline": "第一行\n第二行\r\n第三行",
}


def systematic() -> dict[str, str]:
    cases = {f"n{i}": f"有{i}个" for i in range(0, 121)}
    cases |= {f"pow{k}": f"数字{10 ** k}" for k in range(0, 13)}
    cases |= {f"digits{k}": "9" * k for k in range(1, 12)}
    cases |= {f"decimal{i}": f"值{v}" for i, v in enumerate(("1.05", "0.5", "0.05", "2.50", "3.0", "10.01", "0.0"))}
    return cases


def main() -> None:
    out, checkout, record = checkout_golden_arguments(__doc__.split("\n\n")[0], "RVC-Boss/GPT-SoVITS")
    sys.path.insert(0, str(checkout / "GPT_SoVITS"))
    from text.zh_normalization.char_convert import simplified_to_traditional, tranditional_to_simplified
    from text.zh_normalization.text_normlization import TextNormalizer

    cases = {}
    for name, text in {**TEXTS, **systematic()}.items():
        try:
            cases[name] = {"text": text, "sentences": TextNormalizer().normalize(text)}
        except Exception as error:  # upstream fails on it: recorded, ours must fail too
            cases[name] = {"text": text, "error": f"{type(error).__name__}: {error}"}
    conversions = {name: {"text": text, "simplified": tranditional_to_simplified(text),
                          "traditional": simplified_to_traditional(text)}
                   for name, text in {"traditional": TEXTS["traditional"],
                                      "simplified": "这是简体中文，长发与头发，学习与说话。",
                                      "mixed": "龍與龙，髮與发，乾與干"}.items()}
    write_golden_set(out, "zh_normalize", record, {"cases": cases, "conversions": conversions})


if __name__ == "__main__":
    main()
