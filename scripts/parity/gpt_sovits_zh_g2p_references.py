#!/usr/bin/env python
"""Golden phones of GPT-SoVITS's Chinese front end, written by upstream's own code from an RVC-Boss/GPT-SoVITS
checkout: text/chinese2.py's text_normalize and g2p (jieba_fast's posseg, pypinyin, tone_sandhi.py, g2pw/ with
onnxruntime, polyphonic-fix), then cleaner.clean_text's checks and text/__init__.cleaned_text_to_sequence (v2).

    python scripts/parity/gpt_sovits_zh_g2p_references.py OUTDIR --checkout PATH   (in the upstream venv)

G2PW is a tiny random network exported from g2pw 0.1.2's module.G2PW (gpt_sovits_g2pw_tiny.py) in a tiny
G2PWModel folder made here: the polyphonic characters of these texts with up to three readings each (from g2pw
0.1.2's char_bopomofo_dict.json), a few monophonic ones, the bopomofo table; and a tiny BERT vocabulary (a few
characters left out, so that [UNK] is read too). Both are part of the set (OUTDIR/g2pw/, OUTDIR/bert/), the
test runs the same files. Each query's winning probability must beat the next by MARGIN, so that a machine
whose floats differ in the last bits still picks the same reading.

Upstream's package is run from a copy of GPT_SoVITS/text (chinese2 reads G2PWModel relative to the working
directory, and g2pw rebuilds its polyphonic pickle beside itself when the .rep files' md5 differs from the one
recorded, as it does at 48b1a01): the checkout is never written.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import checkout_golden_arguments, write_golden_set  # noqa: E402

TEXTS = {
    "greeting": "你好，世界！",
    "polyphonic": "银行的行长说，我们还要还钱，这个重要的问题很重。",
    "same_sentence_queries": "他长得很高，长大了以后还是那么快乐，音乐也好听。",
    "numbers_dates": "2024年3月15日，气温是-3°C，价格为12.5元，增长了25%。",
    "phone": "请拨打电话13812345678或者010-12345678。",
    "erhua": "小孩儿在哪儿玩？花儿开了，女儿和老头儿都笑了。",
    "third_tone": "你好，展览馆里有蒙古包和纸老虎，所有人都好喜欢。",
    "yi_bu": "看一看，一天，一段，第一名，不怕，看不懂，一零零，说一不二。",
    "neutral": "奶奶试试桌上的东西，我们上来吧，孩子们，两个人。",
    "mixed_english": "我们用GPT-SoVITS合成语音，it works，对吧？",
    "punctuation": "真的吗？？？！！是的。。。没错……好——行～",
    "ng_mu": "嗯，呣，好的。",
    "traditional": "這是繁體中文的句子，長髮飄飄。",
    "long_context": "行" + "这是一个很长的句子没有多音字的部分" * 3 + "很长，然后还有最后一个行",
    "single": "好",
    "quantities": "他跑了3.5km，买了2kg苹果，花了$100。",
    "idiom": "一丁不识，一不小心就出错了。",
    "marks_only": "，。！",
    "newline": "第一行\n第二行",
    "pause_yen": "你好￥我们走吧，好的",
    "pause_caret": "等一下^然后继续，好吗？",
}
# Words (with jieba tags) for ToneSandhi.modified_tone on pypinyin's finals, and sentences for
# pre_merge_for_modify on jieba_fast's posseg, one rule or merge each at least.
SANDHI_WORDS = [("你好", "l"), ("展览馆", "n"), ("蒙古包", "n"), ("纸老虎", "n"), ("所有人", "r"), ("好喜欢", "v"),
                ("看一看", "v"), ("一天", "m"), ("一段", "m"), ("第一", "m"), ("一零零", "m"), ("一，", "m"),
                ("不怕", "d"), ("看不懂", "v"), ("不好", "d"), ("奶奶", "n"), ("试试", "v"), ("桌上", "s"),
                ("上来", "v"), ("下去", "v"), ("两个", "m"), ("个", "q"), ("我们", "r"), ("孩子", "n"),
                ("走了", "v"), ("了", "ul"), ("着", "uz"), ("过", "ug"), ("好吧", "y"), ("我的", "r"),
                ("东西", "n"), ("事情", "n"), ("老老实实", "a"), ("买米", "v"), ("好好", "a"), ("一丁不识", "i"),
                ("豆腐", "n"), ("家里", "s"), ("整个", "m"), ("打扫", "v"), ("脑袋", "n"), ("小姐", "n")]
SANDHI_SENTENCES = ["听一听这个", "我不去了", "你好好想想", "小孩儿和女儿", "蒙古包很好", "我很好",
                    "一个一个来", "他不", "一", "老老实实的人", "展览馆里", "买米和卖米"]
ERHUA_WORDS = [("小孩儿", "n"), ("哪儿", "r"), ("花儿", "n"), ("女儿", "n"), ("老头儿", "n"), ("小院儿", "n"),
               ("一会儿", "m"), ("儿", "n"), ("婴儿", "n"), ("这儿", "r"), ("玩儿", "v"), ("……", "x")]
LEFT_OUT_OF_VOCAB = "蒙虎"  # read as [UNK] by G2PW's tokenizer
MONOPHONIC = "你我他是"
MARGIN = 1e-3


def upstream(text_copy_parent: Path, bert: Path):
    os.environ["bert_path"] = str(bert)
    sys.path.insert(0, str(text_copy_parent))
    os.chdir(text_copy_parent)  # chinese2 opens GPT_SoVITS/text/G2PWModel relative to it
    from text import chinese2, cleaned_text_to_sequence, cleaner  # noqa: PLC0415

    return chinese2, cleaner, cleaned_text_to_sequence


def tiny_g2pw_folder(folder: Path, bert: Path, texts: list[str], seed: int) -> None:
    """POLYPHONIC_CHARS.txt, MONOPHONIC_CHARS.txt, the bopomofo tables, config.py and g2pW.onnx; bert/vocab.txt."""
    import g2pw
    import opencc
    from gpt_sovits_g2pw_tiny import export_tiny_g2pw

    package = Path(g2pw.__file__).parent
    readings = json.loads((package / "char_bopomofo_dict.json").read_text(encoding="utf-8"))
    traditional = [opencc.OpenCC("s2tw").convert(t) for t in texts]
    chars = sorted({c for t in traditional for c in t})
    polyphonic = [c for c in chars if len(readings.get(c, [])) >= 2 and c not in MONOPHONIC]
    folder.mkdir(parents=True)
    (folder / "POLYPHONIC_CHARS.txt").write_text(
        "\n".join(f"{c}\t{r}" for c in polyphonic for r in readings[c][:3]) + "\n", encoding="utf-8")
    (folder / "MONOPHONIC_CHARS.txt").write_text(
        "\n".join(f"{c}\t{readings[c][0]}" for c in MONOPHONIC) + "\n", encoding="utf-8")
    shutil.copyfile(package / "bopomofo_to_pinyin_wo_tune_dict.json", folder / "bopomofo_to_pinyin_wo_tune_dict.json")
    (folder / "char_bopomofo_dict.json").write_text(
        json.dumps({c: readings[c] for c in chars if c in readings}, ensure_ascii=False), encoding="utf-8")
    labels = sorted({r for c in polyphonic for r in readings[c][:3]})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += [c for c in sorted({c.lower() for t in texts + traditional for c in t}) if c not in LEFT_OUT_OF_VOCAB]
    bert.mkdir(parents=True)
    (bert / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    (bert / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer"}) + "\n")
    export_tiny_g2pw(folder / "g2pW.onnx", vocab_size=len(vocab), labels=labels, chars=sorted(polyphonic),
                     seed=seed)


def margins(chinese2, sentences: list[str]) -> float:
    """The smallest gap between a query's best and second-best probability over these sentences."""
    import numpy as np

    converter = chinese2.g2pw._g2pw
    smallest = [np.inf]
    original = converter._predict

    def watched(model_input):
        preds, confidences = original(model_input=model_input)
        probs = converter.session_g2pw.run([], {
            "input_ids": model_input["input_ids"], "token_type_ids": model_input["token_type_ids"],
            "attention_mask": model_input["attention_masks"], "phoneme_mask": model_input["phoneme_masks"],
            "char_ids": model_input["char_ids"], "position_ids": model_input["position_ids"]})[0]
        top = np.sort(probs, axis=1)
        smallest[0] = min(smallest[0], float((top[:, -1] - top[:, -2]).min()))
        return preds, confidences

    converter._predict = watched
    try:
        converter(sentences)
    finally:
        converter._predict = original
    return smallest[0]


