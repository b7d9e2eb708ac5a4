#!/usr/bin/env python
"""Build small VoxCPM-style tokenizer folders and record what upstream's text path makes of many texts.

Upstream (voxcpm 2.0.3, transformers 4.57.3, tokenizers 0.22): `LlamaTokenizerFast.from_pretrained(folder)`
wrapped by `voxcpm.model.utils.mask_multichar_chinese_tokens`, as `VoxCPMModel.from_local` /
`VoxCPM2Model.from_local` build it; the wrapper's `tokenize(text)` and `__call__(text)` (the ids).
Real VoxCPM tokenizers (MiniCPM-4 family, ~73k tokens) cannot be downloaded here, so the folders are
built with `tokenizers` to have their features:

    bpe/          Llama-style SentencePiece BPE tokenizer.json (normalizer Prepend("▁") + Replace(" ", "▁"),
                  no pre-tokenizer, byte fallback, fuse_unk; merges that make multi-character CJK words,
                  "▁"+CJK words and English subwords; <unk> <s> </s> and chat tokens as added tokens)
                  with a MiniCPM-like tokenizer_config.json: added_tokens_decoder (one entry with other
                  flags than tokenizer.json's, a non-special CJK word whose characters are not in the
                  vocabulary, a token only the config has), additional_special_tokens, eos <|im_end|>
    bpe_legacy/   the same tokenizer.json; a config without added_tokens_decoder, special_tokens_map.json
                  (dict tokens) and added_tokens.json (transformers' pre-4.34 files)
    bpe_bare/     tokenizer.json only, where <s> and </s> are vocabulary entries but not added tokens
    bpe_split/    the bpe folder with split_special_tokens: true
    chars/        a WordLevel character vocabulary (as ENGINES.md §5's tiny build) whose pre-tokenizer cuts
                  CJK text into two-character words, some in the vocabulary; config with bos/eos/unk only;
                  the vocabulary has no <s> (transformers adds it at a new id)
    bytelevel/    a GPT-2 style byte-level BPE (ByteLevel pre-tokenizer): the add_prefix_space rebuild path

Writes OUTDIR/<folder>/ and OUTDIR/references.json (texts, upstream's cleaned text, tokens, ids).

Usage (upstream's venv):
    python scripts/parity/voxcpm_tokenizer_references.py [OUTDIR]       # default tests/parity/data/voxcpm/tokenizer
    python scripts/parity/voxcpm_tokenizer_references.py --check N [--ours CLONE]
        # ours vs upstream live on the folders in OUTDIR: the recorded texts, N random strings per folder
        # and every code point of a few planes in context; also error cases
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pinned import add_ours_argument  # noqa: E402  (beside this script)
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "tests/parity/data/voxcpm/tokenizer"

CORPUS_EN = [
    "Hello world, this is a test of the speech synthesis system.",
    "The quick brown fox jumps over the lazy dog. The dog sleeps.",
    "We are testing tokenization of English words and subwords, like testing, tested and tester.",
    "Speech synthesis turns text into speech; voice cloning copies a voice from a short recording.",
    "Numbers such as 2024, 3.14 and 1,000,000 appear in text too, as do dates like 2025-09-16.",
    "I can't believe it's already morning! Isn't it wonderful? Yes, it is.",
]
CORPUS_ZH = [
    "你好世界，这是一个语音合成系统的测试。",
    "今天天气很好，我们去公园散步吧。",
    "中文分词和英文分词不一样，中文没有空格。",
    "语音克隆可以从一段很短的录音中复制声音。",
    "你好，欢迎使用语音合成，今天天气不错。",
    "我们的模型可以生成自然的中文和英文语音。",
]
CORPUS_MIX = ["你好 world，this is 中文 and English 混合 text。", "今天 is a good day，我们 test 一下。"]
CHAT = ["<|im_end|>", "<|im_start|>", "<|tool_call|>", "<|execute_start|>", "<|execute_end|>", "<|fim_prefix|>",
        "<|fim_middle|>", "<|fim_suffix|>"]

# The recorded texts (also the --check texts): every kind of input the text path sees.
TEXTS = [
    "", " ", "  ", "\n", "a", "Hello world", "Hello world, this is a test.", "  leading and trailing  ",
    "multiple   spaces\tand\ttabs", "line one\nline two\n\nline three\r\n", "testing tested tester tests",
    "你好世界", "你好，世界！今天天气很好。", "语音合成", "今天天气不错，我们去公园散步吧。", " 你好", "你 好 世 界",
    "你好world", "world你好", "Hello 你好 world 世界", "中文 and English 混合 text。", "我们 test 一下",
    "2024 3.14159 1,000,000 007 ½ Ⅻ ١٢٣", "!!! ?! ... \"quoted\" (paren) [1] {a: b} #t @m $5 100% C++ e.g.",
    "😀👍🏽👨\u200d👩\u200d👧🇯🇵 ✓—…", "emoji 😀 in text 你好😀世界", "café naïve Å ﬁ ß İ", "こんにちは 한국어 Привет",
    "㐀𠀀𪚥 鿿 〇 々", "\u3000全角空格\u3000", "a\xa0b\u2028c\u200bd\ufeffe", "\x00\x7f\ufffd", "▁", "▁你好 ▁▁x",
    "<s>hello</s>", "<unk>", "<|im_end|>", "text<|im_start|>more<|im_end|>", "<|tool_call|> call", "<|im_end",
    "语音合成测试", "这是语音合成", "hello 语音合成 world", "<|audio|>x", "x <|audio|> y", "龘龘", "鑫淼焱",
    "a 鑫淼焱 b",
    "ＡＢＣ１２３", "Ｈｅｌｌｏ，世界！", "tab\tseparated\tvalues", "很长的中文句子，包含很多很多的字，用来测试分词。",
]

PIECES = [
    "Hello", " world", "the", " the", "test", "testing", "tester", "dog", " fox", "I", "can't", "it's", "Yes",
    "2024", "3.14", "1,000", "007", "½", "你好", "世界", "今天", "天气", "很好", "语音", "合成", "语音合成", "中文",
    "英文", "我们", "模型", "龘", "鑫淼焱", "㐀", "𠀀", "，", "。", "！", "？", "、", "“", "”", "（", "）",
    "😀", "👍🏽", "🇯🇵", "✓", "—", "…", "é", "ß", "ﬁ", "İ", "Ω", "こんにちは", "한국어", "Привет", "ＡＢＣ", "１２３",
    " ", "  ", "   ", "\t",
    "\n", "\n\n", "\r\n", "\u3000", "\xa0", "\u200b", "\ufeff", "\x00", "▁", "▁▁", "<s>", "</s>", "<unk>",
    "<|im_end|>", "<|im_start|>", "<|tool_call|>", "<|audio|>", "<|im_end", "im_end|>", "<", ">", "|", "!", "?",
    ".", ",", ";", ":", "'", "\"", "(", ")", "[", "]", "#", "@", "$", "%", "&", "*", "+", "-", "=", "/", "\\",
]


def upstream_clean(text: str) -> str:
    """core.py `VoxCPM._generate`'s two clean-up lines (voxcpm 2.0.3)."""
    text = text.replace("\n", " ")
    return re.sub(r"\s+", " ", text)


