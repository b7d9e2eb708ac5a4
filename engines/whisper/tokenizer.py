"""Whisper's tokenizer, exact to openai-whisper 20250625: GPT-2 byte-level BPE (tiktoken) followed by
Whisper's special tokens (start of transcript, languages, task, timestamps).

Two vocabularies ship in ``assets/``: ``gpt2.tiktoken`` (English-only ``*.en`` checkpoints, 50256
ranks) and ``multilingual.tiktoken`` (50257 ranks). The special tokens are appended after the ranks,
always in this order::

    <|endoftext|> <|startoftranscript|> <|en|> ... (num_languages codes) <|translate|> <|transcribe|>
    <|startoflm|> <|startofprev|> <|nospeech|> <|notimestamps|> <|0.00|> <|0.02|> ... <|30.00|>

which gives 51864 ids for English-only checkpoints, 51865 for the 99-language multilingual ones and
51866 for large-v3 and turbo (100 languages, Cantonese added).
"""

from __future__ import annotations

import base64
import string
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

import tiktoken

from .languages import LANGUAGES, NO_SPACE_LANGUAGES, TO_LANGUAGE_CODE

__all__ = ["LANGUAGES", "TO_LANGUAGE_CODE", "Tokenizer", "get_encoding", "get_tokenizer"]

ASSETS = Path(__file__).resolve().parent / "assets"

# GPT-2's pre-tokenisation: contractions, letter runs, digit runs and other-symbol runs (each with
# at most one leading space), then whitespace.
PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

TIME_PRECISION = 0.02  # seconds per timestamp token
N_TIMESTAMPS = 1501  # <|0.00|> ... <|30.00|>

REPLACEMENT_CHAR = "\ufffd"

# Symbols never spoken; their tokens are suppressed by SuppressTokens("-1"). Commas, periods,
# question and exclamation marks stay allowed. Each is suppressed when it (or it after a space) is one
# token on its own.
_NON_SPEECH_SYMBOLS = (
    *'"#()*+/:;<=>@[\\]^_`{|}~「」『』',
    "<<", ">>", "<<<", ">>>", "--", "---", "-(", "-[", "('", '("', "((", "))", "(((", ")))",
    "[[", "]]", "{{", "}}", "♪♪", "♪♪♪",
)
# Musical symbols (U+2640..U+267F): when one of them takes several tokens, its first token (shared
# by the whole block in UTF-8) is suppressed anyway.
_MUSIC_SYMBOLS = "♩♪♫♬♭♮♯"


def _special_token_names(num_languages: int) -> list[str]:
    return [
        "<|endoftext|>",
        "<|startoftranscript|>",
        *(f"<|{code}|>" for code in list(LANGUAGES)[:num_languages]),
        "<|translate|>",
        "<|transcribe|>",
        "<|startoflm|>",
        "<|startofprev|>",
        "<|nospeech|>",
        "<|notimestamps|>",
        # Formatted from the float product, as upstream does, so the names match it digit for digit.
        *(f"<|{i * TIME_PRECISION:.2f}|>" for i in range(N_TIMESTAMPS)),
    ]


def _read_ranks(path: Path) -> dict[bytes, int]:
    """A ``.tiktoken`` file: one ``<base64 token> <rank>`` per line."""
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line.strip():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@lru_cache(maxsize=None)
def get_encoding(name: str = "gpt2", num_languages: int = 99) -> tiktoken.Encoding:
    """The tiktoken encoding ``name`` ("gpt2" or "multilingual") with Whisper's special tokens."""
    path = ASSETS / f"{name}.tiktoken"
    ranks = _read_ranks(path)
    first = len(ranks)
    specials = {token: first + i for i, token in enumerate(_special_token_names(num_languages))}
    return tiktoken.Encoding(
        name=path.name,
        explicit_n_vocab=first + len(specials),
        pat_str=PATTERN,
        mergeable_ranks=ranks,
        special_tokens=specials,
    )


