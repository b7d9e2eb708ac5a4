"""The tables GPT-SoVITS's English front end reads (../assets/, see its README.md): the CMU dictionaries as
text/english.py builds them, its name dictionary, g2p_en's homographs and predictor weights. Each is read once, on
first use, so importing the front end costs nothing."""

from __future__ import annotations

import gzip
import json
from functools import cache

from .zh_data import DATA

# Abbreviations upstream drops from the dictionary because it reads them wrongly; they are spelled instead.
_DROPPED = ("ae", "ai", "ar", "ios", "hud", "os")
CMU_FIRST_ENTRY_LINE = 57  # read_dict_new starts here: the lines above are cmudict.rep's header


def _lines(name: str) -> list[str]:
    path = DATA / name
    raw = gzip.decompress(path.read_bytes()) if name.endswith(".gz") else path.read_bytes()
    return raw.decode("utf-8").splitlines()


@cache
def dictionary() -> dict[str, list[str]]:
    """word (lower case) -> its phones, as english.get_dict and en_G2p.__init__ leave self.cmu (only the first
    pronunciation is ever read): cmudict.rep (word, two blanks, phones), then cmudict-fast.rep's words that are not
    in it yet (word and phones split by single blanks), then engdict-hot.rep over both, less the dropped words."""
    table: dict[str, list[str]] = {}
    for line in _lines("cmudict.rep.gz")[CMU_FIRST_ENTRY_LINE - 1:]:
        word, phones = line.strip().split("  ")[:2]
        table[word.lower()] = phones.split(" ")
    for line in _lines("cmudict-fast.rep.gz"):
        word, *phones = line.strip().split(" ")
        table.setdefault(word.lower(), phones)
    for line in _lines("engdict-hot.rep"):
        word, *phones = line.strip().split(" ")
        table[word.lower()] = phones
    for word in _DROPPED:
        del table[word]
    return table


@cache
def names() -> dict[str, list[str]]:
    """namedict.json.gz (upstream's namedict_cache.pickle as JSON): name (lower case) -> its phones."""
    table = json.loads(gzip.decompress((DATA / "namedict.json.gz").read_bytes()))
    return {name: pronunciations[0] for name, pronunciations in table.items()}


@cache
def homographs() -> dict[str, tuple[list[str], list[str], str]]:
    """g2p_en's homographs.en (word -> phones when the tag starts with POS, phones otherwise, POS) with upstream's
    two corrections: read (present only for VBP and its prefixes) and complex (adjective)."""
    table = {}
    for line in (DATA / "g2p_en-homographs.en").read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            word, first, other, pos = line.strip().split("|")
            table[word.lower()] = (first.split(), other.split(), pos)
    table["read"] = (["R", "IY1", "D"], ["R", "EH1", "D"], "VBP")
    table["complex"] = (["K", "AH0", "M", "P", "L", "EH1", "K", "S"], ["K", "AA1", "M", "P", "L", "EH0", "K", "S"],
                        "JJ")
    return table


def predictor_path():
    return DATA / "g2p_en-checkpoint20.npz"