# ---------------------------------------------------------------------------------------------------
# Folders


def byte_tokens() -> list[str]:
    return [f"<0x{b:02X}>" for b in range(256)]


def train_llama_bpe() -> tuple[dict, list]:
    """vocab and merges of a SentencePiece-style BPE: words start with "▁", CJK runs merge into words."""
    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer_tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=2, show_progress=False,
                                  special_tokens=["<unk>", "<s>", "</s>", *byte_tokens()])
    corpus = (CORPUS_EN + CORPUS_ZH + CORPUS_MIX) * 3
    trainer_tok.train_from_iterator(corpus, trainer)
    data = json.loads(trainer_tok.to_str())
    return data["model"]["vocab"], [tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
                                    for m in data["model"]["merges"]]


def llama_tokenizer(vocab: dict, merges: list, added: list[tuple[str, bool]]) -> Tokenizer:
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, special in added if special])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t, special in added if not special])
    return tok


def entry(content, special=True, normalized=False, lstrip=False, rstrip=False, single_word=False) -> dict:
    return {"content": content, "lstrip": lstrip, "normalized": normalized, "rstrip": rstrip,
            "single_word": single_word, "special": special}


def write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def build_folders(out: Path) -> list[str]:
    vocab, merges = train_llama_bpe()
    cjk_words = sorted(t for t in vocab if len(t.replace("▁", "")) >= 2
                       and all("\u4e00" <= c <= "\u9fff" for c in t.replace("▁", "")))
    assert cjk_words and any(t.startswith("▁") for t in cjk_words), cjk_words
    assert "合" in vocab and not {"鑫", "淼", "焱", "龘"} & set(vocab)
    base = len(vocab)
    tok = llama_tokenizer(vocab, merges, [(t, True) for t in CHAT])
    assert tok.token_to_id("<|im_end|>") == base

    # bpe: a MiniCPM-like config
    config = {
        "add_bos_token": True, "add_eos_token": False,
        "added_tokens_decoder": {
            "0": entry("<unk>"), "1": entry("<s>"), "2": entry("</s>"),
            **{str(base + i): entry(t) for i, t in enumerate(CHAT)},
            # flags that differ from tokenizer.json's (the config's win): lstrip, normalized
            str(base + 1): entry("<|im_start|>", lstrip=True),
            # only in the config: a special audio token, and a non-special CJK word with unknown characters
            str(base + len(CHAT)): entry("<|audio|>", rstrip=True),
            str(base + len(CHAT) + 1): entry("鑫淼焱", special=False, normalized=True),
        },
        "additional_special_tokens": CHAT, "bos_token": "<s>", "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>", "legacy": True, "model_max_length": 1000000000000000019884624838656,
        "pad_token": None, "sp_model_kwargs": {}, "spaces_between_special_tokens": False,
        "tokenizer_class": "LlamaTokenizer", "unk_token": "<unk>", "use_default_system_prompt": False,
    }
    folders = {}
    folders["bpe"] = (tok, config, {})
    folders["bpe_split"] = (tok, {**config, "split_special_tokens": True}, {})
    legacy = {"bos_token": "<s>", "eos_token": "<|im_end|>", "unk_token": "<unk>", "legacy": True,
              "tokenizer_class": "LlamaTokenizer", "additional_special_tokens": ["<|im_start|>"]}
    folders["bpe_legacy"] = (tok, legacy, {
        "special_tokens_map.json": {"bos_token": entry("<s>"), "eos_token": entry("<|im_end|>"),
                                    "unk_token": entry("<unk>"), "pad_token": "</s>",
                                    "additional_special_tokens": [entry("<|im_start|>"), "<|tool_call|>"]},
        "added_tokens.json": {"<|audio|>": base + len(CHAT), "语音合成": base + len(CHAT) + 1}})
    bare = llama_tokenizer(vocab, merges, [])
    bare_json = json.loads(bare.to_str())
    bare_json["added_tokens"] = [t for t in bare_json["added_tokens"] if t["content"] not in ("<s>", "</s>")]
    folders["bpe_bare"] = (Tokenizer.from_str(json.dumps(bare_json)), None, {})

    chars = sorted(set("".join(CORPUS_EN + CORPUS_ZH + CORPUS_MIX)) - {"测"})
    char_vocab = {"<unk>": 0, "</s>": 1, "▁": 2}
    for c in chars + ["你好", "世界", "今天", "天气", "语音", "合成", "中文"]:
        char_vocab.setdefault(c, len(char_vocab))
    wl = Tokenizer(models.WordLevel(vocab=char_vocab, unk_token="<unk>"))
    wl.normalizer = normalizers.Replace(" ", "▁")
    wl.pre_tokenizer = pre_tokenizers.Split(Regex("[\u4e00-\u9fff]{2}|."), behavior="isolated")
    folders["chars"] = (wl, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                             "tokenizer_class": "LlamaTokenizer"}, {})

    bl = Tokenizer(models.BPE(unk_token=None))
    bl.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bl.decoder = decoders.ByteLevel()
    bl_trainer = trainers.BpeTrainer(vocab_size=500, show_progress=False,
                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                     special_tokens=["<unk>", "<s>", "</s>"])
    bl.train_from_iterator((CORPUS_EN + CORPUS_ZH + CORPUS_MIX) * 3, bl_trainer)
    folders["bytelevel"] = (bl, {"unk_token": "<unk>", "eos_token": "</s>", "bos_token": "<s>",
                                 "added_tokens_decoder": {"0": entry("<unk>"), "1": entry("<s>"),
                                                          "2": entry("</s>")}}, {})

    for name, (tokenizer, cfg, extra) in folders.items():
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        tokenizer.save(str(folder / "tokenizer.json"))
        if cfg is not None:
            write_json(folder / "tokenizer_config.json", cfg)
        for file, data in extra.items():
            write_json(folder / file, data)
    return list(folders)


