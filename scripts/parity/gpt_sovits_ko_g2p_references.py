#!/usr/bin/env python
"""Golden phones of GPT-SoVITS's Korean front end, written by upstream's own code from an RVC-Boss/GPT-SoVITS
checkout: text/korean.py's g2p (its Latin-letter names, g2pk2 0.0.3's G2p over python-mecab-ko 1.3.7 and
python-mecab-ko-dic 2.1.1.post2, jamo 0.4.1's h2j and j2hcj, its own fix-ups and phone filter), then
cleaner.clean_text and text/__init__.cleaned_text_to_sequence (v2).

    python scripts/parity/gpt_sovits_ko_g2p_references.py OUTDIR --checkout PATH   (in the upstream venv)

The upstream venv needs, with `pip install --no-deps`: g2pk2==0.0.3 jamo==0.4.1 ko_pron==1.3 python-mecab-ko==1.3.7
python-mecab-ko-dic==2.1.1.post2 (nltk is already there for English).

g2pk2 loads nltk's cmudict corpus at import (and downloads it when absent, which nothing here can reach), so a
temporary NLTK_DATA holds a one-word cmudict corpus. Its content cannot matter: korean.g2p names every ASCII letter
in Hangul before g2pk2 runs, so g2pk2's English step only ever sees runs of apostrophes; the set records every word
that step was given, and that no word of CMUdict (text/cmudict.rep) is apostrophes only.

Each g2pk2 call's morphological analysis (MeCab.pos) is recorded too, so that a test on a machine whose analyser
differs says so before comparing phones. Upstream's text/ is run from a copy, as the other front-end writers do.
Strings and integers only, the same on every machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import checkout_golden_arguments, write_golden_set  # noqa: E402

G2P = {
    "greeting": "안녕하세요",
    "sentence": "오늘 날씨가 정말 좋네요.",
    "formal": "저는 학교에 갑니다. 한국어 음성 합성을 시험합니다!",
    "g2pk_example": "나의 친구가 mp3 file 3개를 다운받고 있다",
    "liaison": "먹어요 읽어요 앉아요 닭이 값을 넋이 삶은 흙이 몫을",
    "h_liaison": "좋아요 많아요 싫어요 놓아 낳은",
    "palatalization": "같이 굳이 밭이 해돋이 닫히다 붙여",
    "nasalization": "국물 입는 닫는 신라 칼날 종로 대통령 협력 십리",
    "aspiration": "축하 좋다 놓고 많고 입학 급히",
    "tensing": "국밥 덮개 옷고름 신고 삼고 앉고 젊지 넓죽하다",
    "balb": "밟다 밟고 넓둥글다 여덟 넓다",
    "modifying_rieul": "할 것을 갈 곳이 만날 사람 할수록 할걸",
    "ui": "의사 희망 우리의 주의 띄어쓰기 무늬",
    "jyeo": "져 쪄 쳐 가져 다쳐",
    "across_words": "맛있다 멋있다 헛웃음 밭 아래 옷 안",
    "idioms": "솔잎 색연필 서울역 금융 휘발유 콧등 깻잎 할 일",
    "rieul_fix": "책을 나눠요. 사과를 놓고 물을 넣어 길을 리드",
    "bound_nouns": "3개 10분 25살 1번째 10월 20살 2마리 7시 5시간",
    "big_numbers": "123,456원 2024년 0개 1000000명 10000 100000000",
    "digits": "전화번호는 010-1234-5678입니다 3.14 그리고 50%",
    "latin_inside": "AI와 GPT, TTS 모델을 써요",
    "latin_only": "Hello World",
    "latin_digits": "ABC123xyz",
    "punctuation_runs": "뭐라고?!! 정말... 네, 그래요。",
    "cjk_punctuation": "안녕！你好？“따옴표” 『책』 ~ - — ；：，、·",
    "brackets": "《제목》 (괄호) [대괄호] {중괄호}",
    "compat_jamo": "ㅋㅋㅋ ㅠㅠ ㅎㅎ",
    "hanja": "大韓民國 만세",
    "mixed_hanja": "한자 漢字 혼용문",
    "kana": "こんにちは 안녕",
    "middle_dot": "6·25 전쟁 3·1절",
    "spaces": "안녕   하세요\t반가워요",
    "fullwidth_and_folding": "ＡＢＣ 켈빈 \u212a ſ",
    "ends_with_jamo": "ㄱ",
    "trailing_newline": "안녕\n",
    "one_syllable": "가",
    "digits_only": "123",
    "double_coda_kept": "닭漢 읽_ 값",
    "long_number_counter": "12345678901234567개",
    "archaic_jamo": "\ua960가",
    "empty": "",
    "space": " ",
    "dots": "...",
    "bang": "!",
    "newline": "\n",
}
CLEAN = ("greeting", "sentence", "g2pk_example", "liaison", "latin_inside", "punctuation_runs", "hanja", "empty",
         "dots", "ends_with_jamo", "trailing_newline", "compat_jamo")
# g2pk2 replaces each (number, counter) pair in set order, which the hash seed decides: "1개" may rewrite the end of
# "21개" first. Written in child processes under fixed seeds, so the set records both of upstream's readings.
ORDER_DEPENDENT = "21개 1개 11마리"
HASH_SEEDS = range(4)
CHILD = "MIZUOTO_KO_G2P_CHILD"
# Every code point jamo.j2hcj may turn into a compatibility letter (is_jamo's ranges) and a few around them.
JAMO_RANGES = ((0x1100, 0x1200), (0x3130, 0x3190), (0xA960, 0xA980), (0xD7B0, 0xD800))


def nltk_data(root: Path) -> None:
    (root / "corpora").mkdir(parents=True)
    with zipfile.ZipFile(root / "corpora" / "cmudict.zip", "w") as z:
        z.writestr("cmudict/", "")
        z.writestr("cmudict/cmudict", "a 1 AH0\n")


def apostrophe_only_words(cmudict_rep: Path) -> list[str]:
    words = []
    for line in cmudict_rep.read_text(encoding="utf-8", errors="replace").splitlines():
        if line and not line.startswith(";;;"):
            word = re.sub(r"\(\d+\)$", "", line.split(" ")[0])
            if re.fullmatch("'+", word):
                words.append(word)
    return words


def jamo_table() -> dict[str, str]:
    """jamo.j2hcj of each code point in JAMO_RANGES ("error: ..." where jamo raises)."""
    import jamo

    table = {}
    for start, stop in JAMO_RANGES:
        for code in range(start, stop):
            try:
                table[f"{code:04X}"] = jamo.j2hcj(chr(code))
            except Exception as error:  # noqa: BLE001  (what jamo raises is part of the record)
                table[f"{code:04X}"] = f"error: {type(error).__name__}"
    return table


def syllables_sha256() -> str:
    """jamo.h2j over every precomposed Hangul syllable, one after another."""
    import jamo

    text = "".join(chr(code) for code in range(0xAC00, 0xD7A4))
    return hashlib.sha256(jamo.h2j(text).encode()).hexdigest()


def main() -> None:
    out, checkout, record = checkout_golden_arguments(__doc__.split("\n\n")[0], "RVC-Boss/GPT-SoVITS")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shutil.copytree(checkout / "GPT_SoVITS" / "text", tmp / "text")
        nltk_data(tmp / "nltk_data")
        os.environ["NLTK_DATA"] = str(tmp / "nltk_data")
        import nltk  # noqa: PLC0415

        nltk.data.path.insert(0, str(tmp / "nltk_data"))
        sys.path.insert(0, str(tmp))
        import g2pk2.g2pk2 as g2pk2_module  # noqa: PLC0415
        from text import cleaned_text_to_sequence, cleaner, korean  # noqa: PLC0415

        english_words, analyses = [], []
        original_convert, mecab = g2pk2_module.convert_eng, korean._g2p.mecab
        original_pos = mecab.pos

        def convert_eng(string, cmu):
            english_words.extend(re.findall("[A-Za-z']+", string))
            converted = original_convert(string, cmu)
            assert converted == string, (string, converted)
            return converted

        def pos(string):
            analyses.append([string, [list(t) for t in original_pos(string)]])
            return original_pos(string)

        if os.environ.get(CHILD):
            print(json.dumps(korean._g2p(ORDER_DEPENDENT)))
            return
        g2pk2_module.convert_eng, mecab.pos = convert_eng, pos
        cases = {}
        for name, text in G2P.items():
            analyses.clear()
            try:
                g2pk = korean._g2p(korean.latin_to_hangul(text))
                phones = korean.g2p(text)
            except Exception as error:  # noqa: BLE001
                cases[f"g2p_{name}"] = {"text": text, "error": type(error).__name__}
                continue
            cases[f"g2p_{name}"] = {"text": text, "latin": korean.latin_to_hangul(text), "g2pk2": g2pk,
                                    "divided": korean.divide_hangul(g2pk), "phones": phones,
                                    "analysis": analyses[0]}
        for name in CLEAN:
            phones, word2ph, norm = cleaner.clean_text(G2P[name], "ko", "v2")
            cases[f"clean_{name}"] = {"text": G2P[name], "clean_text": [phones, word2ph, norm],
                                      "ids": cleaned_text_to_sequence(phones, "v2")}
        g2pk2_module.convert_eng, mecab.pos = original_convert, original_pos
        english = {"words_seen": sorted(set(english_words)),
                   "apostrophe_only_cmudict_words": apostrophe_only_words(tmp / "text" / "cmudict.rep")}
        versions = {name: _version(name) for name in ("g2pk2", "jamo", "ko_pron", "python-mecab-ko",
                                                      "python-mecab-ko-dic", "nltk")}
        by_seed = {str(seed): _child(seed) for seed in HASH_SEEDS}
        values = {"versions": versions, "has_text_normalize": hasattr(korean, "text_normalize"),
                  "order_dependent": {"text": ORDER_DEPENDENT, "g2pk2_by_hash_seed": by_seed},
                  "english_step": english, "jamo_hcj": jamo_table(), "h2j_syllables_sha256": syllables_sha256(),
                  "cases": cases}
    write_golden_set(out, "ko_g2p", record, values)


def _child(seed: int) -> str:
    env = {**os.environ, "PYTHONHASHSEED": str(seed), CHILD: "1"}
    done = subprocess.run([sys.executable, __file__, *sys.argv[1:]], env=env, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main()
