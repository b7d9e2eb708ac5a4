#!/usr/bin/env python
"""Golden outputs of IndexTTS 2's text front end, written by upstream's own code from an index-tts/index-tts
checkout: `TextNormalizer` and `TextTokenizer` (indextts/utils/front.py) built as `IndexTTS2.__init__` builds them
(enable_glossary=True, normalizer.load(), TextTokenizer(bpe_path, normalizer)), with wetext 0.1.0's normalizers:
the writer makes `platform.system()` answer "Darwin" while `load()` runs, so upstream takes its wetext branch (on
Linux it would import WeTextProcessing, which needs pynini). Strings and integers only: the same on every machine.

    python scripts/parity/indextts_text_references.py OUTDIR --checkout PATH

The interpreter: scripts/parity/indextts_upstream_env.sh. OUTDIR/bpe.model is a tiny SentencePiece BPE trained
here (SentencePieceTrainer, model_type bpe, every other setting sentencepiece's default: upstream publishes no
trainer settings for its bpe.model, whose pieces are upper-case English, CJK characters and upper-case pinyin
with tones) on CORPUS, one thread. Recorded per text: normalize, every call of the zh / en FST normaliser with its
answer (so a test can replay them without wetext), tokenize, convert_tokens_to_ids, split_segments at several
max_text_tokens_per_segment / quick_streaming_tokens (each segment's ids are its pieces' ids), the same through
TextTokenizer(bpe, normalizer=None), through a normaliser with a glossary, and through FST normalisers that raise
(upstream's bare excepts). Upstream numbers pinyin and name placeholders in set order, so a few outputs hang on
the hash seed: the writer runs under PYTHONHASHSEED=0 and records every distinct normalize outcome, and
every FST call, of seeds 0..15. Also split_segments_by_token on seeded random token lists. The BPE's pieces and the
package versions go with it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import random
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import checkout_golden_arguments, write_golden_set  # noqa: E402

SEEDS = range(16)
CORPUS = """\
你好，世界。今天天气很好，我们一起去公园散步吧。希望你以后能够做的比我还好呦。收到好友从远方寄来的生日礼物。
我们用语音合成系统合成语音，这是一个测试。北京和上海都是很大的城市，面积和人口都很多。二零二五年九月八日全球发布。
一二三四五六七八九十百千万亿零点负正是的了在有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工
也能下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本
克里斯托弗诺兰约瑟夫高登莱维特盗梦空间电影导演演员美国华纳兄弟影片公司出品
HELLO WORLD, THIS IS A TEST OF THE SPEECH SYNTHESIS SYSTEM. I LOVE YOU! WHERE IS THE MONEY? WHO IS THERE?
THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG. SEE YOU AT EIGHT AM. COUNTING DOWN THREE, TWO, ONE, GO!
TWENTY FIVE PERCENT OFF, ONLY TWELVE DOLLARS AND FIFTY CENTS. GPT-FIVE-NANO IS THE SMALLEST VARIANT.
IT IS A GOOD DAY. HOW IS IT GOING? WE DIVE DEEP INTO THE SHOWDOWN BETWEEN DISPLAYPORT AND HDMI ...
XUAN4 GAN3 ZHONG4 CHONG2 SHANG5 ZUO1 LIAO3 XVAN4 JV2 QVE4 YING1 'QUOTED' - DASH , COMMA . STOP ? ASK ! BANG
"""
# upstream's own cases (front.py's __main__) and more: numbers, dates, currency, pinyin, names, runs, unknowns
TEXTS = {
    "zh/release": "IndexTTS 正式发布1.0版本了，效果666",
    "zh/pinyin_caps": "晕XUAN4是一种GAN3觉",
    "zh/love": "我爱你！",
    "en/love": "I love you!",
    "mixed/quotes": "“我爱你”的英语是“I love you”",
    "zh/decimal": "2.5平方电线",
    "zh/counts": "共465篇，约315万字",
    "zh/years": "2002年的第一场雪，下在了2003年",
    "zh/speed": "速度是10km/h",
    "zh/datetime": "现在是北京时间2025年01月11日 20:00",
    "zh/money": "他这条裤子是2012年买的，花了200块钱",
    "zh/phone": "电话：135-4567-8900",
    "zh/one_key": "1键3连",
    "zh/plus": "他这条视频点赞3000+，评论1000+，收藏500+",
    "zh/question": "这是1024元的手机，你要吗？",
    "zh/pinyin_inside": "受不liao3你了",
    "zh/pinyin_quoted": "“衣裳”不读衣chang2，而是读衣shang5",
    "zh/pinyin_colon": "最zhong4要的是：不要chong2蹈覆辙",
    "zh/pinyin_zuo": "不zuo1死就不会死",
    "en/time": "See you at 8:00 AM",
    "mixed/time": "8:00 AM 开会",
    "en/countdown": "Couting down 3, 2, 1, go!",
    "zh/countdown": "数到3就开始：1、2、3",
    "en/percent": "This sales for 2.5% off, only $12.5.",
    "zh/networks": "5G网络是4G网络的升级版，2G网络是3G网络的前身",
    "zh/yen": "苹果于2030/1/2发布新 iPhone 2X 系列手机，最低售价仅 ¥12999",
    "zh/ellipsis": "这酒...里...有毒...",
    "zh/commas3": "只有,,,才是最好的",
    "zh/babala": "babala2是什么？",
    "zh/beta": "用beta1测试",
    "en/beta": "have you ever been to beta2?",
    "en/wheres": "where's the money?",
    "en/whos": "who's there?",
    "en/whichs": "which's the best?",
    "en/hows": "how's it going?",
    "mixed/its": "今天是个好日子 it's a good day",
    "en/terms": "such as XTTS, CosyVoice2, Fish-Speech, and F5-TTS",
    "en/gpt5": "GPT-5-Nano is the smallest and fastest variant in the GPT-5 model family.",
    "mixed/gpt5": "GPT-5-Nano 是 GPT-5 模型家族中最小且速度最快的变体",
    "mixed/release": "2025/09/08 IndexTTS-2 全球发布",
    "en/ssd": "Here are some highly-rated M.2 NVMe SSDs: Samsung 9100 PRO PCIe 5.0 SSD M.2, $139.99",
    "en/hdmi": "we dive deep into the showdown between DisplayPort 1.4 and HDMI 2.1 to determine which is the best "
               "choice for gaming enthusiasts",
    "mixed/name_en": "约瑟夫·高登-莱维特（Joseph Gordon-Levitt is an American actor）",
    "mixed/names": "蒂莫西·唐纳德·库克（英文名：Timothy Donald Cook），通称蒂姆·库克（Tim Cook），美国商业经理、"
                   "工业工程师和工业开发商，现任苹果公司首席执行官。",
    "zh/inception": "《盗梦空间》是由美国华纳兄弟影片公司出品的电影，由克里斯托弗·诺兰执导并编剧，莱昂纳多·迪卡普里奥、"
                    "玛丽昂·歌迪亚、约瑟夫·高登-莱维特、艾利奥特·佩吉、汤姆·哈迪等联袂主演，2010年7月16日在美国上映，"
                    "2010年9月1日在中国内地上映，2020年8月28日在中国内地重映。影片剧情游走于梦境与现实之间，被定义为"
                    "“发生在意识结构内的当代动作科幻片”，讲述了由莱昂纳多·迪卡普里奥扮演的造梦师，带领特工团队进入"
                    "他人梦境，从他人的潜意识中盗取机密，并重塑他人梦境的故事。",
    "zh/flowers": "清晨拉开窗帘，阳光洒在窗台的Bloomixy花艺礼盒上——薰衣草香薰蜡烛唤醒嗅觉，永生花束折射出晨露般光泽。"
                  "设计师将“自然绽放美学”融入每个细节：手工陶瓷花瓶可作首饰收纳，香薰精油含依兰依兰舒缓配方。限量款附赠"
                  "《365天插花灵感手册》，让每个平凡日子都有花开仪式感。\n宴会厅灯光暗下的刹那，Glimmeria星月系列耳坠开始"
                  "发光——瑞士冷珐琅工艺让蓝宝石如银河流动，钛合金骨架仅3.2g无负重感。设计师秘密：内置微型重力感应器，"
                  "随步伐产生0.01mm振幅，打造“行走的星光”。七夕限定礼盒含星座定制铭牌，让爱意如星辰永恒闪耀。",
    "zh/films": "电影1：“黑暗骑士”（演员：克里斯蒂安·贝尔、希斯·莱杰；导演：克里斯托弗·诺兰）；电影2："
                "“盗梦空间”（演员：莱昂纳多·迪卡普里奥；导演：克里斯托弗·诺兰）；电影3：“钢琴家”（演员：艾德里安·布洛迪；导演：罗曼·波兰斯基）"
                "；电影4：“泰坦尼克号”（演员：莱昂纳多·迪卡普里奥；导演：詹姆斯·卡梅隆）；电影5：“阿凡达”（演员：萨姆·"
                "沃辛顿；导演：詹姆斯·卡梅隆）；电影6：“南方公园：大电影”（演员：马特·斯通、托马斯·艾恩格瑞；导演：特雷·帕克）",
    # ours
    "empty": "",
    "blank": "   ",
    "blank_lines": " \n\t \n",
    "one_char": "好",
    "one_char_spaced": "  a ",
    "one_digit": "5",
    "one_punct": "!",
    "two_chars": "好的",
    "zh/pinyin_jqx": "他ju4得que4实是xue2生，lü4师说nü3孩子",
    "zh/pinyin_many": "a1 o2 e3 er2 ng5 zhi1 chi2 shi4 ri4 zi3 ci2 si1 yu2 yue4 yuan2 yun2 jiong3 qiong2 xiong1",
    "zh/pinyin_overlap": "晕xuan4了an4",  # 'an4' inside 'xuan4': upstream's set order decides which survives
    "zh/names_overlap": "汤姆·哈迪和大汤姆·哈迪",
    "zh/annotation": "我们<行|XING2>动吧，银<行|HANG2>在2号",
    "en/annotation": "Read <lead|LED> 3 times",
    "zh/email_only": "abc123@example.com",
    "en/email_text": "write to abc@example.com now",
    "zh/digits_only": "1234567",
    "zh/fullwidth": "ＡＢＣ１２３，全角字符",
    "zh/traditional": "這是繁體中文，價格100元",
    "zh/erhua": "哪儿有一点儿5块钱的玩意儿",
    "zh/dollar": "价格是$5，不贵",
    "zh/punct_runs": "真的吗？？？！！是的。。。没错,,,,好……了——吧～～",
    "zh/brackets": "【注意】（重要）[提示]《书名》「引用」",
    "en/punct_runs": "Really?!?! Yes... no,,, maybe -- ok ~ fine; (so) [then] \"quoted\" 'single'",
    "en/dates": "On 2024-01-15 at 10:30 PM, the price was $1,234.56 (a 12% rise) and 3/4 of 1000kg.",
    "en/ordinals": "He came 1st, she came 2nd and they were 3rd on May 5th, 1999.",
    "en/plain": "the quick brown fox jumps over the lazy dog",
    "en/terms_many": "F5-TTS and GPT-4o-mini and Fish-Speech-1.5 and Llama-3-8B",
    "mixed/emoji": "今天很开心😀！Great day 🎉 ok",
    "en/emoji": "🎉🎉🎉",
    "zh/unknown_chars": "龘靐齉爩，还有ß和Ω",
    "mixed/korean_japanese": "안녕하세요 こんにちは 你好 hello",
    "zh/trailing_space": "你好世界   ",
    "zh/newlines": "第一行\n第二行\n\n第三行",
    "en/contractions_caps": "WHAT'S UP? That's it, there's more and here's why. She's here, he's gone.",
    "zh/gpt_hyphen_spaces": "用 GPT-4 和 Qwen-2.5 做测试，共3个",
    "zh/tab_mixed": "中文\tTAB\t分隔 123",
}
GLOSSARY = {"C++": {"en": "C plus plus", "zh": "C 加加"}, "C#": "C sharp", "TTS": "T T S",
            "PCIe 5.0": {"en": "PCIE five", "zh": "PCIE 五点零"}, "Inc.": {"en": "Ink"}}
GLOSSARY_TEXTS = {
    "glossary/zh": "我用C++和C#写了一个TTS系统，支持PCIe 5.0",
    "glossary/en": "I wrote a tts system in c++ and C# for Acme Inc. over PCIe 5.0",
}
LONG_ZH = "。".join(TEXTS["zh/inception"] for _ in range(3))
LONG_EN = " ".join([TEXTS["en/hdmi"] + ".", TEXTS["en/gpt5"], TEXTS["en/terms"] + "!", TEXTS["en/ssd"] + "?"] * 3)
TEXTS.update({"zh/long": LONG_ZH, "en/long": LONG_EN, "mixed/long": LONG_ZH[:300] + " " + LONG_EN[:600]})
# (max_text_tokens_per_segment, quick_streaming_tokens) as IndexTTS2.infer takes them
SEGMENTINGS = ((120, 0), (20, 0), (20, 5), (120, 30), (60, 10), (8, 0), (3, 0), (1, 0))
RANDOM_TOKENS = ("A", "B", "▁C", "▁D", "你", ",", "▁,", ".", "▁.", "!", "?", "▁?", "▁...", "'", "▁'", "-", "▁!")


def train_bpe() -> bytes:
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS.splitlines()), model_writer=model,
                                   model_type="bpe", vocab_size=500, num_threads=1)
    return model.getvalue()


def upstream(checkout: Path):
    """upstream's front module, its normaliser loaded on the wetext branch."""
    sys.path.insert(0, str(checkout))
    import indextts.utils.front as front

    real = platform.system
    platform.system = lambda: "Darwin"  # TextNormalizer.load picks wetext off Linux
    try:
        normalizer = front.TextNormalizer(enable_glossary=True)
        normalizer.load()
    finally:
        platform.system = real
    assert type(normalizer.zh_normalizer).__module__.startswith("wetext")
    return front, normalizer


