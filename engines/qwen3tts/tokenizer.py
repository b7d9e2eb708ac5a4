"""Qwen3-TTS's text tokenizer: Qwen2's byte-level BPE (mizuoto/text/qwen2_bpe.py), exact to the
`Qwen2TokenizerFast` (transformers 4.57.3, tokenizers 0.22) that upstream's processor loads.

What is Qwen3-TTS's own: the pre-tokenizer regex transformers 4.57.3's `fix_mistral_regex=True` may swap in
for the folder (`uses_mistral_regex`), the TTS special tokens it looks up, and the wording of its errors.
"""

from __future__ import annotations

import re
import unicodedata  # noqa: F401  (tests and scripts/parity/qwen3tts_tokenizer_live.py reach it from here)
from functools import cached_property
from pathlib import Path

from mizuoto.core.errors import CheckpointError
from mizuoto.text.qwen2_bpe import (
    CONFIG,
    MERGES,
    QWEN2_PATTERN,
    TOKENIZER_JSON,
    VOCAB,
    AddedToken,
    byte_to_unicode,
    check_tokenizer_json,
    read_added_tokens,
    read_json,
    read_ranks,
)
from mizuoto.text.qwen2_bpe import QwenTokenizer as _QwenBPE

__all__ = ["CONFIG", "MERGES", "QWEN2_PATTERN", "MISTRAL_FIX_PATTERN", "TOKENIZER_JSON", "VOCAB", "AddedToken",
           "QwenTokenizer", "byte_to_unicode", "load_tokenizer", "uses_mistral_regex"]

MODEL_CONFIG = "config.json"
WHAT = "Qwen3-TTS text tokenizer"

# What transformers 4.57.3's `_patch_mistral_regex` puts in place of Qwen2's regex: no contraction rule, letter
# runs cut at lower -> upper case changes ("HelloWorld" -> "Hello", "World"), "/" kept after symbol runs.
MISTRAL_FIX_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
                       r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
                       r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# model_type values for which transformers keeps the patch even on configs written by <= 4.57.2
_MISTRAL_TYPES = ("mistral", "mistral3", "voxtral", "ministral", "pixtral")
_PATCH_MIN_VOCAB = 100000  # the patch is only considered above this base vocabulary size


def _version_key(text: str) -> tuple[tuple[int, ...], int]:
    """PEP 440 order for the versions transformers writes ("4.57.3", "4.57.0.dev0", "5.0.0rc1"):
    release numbers, then pre-release < release < post-release."""
    match = re.match(r"v?(\d+(?:\.\d+)*)(.*)$", text.strip())
    if match is None:
        raise ValueError(text)
    release = tuple(int(n) for n in match.group(1).split("."))
    release += (0,) * (4 - len(release))
    suffix = match.group(2).lstrip(".-_").lower()
    if not suffix:
        return release, 0
    return release, (1 if suffix.startswith(("post", "rev")) or re.fullmatch(r"r\d*", suffix) else -1)


def uses_mistral_regex(folder: Path, base_vocab_size: int) -> bool:
    """Whether upstream's `AutoProcessor.from_pretrained(folder, fix_mistral_regex=True)` swaps the
    pre-tokenizer regex (transformers 4.57.3, `_patch_mistral_regex`): only for a base vocabulary over
    100000 tokens loaded from a folder with a `config.json`, and then unless that config was written by
    transformers <= 4.57.2 for a non-Mistral model_type, or by >= 5.0.0. A config without
    `transformers_version` (or written by 4.57.3 .. 4.x) gets the patch."""
    if base_vocab_size <= _PATCH_MIN_VOCAB:
        return False
    path = folder / MODEL_CONFIG
    if not path.is_file():
        return False
    config = read_json(path)
    written_by, model_type = config.get("transformers_version"), config.get("model_type")
    if written_by:
        try:
            key = _version_key(str(written_by))
        except ValueError:
            raise CheckpointError(f"{path} has transformers_version {written_by!r}, which is not a version") from None
        if key <= _version_key("4.57.2"):
            return model_type is None or model_type in _MISTRAL_TYPES
        if key >= _version_key("5.0.0"):
            return False
    return True


class QwenTokenizer(_QwenBPE):
    """Qwen2's BPE with the TTS special tokens Qwen3-TTS's prompt is built from."""

    def token_id(self, content: str) -> int:
        """Id of an added token such as "<|im_start|>"."""
        if content not in self.added_tokens:
            raise CheckpointError(f"the {WHAT} has no token {content!r}")
        return self.added_tokens[content]

    @cached_property
    def im_start(self) -> int:
        return self.token_id("<|im_start|>")

    @cached_property
    def im_end(self) -> int:
        return self.token_id("<|im_end|>")

    @cached_property
    def tts_pad(self) -> int:
        return self.token_id("<tts_pad>")

    @cached_property
    def tts_bos(self) -> int:
        return self.token_id("<tts_text_bos>")

    @cached_property
    def tts_eos(self) -> int:
        return self.token_id("<tts_text_eod>")


def load_tokenizer(folder: str | Path) -> QwenTokenizer:
    """The text tokenizer of a Qwen3-TTS model folder, with the pre-tokenizer regex upstream's
    processor ends up using for that folder."""
    folder = Path(folder)
    config_path = folder / CONFIG
    if not config_path.is_file():
        raise CheckpointError(f"the {WHAT} file {config_path} is missing")
    added = read_added_tokens(config_path)
    ranks, rank_to_id, id_bytes = read_ranks(folder, WHAT)
    pattern = MISTRAL_FIX_PATTERN if uses_mistral_regex(folder, len(id_bytes)) else QWEN2_PATTERN
    check_tokenizer_json(folder, (QWEN2_PATTERN, pattern))
    return QwenTokenizer(ranks, rank_to_id, id_bytes, added, pattern, name=folder.name or "qwen2")