# ---------------------------------------------------------------------------------------------------
# Upstream


def upstream(folder: Path):
    from transformers import LlamaTokenizerFast
    from voxcpm.model.utils import mask_multichar_chinese_tokens

    return mask_multichar_chinese_tokens(LlamaTokenizerFast.from_pretrained(str(folder)))


def record(out: Path, names: list[str]) -> dict:
    from importlib import metadata

    import tokenizers
    import transformers

    refs = {"upstream": {"voxcpm": metadata.version("voxcpm"), "transformers": transformers.__version__,
                         "tokenizers": tokenizers.__version__},
            "cleaned": {text: upstream_clean(text) for text in TEXTS}, "folders": {}}
    for name in names:
        wrapped = upstream(out / name)
        cases = []
        for text in TEXTS:
            cases.append({"text": text, "tokens": wrapped.tokenize(text), "ids": wrapped(text)})
        refs["folders"][name] = {
            "cases": cases, "unk_id": wrapped.tokenizer.unk_token_id, "vocab_with_added": len(wrapped.tokenizer),
            "cjk_words": len(wrapped.multichar_tokens),
            "added": {str(k): str(v) for k, v in sorted(wrapped.tokenizer.added_tokens_decoder.items())}}
    return refs


# ---------------------------------------------------------------------------------------------------
# Live check against ours