class Recording:
    """A normaliser that passes every call on and remembers it, so the test can replay wetext's answers."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def normalize(self, text):
        out = self.inner.normalize(text)
        self.calls.append([text, out])
        return out


class Raising:
    def normalize(self, text):
        raise ValueError("stand-in FST failure")


def run_texts(normalizer) -> dict:
    """Every text's normalize and the FST calls it made, under this process's hash seed."""
    zh, en = Recording(normalizer.zh_normalizer), Recording(normalizer.en_normalizer)
    normalizer.zh_normalizer, normalizer.en_normalizer = zh, en
    results = {}
    for name, text in TEXTS.items():
        zh.calls, en.calls = [], []
        results[name] = {"normalized": normalizer.normalize(text), "zh": zh.calls, "en": en.calls}
    normalizer.zh_normalizer, normalizer.en_normalizer = zh.inner, en.inner
    return results


def outcomes_main(checkout: Path) -> None:
    """--outcomes: run_texts as JSON on stdout."""
    _front, normalizer = upstream(checkout)
    import contextlib

    with contextlib.redirect_stdout(io.StringIO()):
        results = run_texts(normalizer)
    print(json.dumps(results))


def main() -> None:
    if sys.argv[1:2] == ["--outcomes"]:
        return outcomes_main(Path(sys.argv[2]))
    if os.environ.get("PYTHONHASHSEED") != "0":  # upstream's set order must not move between runs
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    out, checkout, record = checkout_golden_arguments(__doc__.splitlines()[0], "index-tts/index-tts")
    out.mkdir(parents=True, exist_ok=True)
    model = train_bpe()
    (out / "bpe.model").write_bytes(model)
    front, normalizer = upstream(checkout)
    bpe = str(out / "bpe.model")
    tokenizer = front.TextTokenizer(bpe, normalizer)
    plain = front.TextTokenizer(bpe, None)
    seeds = {}
    for seed in SEEDS:
        done = subprocess.run([sys.executable, __file__, "--outcomes", str(checkout)], capture_output=True,
                              text=True, env={**os.environ, "PYTHONHASHSEED": str(seed)}, check=True)
        seeds[seed] = json.loads(done.stdout.strip().splitlines()[-1])

    def segmentings(tokens):
        found = {}
        for size, quick in SEGMENTINGS:
            segments = tokenizer.split_segments(tokens, max_text_tokens_per_segment=size,
                                                quick_streaming_tokens=quick)
            found[f"{size}/{quick}"] = segments
        return found

    here = run_texts(normalizer)
    cases = {}
    for name, text in TEXTS.items():
        tokens = tokenizer.tokenize(text)
        plain_tokens = plain.tokenize(text)
        runs = [here[name], *(o[name] for o in seeds.values())]
        # every FST call of every seed: which strings the FST sees hangs on the seed where the order matters
        calls = {lang: sorted({tuple(c) for r in runs for c in r[lang]}) for lang in ("zh", "en")}
        cases[name] = {
            "text": text, "normalized": here[name]["normalized"], "fst_calls": calls,
            "outcomes": sorted({r["normalized"] for r in runs}),
            "tokens": tokens, "ids": tokenizer.convert_tokens_to_ids(tokens), "segmentings": segmentings(tokens),
            "no_normalizer": {"tokens": plain_tokens, "ids": plain.convert_tokens_to_ids(plain_tokens)},
        }
        assert seeds[0][name] == here[name], name
    zh, en = Recording(normalizer.zh_normalizer), Recording(normalizer.en_normalizer)

    glossed = front.TextNormalizer(enable_glossary=True)
    glossed.zh_normalizer, glossed.en_normalizer = zh, en
    glossed.load_glossary(GLOSSARY)
    for name, text in GLOSSARY_TEXTS.items():
        zh.calls, en.calls = [], []
        cases[name] = {"text": text, "normalized": glossed.normalize(text), "fst_calls": {"zh": zh.calls,
                                                                                           "en": en.calls}}

    failing = front.TextNormalizer(enable_glossary=True)
    failing.zh_normalizer, failing.en_normalizer = Raising(), Raising()
    for name in ("zh/release", "en/wheres", "en/gpt5", "zh/annotation", "en/annotation", "mixed/gpt5"):
        cases[f"raising/{name}"] = {"text": TEXTS[name], "normalized": failing.normalize(TEXTS[name])}

    rng = random.Random(20261207)
    random_splits = []
    for _ in range(400):
        tokens = [rng.choice(RANDOM_TOKENS) for _ in range(rng.randint(0, 60))]
        size, quick = rng.choice((1, 2, 3, 4, 5, 8, 13, 20, 40)), rng.choice((0, 0, 1, 3, 7, 20))
        random_splits.append({"tokens": tokens, "max": size, "quick": quick,
                              "segments": tokenizer.split_segments(tokens, size, quick_streaming_tokens=quick)})

    sp = tokenizer.sp_model
    vocabulary = {"size": tokenizer.vocab_size, "unk_id": tokenizer.unk_token_id,
                  "pieces": [sp.IdToPiece(i) for i in range(sp.GetPieceSize())]}
    from importlib import metadata
    packages = {p: metadata.version(p) for p in ("wetext", "kaldifst", "sentencepiece")}
    write_golden_set(out, "indextts_text", record, {
        "cases": cases, "random_splits": random_splits, "vocabulary": vocabulary, "glossary": GLOSSARY,
        "segmentings": [list(s) for s in SEGMENTINGS], "packages": packages, "seeds": list(SEEDS),
        "bpe_sha256": hashlib.sha256(model).hexdigest()}, bpe="bpe.model")


if __name__ == "__main__":
    main()
