"""The tables GPT-SoVITS's Chinese front end reads (../assets/, extracted from upstream at 48b1a01 by
scripts/parity/gpt_sovits_zh_data.py): each loaded once, on first use, so importing the front end costs nothing."""

from __future__ import annotations

import ast
import gzip
import json
import re
from functools import cache
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "assets"  # engines/gpt_sovits/assets/


@cache
def jieba():
    """jieba, its start-up messages silenced as upstream silences them (its dictionary loads on first use)."""
    import logging

    import jieba as module

    module.setLogLevel(logging.CRITICAL)
    return module


@cache
def word_lists() -> dict:
    """zh_word_lists.json: the tone-sandhi and erhua word lists, G2PW's exceptions, punctuation, the v2 symbols."""
    return json.loads((DATA / "zh_word_lists.json").read_text(encoding="utf-8"))


@cache
def word_set(name: str) -> frozenset[str]:
    return frozenset(word_lists()[name])


@cache
def punctuation() -> tuple[str, ...]:
    """text/symbols.py's punctuation: the only non-Chinese characters the Chinese front end keeps."""
    return tuple(word_lists()["punctuation"])


def replace_consecutive_punctuation(text: str) -> str:
    """A run of symbols.py's marks becomes its first (the Chinese and Japanese text_normalize end with this: repeated
    marks would leak the reference's prosody)."""
    marks = "".join(re.escape(mark) for mark in punctuation())
    return re.sub(f"([{marks}])([{marks}])+", r"\1", text)


@cache
def symbol_ids() -> dict[str, int]:
    """symbols2.py's table: phone -> id in the v2 family's 732-phone vocabulary."""
    return {symbol: i for i, symbol in enumerate(word_lists()["symbols_v2"])}


@cache
def opencpop() -> dict[str, tuple[str, str]]:
    """opencpop-strict.txt: a toneless pinyin syllable -> (initial phone, final phone)."""
    table = {}
    for line in (DATA / "opencpop-strict.txt").read_text(encoding="utf-8").splitlines():
        if line.strip():
            syllable, phones = line.split("\t")
            initial, final = phones.strip().split(" ")
            table[syllable] = (initial, final)
    return table


def _read_corrections(text: str, into: dict[str, list[str]]) -> None:
    # One `word: ['pin1', 'yin1']` per line; upstream evaluates the right-hand side, a list literal.
    for line in text.splitlines():
        if line.strip():
            word, pinyins = line.split(":")
            into[word.strip()] = ast.literal_eval(pinyins.strip())


@cache
def pronunciation_corrections() -> dict[str, list[str]]:
    """g2pw's polyphonic.rep then polyphonic-fix.rep (a later line wins): word -> its pinyin (TONE3)."""
    table: dict[str, list[str]] = {}
    _read_corrections((DATA / "polyphonic.rep").read_text(encoding="utf-8"), table)
    _read_corrections(gzip.decompress((DATA / "polyphonic-fix.rep.gz").read_bytes()).decode("utf-8"), table)
    return table
