"""Part-of-speech tags for GPT-SoVITS's English homographs: the inference of nltk 3.9.2's averaged perceptron tagger
(nltk.pos_tag, PerceptronTagger), reading nltk's own data files.

The data is nltk's averaged_perceptron_tagger_eng (not shipped here; its folder goes in the assets folder as
nltk_data/taggers/averaged_perceptron_tagger_eng/): three JSON files, the weights (feature -> tag -> weight), the
tag dictionary (a word always given one tag) and the classes. A word in the dictionary takes its tag; any other is
scored by the weights of fourteen features of it and its neighbours, the best score winning (ties to the later tag
in alphabetical order), summed in the features' order and each feature's weights in the file's order as nltk sums
them, so the same floats decide."""

from __future__ import annotations

import json
from pathlib import Path

from mizuoto.core.errors import InputError

NAME = "averaged_perceptron_tagger_eng"
FOLDER = ("nltk_data", "taggers", NAME)  # under the assets folder
_START, _END = ("-START-", "-START2-"), ("-END-", "-END2-")


def _context_word(word: str) -> str:
    # How a neighbouring word is seen: hyphenated words, years and numbers are each one class.
    if "-" in word and word[0] != "-":
        return "!HYPHEN"
    if word.isdigit() and len(word) == 4:
        return "!YEAR"
    if word and word[0].isdigit():
        return "!DIGITS"
    return word.lower()


class Tagger:
    def __init__(self, weights: dict, tagdict: dict, classes: list[str]):
        self.weights, self.tagdict, self.classes = weights, tagdict, frozenset(classes)

    @classmethod
    def load(cls, folder: Path) -> Tagger:
        """nltk's averaged_perceptron_tagger_eng folder (the one holding its three .json files)."""
        parts = []
        for kind in ("weights", "tagdict", "classes"):
            path = Path(folder) / f"{NAME}.{kind}.json"
            if not path.is_file():
                raise InputError(f"English text needs nltk's part-of-speech tagger: {path} is missing (put nltk's "
                                 f"{NAME} folder in the assets folder as {'/'.join(FOLDER)})")
            parts.append(json.loads(path.read_text(encoding="utf-8")))
        return cls(*parts)

    def _features(self, i: int, word: str, context: list[str], prev: str, prev2: str) -> dict[str, int]:
        i += len(_START)
        names = ["bias", f"i suffix {word[-3:]}", f"i pref1 {word[0] if word else ''}", f"i-1 tag {prev}",
                 f"i-2 tag {prev2}", f"i tag+i-2 tag {prev} {prev2}", f"i word {context[i]}",
                 f"i-1 tag+i word {prev} {context[i]}", f"i-1 word {context[i - 1]}",
                 f"i-1 suffix {context[i - 1][-3:]}", f"i-2 word {context[i - 2]}", f"i+1 word {context[i + 1]}",
                 f"i+1 suffix {context[i + 1][-3:]}", f"i+2 word {context[i + 2]}"]
        counts: dict[str, int] = {}
        for name in names:  # a name that comes twice counts twice, and is summed once with that multiplier
            counts[name] = counts.get(name, 0) + 1
        return counts

    def _predict(self, features: dict[str, int]) -> str:
        scores: dict[str, float] = {}
        for feature, count in features.items():
            for tag, weight in self.weights.get(feature, {}).items():
                scores[tag] = scores.get(tag, 0.0) + count * weight
        return max(self.classes, key=lambda tag: (scores.get(tag, 0.0), tag))

    def tag(self, words: list[str]) -> list[tuple[str, str]]:
        prev, prev2 = _START
        context = [*_START, *(_context_word(w) for w in words), *_END]
        tagged = []
        for i, word in enumerate(words):
            tag = self.tagdict.get(word) or self._predict(self._features(i, word, context, prev, prev2))
            tagged.append((word, tag))
            prev2, prev = prev, tag
        return tagged
