"""Text frontend: normalise, then UTF-8 bytes framed by BOS and EOS."""

from __future__ import annotations

import unicodedata

from mizuoto.core.errors import InputError

from .config import BOS, EOS, DummyConfig


def normalise(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).split())


def encode(text: str, config: DummyConfig) -> list[int]:
    if not isinstance(text, str):
        raise InputError(f"text must be a string, got {type(text).__name__}")
    clean = normalise(text)
    if not clean:
        raise InputError("text is empty; give some words to speak")
    ids = [BOS, *clean.encode("utf-8"), EOS]
    if len(ids) > config.max_tokens:
        raise InputError(f"text is too long for the dummy engine: {len(ids) - 2} UTF-8 bytes, "
                         f"at most {config.max_tokens - 2}; split it into shorter pieces")
    return ids
