#!/usr/bin/env python
"""Golden phones of GPT-SoVITS's Cantonese front end, written by upstream's own code from an RVC-Boss/GPT-SoVITS
checkout: text/cantonese.py's text_normalize (zh_normalization's TextNormalizer, then its own punctuation folding)
and g2p (ToJyutping's readings cut into initials and finals), then cleaner.clean_text(text, "yue") and
text/__init__.cleaned_text_to_sequence (v2).

    python scripts/parity/gpt_sovits_yue_g2p_references.py OUTDIR --checkout PATH   (in the upstream venv)

The upstream venv needs ToJyutping==3.2.0 (pure Python, no dependencies) and cn2an (0.5.24 with proces 0.1.7;
cantonese.py imports it, never calls it) beside what the Chinese sets use. Upstream's text/ is imported from a
temporary copy, so that nothing (not even __pycache__) is written into the checkout. A text upstream fails on is
recorded with the stage and the exception; ours must refuse it with one line. Strings and integers only: the same
on every machine.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import checkout_golden_arguments, write_golden_set  # noqa: E402

TEXTS = {
    # plain Cantonese
    "upstream_example": "佢個鋤頭太短啦。",
    "greeting": "你好，早晨！食咗早餐未呀？",
    "yum_cha": "我哋聽日去飲茶，好唔好？",
    "thanks": "唔該晒，真係麻煩你喇。",
    "readme": "咁啱老世要求佢等陣要開會，剩低嘅嘢我會搞掂㗎喇。",
    "syllabic_nasals": "五個人唔係好多，吳生話唔使。",
    "aa_initials": "呀，啊，阿媽，鴨仔，晏晝，拗頸。",
    "null_onsets": "安心，屋企，愛你，歐洲，惡人，奧運，甕。",
    "longest_word": "銀行行長話要行路返屋企，佢好有型。",
    "particles": "係咪呀？得㗎啦！佢走咗囉，咪住先噃。",
    "long": "香港係一個國際大都會，每日都有好多遊客嚟觀光，佢哋鍾意去山頂睇夜景，又會去茶樓飲茶食點心。",
    # numbers, dates, percentages
    "date_percent": "今日係2024年3月15日，氣溫25.5度，增長咗30%。",
    "time": "下晝3點半，即係15:30，記得嚟。",
    "phone": "打電話俾我：98765432。",
    "money": "呢件衫賣$199，平咗20%。",
    "fraction_range": "三分一，1/2，10-20個人，-5°C。",
    "big_decimal": "人口有7500000人，比例係0.25。",
    # English letters
    "mixed_english": "我用GPT-SoVITS合成粵語，OK嗎？",
    "brand": "我買咗部iPhone 15 Pro，好正！",
    "english_only": "Hello world",
    "full_width_letters": "ＡＢＣ同ａｂｃ",
    # punctuation
    "runs": "真係？？？！！係呀。。。冇錯……好——行～",
    "quotes_brackets": "《原神》「你好」【注意】(括號)“引號”‘單引號’[方括號]",
    "ascii_marks": "好!!!真係?...得,喇.~完",
    "colons": "第一：食飯；第二、瞓覺·休息",
    "newlines": "第一行\n第二行\n\n第三行",
    "dashes": "一—二-三～四~五",
    # traditional characters
    "traditional": "這是繁體中文的句子，長髮飄飄，廣東話好難學。",
    "mixed_scripts": "龍與龙，髮與发，乾與干，後與后。",
    # characters outside ToJyutping or outside U+4E00..U+9FA5
    "two_syllable_chars": "卅年前，一瓩電，兩竍水。",
    "extension_a": "得㗎，㖭嘢。",
    "unknown_radical": "乄",
    "unknown_in_sentence": "佢寫咗個犭字。",
    "pause_marks": "你好￥我哋走啦^好",
    # empty-ish
    "empty": "",
    "spaces": "   ",
    "marks_only": "，。！",
    "dots": "...",
    "digits_only": "123",
    "emoji": "😀👍",
    "single": "好",
}
# Fed to g2p as they are (not normalised): ToJyutping has no reading for letters or spaces, and upstream fails.
G2P_ONLY = {"letters": "abc", "space": "你 好", "marks": "?!…", "two_syllables": "卅", "mixed_marks": "好,嘅.-"}


def run(case: dict, stages) -> dict:
    """Each stage in turn, adding to `case` what it returns; upstream's failure is the golden answer (the stage and
    the exception), and the stages after it are not run."""
    for name, stage in stages:
        try:
            case.update(stage(case))
        except Exception as error:  # noqa: BLE001 - recorded, ours must refuse it too
            case["error"] = {"stage": name, "exception": f"{type(error).__name__}: {error}"}
            break
    return case


def main() -> None:
    out, checkout, record = checkout_golden_arguments(__doc__.split("\n\n")[0], "RVC-Boss/GPT-SoVITS")
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(checkout / "GPT_SoVITS" / "text", Path(tmp) / "text")
        sys.path.insert(0, tmp)
        sys.dont_write_bytecode = True
        from text import cantonese, cleaned_text_to_sequence, cleaner  # noqa: PLC0415

        def normalize(case):
            return {"normalized": cantonese.text_normalize(case["text"])}

        def g2p(case):
            phones, word2ph = cantonese.g2p(case["normalized"])
            return {"jyutping": cantonese.get_jyutping(case["normalized"]), "phones": phones, "word2ph": word2ph}

        def clean(case):
            phones, word2ph, norm = cleaner.clean_text(case["text"], "yue", "v2")
            return {"clean_text": [phones, word2ph, norm], "ids": cleaned_text_to_sequence(phones, "v2")}

        def g2p_only(case):
            phones, word2ph = cantonese.g2p(case["g2p_text"])
            return {"phones": phones, "word2ph": word2ph}

        cases = {name: run({"text": text}, (("text_normalize", normalize), ("g2p", g2p), ("clean_text", clean)))
                 for name, text in TEXTS.items()}
        cases |= {f"g2p_{name}": run({"g2p_text": text}, (("g2p", g2p_only),)) for name, text in G2P_ONLY.items()}
    write_golden_set(out, "yue_g2p", record, {"tojyutping": metadata.version("ToJyutping"), "cases": cases})


if __name__ == "__main__":
    main()
