"""BudouX's phrase splitter (google/budoux's Parser.parse), natively: split_lang cuts Chinese and Japanese runs into
phrases with BudouX's default Japanese and simplified-Chinese models before it asks a detector about each. The two
models ship in ../assets/ (budoux_ja.json, budoux_zh-hans.json, from budoux 0.10.1; see its README.md): BudouX's
models change between releases, and a copy pins the phrases upstream's environment produced.

A model maps feature groups (unigrams UW1-UW6 at offsets -3..+2, bigrams BW1-BW3, trigrams TW1-TW4) to integer
scores; a boundary falls before character i when the scores of the features seen there exceed half the sum of
every score in the model. Compared here in integers (2 * seen > total), which is BudouX's float test exactly:
the values are integers and halves far below 2^53.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[1] / "assets"
MODELS = {"ja": "budoux_ja.json", "zh-hans": "budoux_zh-hans.json"}
# (group, first offset from i, length): the character windows BudouX scores at position i.
FEATURES = (("UW1", -3, 1), ("UW2", -2, 1), ("UW3", -1, 1), ("UW4", 0, 1), ("UW5", 1, 1), ("UW6", 2, 1),
            ("BW1", -2, 2), ("BW2", -1, 2), ("BW3", 0, 2),
            ("TW1", -3, 3), ("TW2", -2, 3), ("TW3", -1, 3), ("TW4", 0, 3))


class Parser:
    def __init__(self, model: dict[str, dict[str, int]]):
        self.groups = [(model.get(name, {}), start, length) for name, start, length in FEATURES]
        self.total = sum(sum(group.values()) for group in model.values())

    def parse(self, sentence: str) -> list[str]:
        if not sentence:
            return []
        chunks = [sentence[0]]
        for i in range(1, len(sentence)):
            seen = 0
            for group, start, length in self.groups:
                # A window must lie inside the sentence (BudouX tests each one's bounds; i >= 1 always).
                if i + start >= 0 and i + start + length <= len(sentence):
                    seen += group.get(sentence[i + start:i + start + length], 0)
            if 2 * seen > self.total:
                chunks.append(sentence[i])
            else:
                chunks[-1] += sentence[i]
        return chunks


@cache
def parser(name: str) -> Parser:
    """BudouX's default parser `name` ("ja" or "zh-hans")."""
    return Parser(json.loads((ASSETS / MODELS[name]).read_text(encoding="utf-8")))