def random_texts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        n = rng.randint(1, 12)
        texts.append("".join(rng.choice(PIECES) if rng.random() < 0.85 else chr(rng.randint(0x20, 0x2FFFF))
                             for _ in range(n)))
    return [t for t in texts if not any(0xD800 <= ord(c) <= 0xDFFF for c in t)]  # not encodable as UTF-8


def codepoint_texts() -> list[str]:
    ranges = [(0x00, 0x250), (0x2000, 0x2070), (0x3000, 0x3100), (0x4DF0, 0x4E40), (0x9FE0, 0xA010),
              (0xFF00, 0xFF70), (0x1F300, 0x1F340), (0x20000, 0x20010)]
    texts = []
    for lo, hi in ranges:
        for cp in range(lo, hi):
            c = chr(cp)
            texts += [c, f"你{c}好", f"a {c}b", f"{c}{c}"]
    return texts


def attempt(fn):
    try:
        return fn()
    except Exception as error:  # either side failing on a text is recorded as a failure, not compared further
        return f"fails: {type(error).__name__}"


def check(out: Path, count: int, ours_root: Path) -> None:
    sys.path.insert(0, str(ours_root.resolve()))
    from mizuoto.core.errors import CheckpointError
    from mizuoto.engines.voxcpm import tokenizer as ours

    refs = json.loads((out / "references.json").read_text(encoding="utf-8"))
    total = mismatches = 0
    for name in refs["folders"]:
        theirs, mine = upstream(out / name), ours.load_tokenizer(out / name)
        texts = TEXTS + random_texts(count, sum(map(ord, name))) + codepoint_texts()
        bad = 0
        for text in texts:
            a = attempt(lambda tok=theirs, text=text: (tok.tokenize(text), tok(text)))
            b = attempt(lambda tok=mine, text=text: (tok.tokens(text), tok(text)))
            if a != b:
                bad += 1
                if bad <= 5:
                    print(f"  {name}: {text!r}: upstream {a} ours {b}")
        assert mine.unk_id == theirs.tokenizer.unk_token_id, name
        assert mine.cjk_words == theirs.multichar_tokens, name
        print(f"{name}: {len(texts)} texts, {bad} differ")
        total += len(texts)
        mismatches += bad
    for text in TEXTS + random_texts(count, 7):
        assert ours.clean_text(text) == upstream_clean(text)
    print(f"clean_text: {len(TEXTS) + count} texts, 0 differ")

    # settings with which upstream leaves tokenizer.json: it fails (no sentencepiece) and ours refuses
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "tokenizer.json").write_text((out / "bpe/tokenizer.json").read_text(encoding="utf-8"),
                                               encoding="utf-8")
        for extra in ({"add_prefix_space": True}, {"add_prefix_space": False}, {"from_slow": True},
                      {"tokenizer_file": None}):
            write_json(folder / "tokenizer_config.json", extra)
            try:
                upstream(folder)
                outcome = "loads"
            except Exception as error:
                outcome = f"{type(error).__name__}"
            try:
                ours.load_tokenizer(folder)
                mine = "loads"
            except CheckpointError as error:
                mine = f"CheckpointError: {error}"
            print(f"config {extra}: upstream {outcome}; ours {mine}")
    print(f"TOTAL {total} texts, {mismatches} differ")
    assert mismatches == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("outdir", nargs="?", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", type=int, metavar="N", help="compare ours with upstream instead of writing")
    add_ours_argument(parser)
    args = parser.parse_args()
    if args.check is not None:
        check(args.outdir, args.check, args.ours)
        return
    args.outdir.mkdir(parents=True, exist_ok=True)
    names = build_folders(args.outdir)
    refs = record(args.outdir, names)
    write_json(args.outdir / "references.json", refs)
    print(f"wrote {len(names)} folders, {len(TEXTS)} texts each, to {args.outdir}")


if __name__ == "__main__":
    main()