@dataclass
class Tokenizer:
    """tiktoken encoding plus named access to Whisper's special tokens.

    ``language`` is a code from LANGUAGES (None for English-only checkpoints); ``task`` is
    "transcribe", "translate" (any other string selects translate, as upstream) or None.
    """

    encoding: tiktoken.Encoding
    num_languages: int
    language: str | None = None
    task: str | None = None
    sot_sequence: tuple[int, ...] = ()
    special_tokens: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ids = {name: self.encoding.encode_single_token(name) for name in self.encoding.special_tokens_set}
        # Kept in id order (upstream's order follows set iteration, which changes with the hash seed).
        self.special_tokens.update(sorted(ids.items(), key=lambda item: item[1]))

        sequence = [self.sot]
        if self.language is not None:
            codes = list(LANGUAGES)[: self.num_languages]
            if self.language not in codes:
                raise ValueError(f"language {self.language!r} is not one of this tokenizer's "
                                 f"{self.num_languages} languages")
            sequence.append(self.sot + 1 + codes.index(self.language))
        if self.task is not None:
            sequence.append(self.transcribe if self.task == "transcribe" else self.translate)
        self.sot_sequence = tuple(sequence)

    # -- text <-> ids --------------------------------------------------------------------------

    def encode(self, text: str, **kwargs) -> list[int]:
        return self.encoding.encode(text, **kwargs)

    def decode(self, token_ids: list[int], **kwargs) -> str:
        """Text of ``token_ids``; timestamp tokens are dropped (other special tokens print as names)."""
        begin = self.timestamp_begin
        return self.encoding.decode([t for t in token_ids if t < begin], **kwargs)

    def decode_with_timestamps(self, token_ids: list[int], **kwargs) -> str:
        """Text of ``token_ids`` with timestamp tokens printed as ``<|1.08|>``."""
        return self.encoding.decode(token_ids, **kwargs)

    # -- special tokens ------------------------------------------------------------------------

    @cached_property
    def eot(self) -> int:
        return self.encoding.eot_token

    @cached_property
    def transcribe(self) -> int:
        return self.special_tokens["<|transcribe|>"]

    @cached_property
    def translate(self) -> int:
        return self.special_tokens["<|translate|>"]

    @cached_property
    def sot(self) -> int:
        return self.special_tokens["<|startoftranscript|>"]

    @cached_property
    def sot_lm(self) -> int:
        return self.special_tokens["<|startoflm|>"]

    @cached_property
    def sot_prev(self) -> int:
        return self.special_tokens["<|startofprev|>"]

    @cached_property
    def no_speech(self) -> int:
        return self.special_tokens["<|nospeech|>"]

    @cached_property
    def no_timestamps(self) -> int:
        return self.special_tokens["<|notimestamps|>"]

    @cached_property
    def timestamp_begin(self) -> int:
        return self.special_tokens["<|0.00|>"]

    @cached_property
    def language_token(self) -> int:
        """The token of this tokenizer's ``language``."""
        if self.language is None:
            raise ValueError("This tokenizer does not have language token configured")
        return self.to_language_token(self.language)

    def to_language_token(self, language: str) -> int:
        token = self.special_tokens.get(f"<|{language}|>")
        if not token:
            raise KeyError(f"Language {language} not found in tokenizer.")
        return token

    @cached_property
    def _languages(self) -> tuple[tuple[int, str], ...]:
        """(token, code) of every language in the vocabulary, in id order."""
        found = [(self.special_tokens[f"<|{code}|>"], code) for code in LANGUAGES
                 if f"<|{code}|>" in self.special_tokens]
        return tuple(sorted(found))[: self.num_languages]

    @cached_property
    def all_language_tokens(self) -> tuple[int, ...]:
        return tuple(token for token, _ in self._languages)

    @cached_property
    def all_language_codes(self) -> tuple[str, ...]:
        return tuple(code for _, code in self._languages)

    @cached_property
    def sot_sequence_including_notimestamps(self) -> tuple[int, ...]:
        return (*self.sot_sequence, self.no_timestamps)

    @cached_property
    def non_speech_tokens(self) -> tuple[int, ...]:
        """Sorted ids to suppress so that no speaker tags or non-speech annotations are sampled
        ("♪♪♪", "( SPEAKING FOREIGN LANGUAGE )", "[DAVID] Hey there,"). Hyphens and apostrophes stay
        allowed inside words but not at the start of one."""
        encode = self.encoding.encode
        suppressed = {encode(" -")[0], encode(" '")[0]}
        for symbol in _NON_SPEECH_SYMBOLS + tuple(_MUSIC_SYMBOLS):
            for ids in (encode(symbol), encode(" " + symbol)):
                if len(ids) == 1 or symbol in _MUSIC_SYMBOLS:
                    suppressed.add(ids[0])
        return tuple(sorted(suppressed))

    # -- words (for word-level timestamps) -----------------------------------------------------

    def split_to_word_tokens(self, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
        """Words and the tokens of each. Languages written without spaces (zh, ja, th, lo, my, yue)
        are split at every point where the tokens decode to whole characters; others at spaces."""
        if self.language in NO_SPACE_LANGUAGES:
            return self.split_tokens_on_unicode(tokens)
        return self.split_tokens_on_spaces(tokens)

    def split_tokens_on_unicode(self, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
        """Cut after each token where the text decoded so far holds no incomplete UTF-8 sequence.

        A U+FFFD in a partial decode means either a character still waiting for its next bytes, or
        an invalid byte that the whole text shows as U+FFFD too; only the latter closes a piece.
        Tokens left pending at the end (an unfinished character) are dropped.
        """
        full = self.decode_with_timestamps(tokens)
        pieces: list[str] = []
        piece_tokens: list[list[int]] = []
        pending: list[int] = []
        offset = 0  # characters of ``full`` already emitted
        for token in tokens:
            pending.append(token)
            text = self.decode_with_timestamps(pending)
            bad = text.find(REPLACEMENT_CHAR)
            if bad < 0 or full[offset + bad] == REPLACEMENT_CHAR:
                pieces.append(text)
                piece_tokens.append(pending)
                pending = []
                offset += len(text)
        return pieces, piece_tokens

    def split_tokens_on_spaces(self, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
        """Join the unicode pieces into words: a piece starts a new word when it is a special token,
        begins with a space or is punctuation; otherwise it continues the previous word."""
        words: list[str] = []
        word_tokens: list[list[int]] = []
        for piece, ids in zip(*self.split_tokens_on_unicode(tokens), strict=True):
            # Substring test, as upstream: "" and runs such as "!\"#" count as punctuation too.
            punctuation = piece.strip() in string.punctuation
            if not words or ids[0] >= self.eot or piece.startswith(" ") or punctuation:
                words.append(piece)
                word_tokens.append(ids)
            else:
                words[-1] += piece
                word_tokens[-1].extend(ids)
        return words, word_tokens


@lru_cache(maxsize=None)
def get_tokenizer(
    multilingual: bool,
    *,
    num_languages: int = 99,
    language: str | None = None,
    task: str | None = None,
) -> Tokenizer:
    """The (cached) tokenizer of a checkpoint.

    ``language`` is a code or a name ("ja", "Japanese", "mandarin"), case-insensitive. Multilingual
    tokenizers default to English and "transcribe"; English-only ones take neither (both ignored).
    """
    if language is not None:
        language = language.lower()
        if language not in LANGUAGES:
            if language not in TO_LANGUAGE_CODE:
                raise ValueError(f"Unsupported language: {language}")
            language = TO_LANGUAGE_CODE[language]

    if multilingual:
        name = "multilingual"
        language = language or "en"
        task = task or "transcribe"
    else:
        name = "gpt2"
        language = None
        task = None

    return Tokenizer(encoding=get_encoding(name=name, num_languages=num_languages), num_languages=num_languages,
                     language=language, task=task)
