"""The word splitting GPT-SoVITS's English g2p uses: nltk 3.9.2's TweetTokenizer() (case kept), on normalised text.

The text it gets has been through en_normalize.text_normalize, so it holds only ASCII letters, blanks and
' . , ? ! -. Of the tokenizer's alternatives only these can match such text, tried in its order at each position:
a bare domain name ("well.done", "x-ray.com": letters and digits joined by . or -, then a dot and 2 to 13 letters at
a word's end), a word with inner apostrophes, dashes or underscores (letter first and last), a run of word
characters, dots with blanks between them, and any other single non-blank character. Before matching, a character
other than a letter or digit repeated four times or more is cut to three, as the tokenizer does. The rest of its
alternatives (links with a scheme, emoticons, tags, arrows, handles, hashtags, e-mail, phone numbers, emoji, HTML
entities) need characters normalisation removes; text that still holds them is split by the same rules above."""

from __future__ import annotations

import re

_REPEATS = re.compile(r"([^a-zA-Z0-9])\1{3,}")
_TOKEN = re.compile(
    r"(?<!@)[a-z0-9]+(?:[.\-][a-z0-9]+)*[.][a-z]{2,13}\b/?(?!@)"  # a bare domain name
    r"|[^\W\d_](?:[^\W\d_]|['\-_])+[^\W\d_]"  # a word with apostrophes or dashes inside
    r"|[+\-]?\d+[,/.:-]\d+[+\-]?"  # a number with a separator
    r"|\w+"  # a word
    r"|\.(?:\s*\.)+"  # an ellipsis
    r"|\S",
    re.IGNORECASE,
)


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(_REPEATS.sub(r"\1\1\1", text))
