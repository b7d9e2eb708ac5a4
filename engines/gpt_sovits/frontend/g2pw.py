"""G2PW's sentence-level pinyin as GPT-SoVITS's Chinese front end calls it (`g2pw._g2pw(sentences)`: text/g2pw/
onnx_api.py's G2PWOnnxConverter with dataset.py / utils.py at 48b1a01): every character gets a pinyin (TONE3,
neutral tone 5); a polyphonic one is asked of the G2PW network with its sentence around it, the rest come from
the model folder's monophonic table or pypinyin.

What GPT-SoVITS configures, and this follows: sentences are first converted to Taiwanese traditional characters
(OpenCC s2tw, the network's training script); pypinyin reads them converted back to simplified; a query sees at
most 16 characters either side of the sentence's first and last polyphonic character; queries on the same text
run as one BERT pass (the sentence de-duplication, upstream's default)."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from mizuoto.core.errors import CheckpointError, InputError

from .zh_data import word_set

CONTEXT_CHARS = 16  # g2pw_polyphonic_context_chars' default
MAX_TOKENS = 512  # prepare_onnx_input's max_len, [CLS] and [SEP] included
_CONFIG_DEFAULTS = {"use_mask": True, "use_char_phoneme": False}  # utils.default_config_dict, the keys read here


def read_config(path: Path) -> dict:
    """The folder's config.py, read as literals (upstream executes it; a downloaded file is not run here)."""
    config = dict(_CONFIG_DEFAULTS)
    if path.is_file():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                try:
                    config[node.targets[0].id] = ast.literal_eval(node.value)
                except ValueError:
                    pass  # not a literal: nothing this converter reads
    return config


def _table(path: Path) -> list[list[str]]:
    if not path.is_file():
        raise CheckpointError(f"{path} is missing; the G2PW model folder is incomplete, download G2PWModel again")
    return [line.split("\t") for line in path.read_text(encoding="utf-8").strip().split("\n")]


# --- text -> tokens, with where each character went (utils.wordize_and_map / tokenize_and_map) -----------------

def _words(text: str) -> tuple[list[str], list[int | None], list[tuple[int, int]]]:
    """Runs of ASCII letters and digits are words, spaces are dropped, every other character is its own word."""
    words: list[str] = []
    text_to_word: list[int | None] = []
    word_to_text: list[tuple[int, int]] = []
    for match in re.finditer(r" +|[a-zA-Z0-9]+|.", text, flags=re.S):
        piece = match.group(0)
        if piece[0] == " ":
            text_to_word += [None] * len(piece)
            continue
        word_to_text.append((match.start(), match.end()))
        text_to_word += [len(words)] * len(piece)
        words.append(piece)
    return words, text_to_word, word_to_text


def tokenize_and_map(tokenizer, text: str) -> tuple[list[str], list[int | None], list[tuple[int, int]]]:
    """(tokens, the token of each character or None, the characters of each token)."""
    words, text_to_token, word_to_text = _words(text)
    tokens: list[str] = []
    token_to_text: list[tuple[int, int]] = []
    for word, (start, end) in zip(words, word_to_text, strict=True):
        pieces = tokenizer.encode(word, add_special_tokens=False).tokens
        if not pieces or pieces == ["[UNK]"]:
            token_to_text.append((start, end))
            tokens.append("[UNK]")
            continue
        for piece in pieces:
            length = len(piece[2:] if piece.startswith("##") else piece)
            token_to_text.append((start, start + length))
            start += length
            tokens.append(piece)
    for i, (start, end) in enumerate(token_to_text):
        for position in range(start, end):
            text_to_token[position] = i
    return tokens, text_to_token, token_to_text


def _truncate(text: str, query: int, tokens: list[str], text_to_token: list, token_to_text: list):
    """A text of more than 510 tokens: the 510 around the query's token (dataset._truncate)."""
    keep = MAX_TOKENS - 2
    start = text_to_token[query] - keep // 2
    end = start + keep
    if start < 0:
        start, end = 0, end - start
    elif end > len(tokens):
        start, end = start - (end - len(tokens)), len(tokens)
    first, last = token_to_text[start][0], token_to_text[end - 1][1]
    # Upstream's shifted map keeps None for spaces and subtracts `start` from token indices.
    shifted = [i - start if i is not None else None for i in text_to_token[first:last]]
    return text[first:last], query - first, tokens[start:end], shifted