def main() -> None:
    out, checkout, record = checkout_golden_arguments(__doc__.split("\n\n")[0], "RVC-Boss/GPT-SoVITS")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shutil.copytree(checkout / "GPT_SoVITS" / "text", tmp / "text")
        for name in ("g2pw", "bert"):
            shutil.rmtree(out / name, ignore_errors=True)
        # The tables and the vocabulary must cover the texts as normalised: TextNormalizer's sentences hold every
        # character text_normalize keeps (its punctuation folding only removes or maps to marks).
        sys.path.insert(0, str(tmp))
        from text.zh_normalization.text_normlization import TextNormalizer  # noqa: PLC0415

        covered = [t for text in TEXTS.values() for t in [text, *TextNormalizer().normalize(text)]]
        tiny_g2pw_folder(out / "g2pw", out / "bert", covered, seed=0)
        (tmp / "GPT_SoVITS" / "text").mkdir(parents=True)
        shutil.copytree(out / "g2pw", tmp / "GPT_SoVITS" / "text" / "G2PWModel")
        chinese2, cleaner, to_ids = upstream(tmp, out / "bert")
        cases, normalised = {}, []
        for name, text in TEXTS.items():
            norm = chinese2.text_normalize(text)
            phones, word2ph = chinese2.g2p(norm)
            cleaned, cleaned_word2ph, cleaned_norm = cleaner.clean_text(text, "zh", "v2")
            cases[name] = {"text": text, "normalized": norm, "phones": phones, "word2ph": word2ph,
                           "clean_text": [cleaned, cleaned_word2ph, cleaned_norm], "ids": to_ids(cleaned, "v2")}
            normalised.append(norm)
        import jieba_fast.posseg as psg  # noqa: PLC0415
        from pypinyin import Style, lazy_pinyin  # noqa: PLC0415

        sandhi = chinese2.tone_modifier
        finals = lambda w: lazy_pinyin(w, neutral_tone_with_five=True, style=Style.FINALS_TONE3)  # noqa: E731
        initials = lambda w: lazy_pinyin(w, neutral_tone_with_five=True, style=Style.INITIALS)  # noqa: E731
        rules = {
            "modified_tone": [[w, p, finals(w), sandhi.modified_tone(w, p, finals(w))] for w, p in SANDHI_WORDS],
            "pre_merge_for_modify": [[s, [list(x) for x in psg.lcut(s)],
                                      [list(x) for x in sandhi.pre_merge_for_modify(psg.lcut(s))]]
                                     for s in SANDHI_SENTENCES],
            "merge_erhua": [[w, p, initials(w), finals(w),
                             [list(x) for x in chinese2._merge_erhua(initials(w), finals(w), w, p)]]
                            for w, p in ERHUA_WORDS],
        }
        smallest = margins(chinese2, [s for s in normalised if s])
        if smallest < MARGIN:
            raise SystemExit(f"the tiny G2PW's closest choice is {smallest:.2e} apart (< {MARGIN}): change the seed")
    write_golden_set(out, "zh_g2p", record, {"g2pw_margin": smallest, "cases": cases, "rules": rules},
                     g2pw="g2pw/", bert="bert/")


if __name__ == "__main__":
    main()
