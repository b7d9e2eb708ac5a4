"""Qwen2's byte-level BPE, run through tiktoken, exact to transformers' `Qwen2TokenizerFast`: shared by the
engines whose LM is a Qwen2 (Qwen3-TTS, CosyVoice 2/3). Each engine adds what its upstream does on top (which
pre-tokenizer regex, which extra special tokens) and its own error wording.

A model folder holds `vocab.json` (token -> id, tokens written in GPT-2's byte-to-unicode alphabet),
`merges.txt` and `tokenizer_config.json` (`added_tokens_decoder`: the special tokens).
What the HF tokenizer does with a text, and what we do in the same order:

1. split the raw text at added tokens (leftmost, longest match; every added token, special or not);
2. NFC-normalise each remaining piece;
3. split it with the pre-tokenizer regex and byte-level BPE each regex piece.

tiktoken merges by the rank of the merged token, HF by the rank of the merge. We rank each merge's result
in merges.txt order and leave out tokens no merge makes (`read_ranks`); for a BPE-trained vocabulary, where
a token only ever forms from the pair its merge lists, the two then agree (checked on Qwen2's 151643-token
vocabulary by scripts/parity/qwen3tts_tokenizer_live.py). Ids come back through a rank -> id table unless
the vocabulary already numbers its merged tokens in merge order (Qwen2's does): then rank and id coincide.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import tiktoken

from mizuoto.core.errors import CheckpointError

VOCAB, MERGES, CONFIG, TOKENIZER_JSON = "vocab.json", "merges.txt", "tokenizer_config.json", "tokenizer.json"

# Qwen2's pre-tokenizer (transformers' Qwen2Converter and Qwen's own qwen.tiktoken): case-insensitive
# English contractions, letter runs with one leading non-letter, single digits, symbol runs, newlines.
QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                 r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map: printable Latin-1 bytes stand for
    themselves, the other 68 bytes take the characters from U+0100 on, in byte order."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in kept}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


UNICODE_TO_BYTE = {c: b for b, c in byte_to_unicode().items()}


def token_bytes(token: str, source: str) -> bytes:
    """The bytes a vocabulary token written in the byte-level alphabet stands for."""
    try:
        return bytes(UNICODE_TO_BYTE[c] for c in token)
    except KeyError:
        raise CheckpointError(f"{source} has the token {token!r}, which is not in the byte-level alphabet "
                              "of a Qwen2 tokenizer") from None


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"cannot read {path}: {error}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} is not a JSON object")
    return data


@dataclass(frozen=True)
class AddedToken:
    id: int
    content: str
    special: bool
    normalized: bool  # matched in the NFC-normalised text rather than in the raw one


def read_added_tokens(path: Path) -> list[AddedToken]:
    """The `added_tokens_decoder` of a tokenizer_config.json."""
    decoder = read_json(path).get("added_tokens_decoder")
    if not isinstance(decoder, dict) or not decoder:
        raise CheckpointError(f"{path} has no added_tokens_decoder (the special tokens)")
    tokens = []
    for key, entry in decoder.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("content"), str) or not str(key).isdigit():
            raise CheckpointError(f"{path} has a malformed added_tokens_decoder entry {key!r}")
        if entry.get("lstrip") or entry.get("rstrip") or entry.get("single_word"):
            # HF would strip spaces around these or require word boundaries; Qwen's tokens never ask for it
            raise CheckpointError(f"{path}: added token {entry['content']!r} uses lstrip/rstrip/single_word, "
                                  "which this tokenizer does not implement")
        special = bool(entry.get("special", False))
        # transformers' AddedToken default: normalized = not special
        tokens.append(AddedToken(int(key), entry["content"], special, bool(entry.get("normalized", not special))))
    return tokens


def read_ranks(folder: Path, what: str) -> tuple[dict[bytes, int], list[int] | None, dict[int, bytes]]:
    """tiktoken ranks, the rank -> id table (None when ranks are the ids) and id -> bytes of the vocabulary.

    Ranks: the 256 single bytes, then each merge's result in merges.txt order. A merged token gets the
    rank of the first merge producing it; vocabulary tokens no merge produces are unreachable by HF's
    BPE and are left out of the ranks (they still decode). `what` names the tokenizer in messages."""
    vocab_path, merges_path = folder / VOCAB, folder / MERGES
    for path in (vocab_path, merges_path):
        if not path.is_file():
            raise CheckpointError(f"the {what} file {path} is missing")
    vocab = read_json(vocab_path)
    id_bytes: dict[int, bytes] = {}
    by_bytes: dict[bytes, int] = {}
    for token, index in vocab.items():
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise CheckpointError(f"{vocab_path} maps {token!r} to {index!r}, not to a token id")
        raw = token_bytes(token, str(vocab_path))
        id_bytes[index] = raw
        by_bytes[raw] = index
    if len(id_bytes) != len(vocab) or len(by_bytes) != len(vocab):
        raise CheckpointError(f"{vocab_path} gives two tokens one id, or one token two ids")
    missing = [b for b in range(256) if bytes([b]) not in by_bytes]
    if missing:
        raise CheckpointError(f"{vocab_path} lacks {len(missing)} of the 256 byte tokens of a byte-level BPE")

    ranks = {bytes([b]): by_bytes[bytes([b])] for b in range(256)}  # single bytes keep their ids as ranks
    merged_order: list[bytes] = []
    try:
        lines = merges_path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise CheckpointError(f"cannot read {merges_path}: {error}") from None
    for number, line in enumerate(lines, 1):
        if not line or (number == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise CheckpointError(f"{merges_path} line {number} is not two tokens: {line!r}")
        left, right = (token_bytes(p, str(merges_path)) for p in parts)
        for piece in (left, right, left + right):
            if piece not in by_bytes:
                raise CheckpointError(f"{merges_path} line {number} uses {piece!r}, which {VOCAB} does not have")
        merged = left + right
        if merged not in ranks:
            ranks[merged] = -1  # placeholder, keeps first-merge order
            merged_order.append(merged)

    ids = [by_bytes[m] for m in merged_order]
    if all(a < b for a, b in zip(ids, ids[1:], strict=False)) and (not ids or min(ids) > max(ranks[bytes([b])]
                                                                                              for b in range(256))):
        # Qwen2's layout: merged tokens are numbered in merge order, above the bytes -> rank = id.
        for merged, index in zip(merged_order, ids, strict=True):
            ranks[merged] = index
        return ranks, None, id_bytes
    # Otherwise rank by merge order after the bytes and translate back to ids.
    byte_ids = sorted(range(256), key=lambda b: by_bytes[bytes([b])])
    rank_to_id: list[int] = []
    for rank, b in enumerate(byte_ids):
        ranks[bytes([b])] = rank
        rank_to_id.append(by_bytes[bytes([b])])
    for merged in merged_order:
        ranks[merged] = len(rank_to_id)
        rank_to_id.append(by_bytes[merged])
    return ranks, rank_to_id, id_bytes


def check_tokenizer_json(folder: Path, patterns: tuple[str, ...]) -> None:
    """A `tokenizer.json` next to the slow files is what HF actually loads; make sure it describes the
    tokenizer we implement (NFC, one of `patterns`, then byte-level without its own regex)."""
    path = folder / TOKENIZER_JSON
    if not path.is_file():
        return
    data = read_json(path)
    normalizer = data.get("normalizer") or {}
    pre = data.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
    regex = None
    if steps and len(steps) == 2 and steps[0].get("type") == "Split" and steps[1].get("type") == "ByteLevel":
        regex = (steps[0].get("pattern") or {}).get("Regex")
        if steps[0].get("behavior") != "Isolated" or steps[0].get("invert") or steps[1].get("use_regex", True):
            regex = None
    model = data.get("model") or {}
    if (normalizer.get("type") != "NFC" or regex not in patterns or model.get("type") != "BPE"
            or model.get("ignore_merges") or model.get("dropout")):
        raise CheckpointError(f"{path} does not describe a Qwen2 byte-level BPE tokenizer (NFC, Qwen2 regex)")


class QwenTokenizer:
    """Text <-> ids as upstream's Qwen2TokenizerFast; `encode` never adds BOS/EOS (Qwen2 adds none)."""

    def __init__(self, ranks: dict[bytes, int], rank_to_id: list[int] | None, id_bytes: dict[int, bytes],
                 added: list[AddedToken], pattern: str, name: str = "qwen2"):
        self.pattern = pattern
        self._rank_to_id = rank_to_id
        self._id_bytes = id_bytes
        self.added_tokens = {t.content: t.id for t in added}
        self._added_by_id = {t.id: t for t in added}
        self.base_vocab_size = len(id_bytes)
        # tiktoken wants its rank space contiguous; no special tokens go in (we split them ourselves).
        self._encoding = tiktoken.Encoding(name=name, pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
        self._raw_split = self._splitter([t.content for t in added if not t.normalized])
        self._normalized_split = self._splitter([t.content for t in added if t.normalized])

    @staticmethod
    def _splitter(contents: list[str]) -> re.Pattern | None:
        # Longest first so that, at one position, the longest token wins (HF: leftmost-longest).
        if not contents:
            return None
        return re.compile("(" + "|".join(re.escape(c) for c in sorted(contents, key=len, reverse=True)) + ")")

    @staticmethod
    def _split(text: str, pattern: re.Pattern | None) -> list[tuple[str, bool]]:
        """(piece, is_added_token) in order; empty pieces dropped."""
        if pattern is None:
            return [(text, False)] if text else []
        parts = pattern.split(text)
        return [(p, i % 2 == 1) for i, p in enumerate(parts) if p]

    def _ordinary(self, text: str) -> list[int]:
        ranks = self._encoding.encode_ordinary(text)
        return ranks if self._rank_to_id is None else [self._rank_to_id[r] for r in ranks]

    def encode(self, text: str) -> list[int]:
        """Ids of `text`; added tokens written in it (`<|im_start|>`) become their ids."""
        ids: list[int] = []
        for piece, is_added in self._split(text, self._raw_split):
            if is_added:
                ids.append(self.added_tokens[piece])
                continue
            for part, part_added in self._split(unicodedata.normalize("NFC", piece), self._normalized_split):
                ids.extend([self.added_tokens[part]] if part_added else self._ordinary(part))
        return ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        """Text of `ids`, invalid UTF-8 replaced by U+FFFD, as HF's byte-level decoder does: an added token
        whose characters are all in the byte-level alphabet stands for those bytes, any other for its UTF-8.
        Special added tokens are printed as written, or left out with `skip_special_tokens` (HF's flag)."""
        chunks = []
        for index in ids:
            index = int(index)
            added = self._added_by_id.get(index)
            if added is not None:
                if skip_special_tokens and added.special:
                    continue
                content = added.content
                if all(c in UNICODE_TO_BYTE for c in content):
                    chunks.append(bytes(UNICODE_TO_BYTE[c] for c in content))
                else:
                    chunks.append(content.encode("utf-8"))
            elif index in self._id_bytes:
                chunks.append(self._id_bytes[index])
            else:
                raise ValueError(f"token id {index} is not in this tokenizer")
        return b"".join(chunks).decode("utf-8", errors="replace")

    def vocab_id(self, content: str) -> int | None:
        """The base vocabulary's id of a token written in the byte-level alphabet, or None."""
        if not all(c in UNICODE_TO_BYTE for c in content):
            return None
        return self._bytes_to_id.get(bytes(UNICODE_TO_BYTE[c] for c in content))

    @cached_property
    def _bytes_to_id(self) -> dict[bytes, int]:
        return {raw: index for index, raw in self._id_bytes.items()}


def with_special_tokens(added: list[AddedToken], contents: list[str], base_vocab_size: int,
                        vocab_id=lambda content: None) -> list[AddedToken]:
    """`added` after transformers' `add_special_tokens(contents)` on the fast tokenizer (tokenizers'
    AddedVocabulary.add_tokens): each string becomes a special, not normalised token; one already added
    keeps its id (its flags replaced), one in the base vocabulary keeps that id (`vocab_id`), a new one
    takes the next id: one past the largest added id if that is at or above the base vocabulary's size,
    else the base vocabulary's size. A folder whose specials end at 151645 over Qwen2's 151643-token
    vocabulary thus numbers the first new one 151646."""
    tokens = {t.content: t for t in added}
    for content in contents:
        if not content:
            continue
        index = tokens[content].id if content in tokens else vocab_id(content)
        if index is None:
            top = max((t.id for t in tokens.values()), default=None)
            index = top + 1 if top is not None and top >= base_vocab_size else base_vocab_size
        tokens[content] = AddedToken(index, content, special=True, normalized=False)
    return list(tokens.values())