@dataclass
class Query:
    text: str  # the context the network reads
    position: int  # the polyphonic character's index in `text`
    sentence: int  # which input sentence
    index: int  # the character's index in that sentence


class G2PW:
    """A G2PW model folder (POLYPHONIC_CHARS.txt, MONOPHONIC_CHARS.txt, the bopomofo tables, config.py, g2pW.onnx)
    with the BERT folder's tokenizer and a network `predict(inputs) -> probabilities (queries, labels)`."""

    def __init__(self, folder: str | Path, tokenizer, predict):
        folder = Path(folder)
        self.tokenizer = tokenizer
        self.predict = predict
        self.config = read_config(folder / "config.py")
        polyphonic = _table(folder / "POLYPHONIC_CHARS.txt")
        if self.config["use_char_phoneme"]:
            self.labels = sorted({f"{char} {phoneme}" for char, phoneme in polyphonic})
            keys = [f"{char} {phoneme}" for char, phoneme in polyphonic]
        else:
            self.labels = sorted({phoneme for _, phoneme in polyphonic})
            keys = [phoneme for _, phoneme in polyphonic]
        label_index = {label: i for i, label in enumerate(self.labels)}
        self.char_labels: dict[str, list[int]] = {}
        for (char, _), key in zip(polyphonic, keys, strict=True):
            self.char_labels.setdefault(char, []).append(label_index[key])
        self.char_ids = {char: i for i, char in enumerate(sorted(self.char_labels))}
        self.polyphonic = set(self.char_labels) - word_set("g2pw_non_polyphonic")
        self.monophonic = {char: phoneme for char, phoneme in _table(folder / "MONOPHONIC_CHARS.txt")}
        for char in word_set("g2pw_non_monophonic"):
            self.monophonic.pop(char, None)
        self.bopomofo = self._json(folder, "bopomofo_to_pinyin_wo_tune_dict.json")

    @classmethod
    def load(cls, folder: str | Path, tokenizer, device="cpu") -> "G2PW":
        """The folder with its own g2pW.onnx read into our network (frontend/g2pw_model.py)."""
        import torch

        from .g2pw_model import load_g2pw

        folder = Path(folder)
        onnx = next((folder / name for name in ("g2pW.onnx", "g2pw.onnx") if (folder / name).is_file()), None)
        if onnx is None:
            raise CheckpointError(f"{folder} has no g2pW.onnx; download G2PWModel again")
        network = load_g2pw(onnx, device=device)

        def predict(inputs: dict[str, np.ndarray]) -> np.ndarray:
            with torch.inference_mode():
                tensors = {name: torch.from_numpy(value).to(device) for name, value in inputs.items()}
                return network(**tensors).float().cpu().numpy()

        return cls(folder, tokenizer, predict)

    @staticmethod
    def _json(folder: Path, name: str) -> dict:
        if not (folder / name).is_file():
            raise CheckpointError(f"{folder / name} is missing; the G2PW model folder is incomplete, download "
                                  f"G2PWModel again")
        return json.loads((folder / name).read_text(encoding="utf-8"))

    @cached_property
    def _to_traditional(self):
        import opencc

        return opencc.OpenCC("s2tw").convert

    def to_pinyin(self, bopomofo: str) -> str | None:
        """A label (bopomofo + tone digit) as TONE3 pinyin; None where the table has no entry (upstream warns)."""
        syllable = self.bopomofo.get(bopomofo[:-1])
        return syllable + bopomofo[-1] if syllable else None

    def __call__(self, sentences: list[str]) -> list[list[str | None]]:
        from pypinyin import Style, pinyin

        from .zh_normalize import traditional_to_simplified

        results, queries = [], []
        for number, simplified in enumerate(sentences):
            sentence = self._to_traditional(simplified)
            if len(sentence) != len(simplified):
                raise InputError(f"OpenCC changed the length of {simplified!r}; G2PW needs one character per "
                                 f"character: rephrase that text")
            fallback = pinyin(traditional_to_simplified(sentence), neutral_tone_with_five=True, style=Style.TONE3)
            result: list[str | None] = [None] * len(sentence)
            polyphonic = []
            for i, char in enumerate(sentence):
                if char in self.polyphonic:
                    polyphonic.append(i)
                elif char in self.monophonic:
                    result[i] = self.to_pinyin(self.monophonic[char])
                else:
                    result[i] = fallback[i][0]
            if polyphonic:
                left = max(0, polyphonic[0] - CONTEXT_CHARS)
                context = sentence[left:min(len(sentence), polyphonic[-1] + CONTEXT_CHARS + 1)]
                queries += [Query(context, i - left, number, i) for i in polyphonic]
            results.append(result)
        if queries:
            for query, label in zip(queries, self._labels(queries), strict=True):
                if self.config["use_char_phoneme"]:
                    label = label.split(" ")[1]
                results[query.sentence][query.index] = self.to_pinyin(label)
        return results

    # --- the network's inputs (dataset.prepare_onnx_input) and its runs ---------------------------------------

    def _inputs(self, queries: list[Query]) -> dict[str, np.ndarray]:
        rows, tokenized = [], {}
        for query in queries:
            text = query.text.lower()
            if text not in tokenized:
                tokenized[text] = tokenize_and_map(self.tokenizer, text)
            tokens, text_to_token, token_to_text = tokenized[text]
            position = query.position
            if len(tokens) > MAX_TOKENS - 2:
                text, position, tokens, text_to_token = _truncate(text, position, tokens, text_to_token,
                                                                   token_to_text)
            ids = [self._token_id(token) for token in ["[CLS]", *tokens, "[SEP]"]]
            char = text[position]
            if char not in self.char_ids:  # a character lower() changed: upstream fails the same way
                raise InputError(f"G2PW has no entry for {char!r}; remove it from the text")
            mask = ([1.0 if i in self.char_labels[char] else 0.0 for i in range(len(self.labels))]
                    if self.config["use_mask"] else [1.0] * len(self.labels))
            rows.append((ids, mask, self.char_ids[char], text_to_token[position] + 1))  # +1: [CLS] first
        width = max(len(ids) for ids, *_ in rows)
        ids = np.zeros((len(rows), width), dtype=np.int64)
        attention = np.zeros((len(rows), width), dtype=np.int64)
        for i, (row, *_) in enumerate(rows):
            ids[i, :len(row)] = row
            attention[i, :len(row)] = 1
        return {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "attention_mask": attention,
                "phoneme_mask": np.array([mask for _, mask, _, _ in rows], dtype=np.float32),
                "char_ids": np.array([char for _, _, char, _ in rows], dtype=np.int64),
                "position_ids": np.array([position for *_, position in rows], dtype=np.int64)}

    def _token_id(self, token: str) -> int:
        found = self.tokenizer.token_to_id(token)
        return self.tokenizer.token_to_id("[UNK]") if found is None else found

    def _labels(self, queries: list[Query]) -> list[str]:
        """The network's choice per query. Queries on one text share one BERT pass (its first row of ids) when
        any text has several queries, upstream's de-duplication; otherwise all run as one padded batch."""
        inputs = self._inputs(queries)
        groups: dict[str, list[int]] = {}
        for i, query in enumerate(queries):
            groups.setdefault(query.text, []).append(i)
        if len(queries) <= 1 or all(len(group) == 1 for group in groups.values()):
            return [self.labels[i] for i in np.argmax(self.predict(inputs), axis=1)]
        labels = [""] * len(queries)
        for group in groups.values():
            part = {name: value[group] for name, value in inputs.items()}
            if len(group) > 1:
                for name in ("input_ids", "token_type_ids", "attention_mask"):
                    part[name] = part[name][:1]
            for i, choice in zip(group, np.argmax(self.predict(part), axis=1), strict=True):
                labels[i] = self.labels[choice]
        return labels
