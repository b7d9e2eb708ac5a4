"""IndexTTS 2's text front end as `IndexTTS2.infer` runs it: upstream's `TextTokenizer` (indextts/utils/front.py at
ee40fa7) over the normaliser of normalizer.py, with the checkpoint's SentencePiece BPE (bpe.model) read by
`sentencepiece` itself, so pieces and ids are the library's.

    tokens(text):   ''                    -> []
                    one visible character -> the BPE of the text as given (no normalisation, no upper-casing)
                    else                  -> normalise -> split around CJK characters, upper-cased -> the BPE
    ids(tokens):    each piece's id (an unknown piece -> unk_id)
    segments(tokens, max_tokens, quick_streaming_tokens): upstream's split_segments

The CJK split is upstream's tokenize_by_CJK_char: every character of the CJK ranges stands alone, other runs are
stripped and upper-cased, all joined by single spaces. The segmenter cuts after '.', '!', '?', '▁.', '▁?' and '▁...'
once a segment has more than two tokens, and hands any stretch holding ',' / '▁,' (else '-') to itself with those
as the cut marks; a stretch longer than max_tokens is cut every max_tokens tokens (upstream warns). Then
neighbours are merged while they fit max_tokens and more than quick_streaming_tokens tokens have gone, or while
together they fit half of max_tokens. Kept as upstream does it: a cut mark followed by "'" keeps the quote and the
quote also starts the next segment (upstream's `i += 1` inside its `for` does not skip it). Bad values upstream
fails on or silently drops text for (max_tokens < 1, quick_streaming_tokens < 0) are one-line InputErrors here.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path

from mizuoto.core.errors import CheckpointError, InputError, MizuotoError

from .normalizer import TextNormaliser, load_normaliser

SENTENCEPIECE_INSTALL = "pip install sentencepiece"

# tokenize_by_CJK_char's ranges (after nltk): Hangul Jamo, CJK radicals to Yi, Hangul syllables, compatibility
# ideographs and forms, half-width forms, and the supplementary ideographic plane
_CJK = re.compile(r"([\u1100-\u11ff\u2e80-\ua4cf\ua840-\uD7AF\uF900-\uFAFF\uFE30-\uFE4F\uFF65-\uFFDC"
                  r"\U00020000-\U0002FFFF])")
SENTENCE_ENDS = (".", "!", "?", "▁.", "▁?", "▁...")  # '▁!' is not in the released vocabulary
COMMAS = (",", "▁,")
QUOTES = ("'", "▁'")
HYPHEN = "-"


def split_cjk(text: str) -> str:
    """Each CJK character a word, the rest stripped and upper-cased: '你好 hello world' -> '你 好 HELLO WORLD'."""
    words = (w.strip().upper() for w in _CJK.split(text.strip()))
    return " ".join(w for w in words if w)


def _cut_by_length(segment: list[str], max_tokens: int) -> list[list[str]]:
    warnings.warn(f"an IndexTTS text segment of {len(segment)} tokens has no cut mark within {max_tokens} tokens; "
                  f"it is cut every {max_tokens} tokens", RuntimeWarning, stacklevel=3)
    return [segment[j:j + max_tokens] for j in range(0, len(segment), max_tokens)]


def _split(tokens: list[str], marks: tuple[str, ...], max_tokens: int, quick: int) -> list[list[str]]:
    """upstream's split_segments_by_token(tokens, marks, max_tokens, quick)."""
    if not tokens:
        return []
    cut: list[list[str]] = []
    current: list[str] = []
    for i, token in enumerate(tokens):
        current.append(token)
        if not any(m in marks for m in COMMAS) and any(c in current for c in COMMAS):
            cut.extend(_split(current, COMMAS, max_tokens, quick))
        elif HYPHEN not in marks and HYPHEN in current:
            cut.extend(_split(current, (HYPHEN,), max_tokens, quick))
        elif len(current) <= max_tokens:
            if token in marks and len(current) > 2:
                if i + 1 < len(tokens) and tokens[i + 1] in QUOTES:
                    current.append(tokens[i + 1])  # and it is read again as the next segment's first token
                cut.append(current)
                current = []
            continue
        else:
            cut.extend(_cut_by_length(current, max_tokens))
        current = []
    if current:
        cut.append(current)
    merged: list[list[str]] = []
    seen = 0
    for segment in cut:
        seen += len(segment)
        if not segment:
            continue
        if merged and len(merged[-1]) + len(segment) <= max_tokens and seen > quick:
            merged[-1] = merged[-1] + segment
        elif merged and len(merged[-1]) + len(segment) <= max_tokens / 2:
            merged[-1] = merged[-1] + segment
        else:
            merged.append(segment)
    return merged


@dataclass
class IndexText:
    """The checkpoint's BPE and the text normaliser; `normaliser.name` says which normaliser runs."""

    processor: object  # sentencepiece.SentencePieceProcessor
    normaliser: TextNormaliser

    @classmethod
    def load(cls, bpe_path, normaliser: str = "wetext", glossary: dict | None = None) -> IndexText:
        """bpe.model from `bpe_path`; `normaliser` "wetext" (upstream's; wetext must be installed) or "none";
        `glossary` as read_glossary gives it."""
        try:
            import sentencepiece
        except ImportError:
            raise MizuotoError(f"IndexTTS's tokenizer needs sentencepiece: {SENTENCEPIECE_INSTALL}") from None
        path = Path(bpe_path)
        if not path.is_file():
            raise CheckpointError(f"IndexTTS's BPE model {path} does not exist: put the checkpoint's bpe.model there")
        try:
            processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
        except (RuntimeError, OSError) as error:
            raise CheckpointError(f"{path} is not a SentencePiece model ({str(error).splitlines()[0][:120]}); "
                                  "use the checkpoint's bpe.model") from None
        return cls(processor, load_normaliser(normaliser, glossary))

    @property
    def unk_id(self) -> int:
        return self.processor.unk_id()

    @property
    def vocab_size(self) -> int:
        return self.processor.get_piece_size()

    def normalise(self, text: str) -> str:
        return self.normaliser.normalise(text)

    def tokens(self, text: str) -> list[str]:
        """upstream's TextTokenizer.tokenize."""
        if not isinstance(text, str):
            raise InputError(f"IndexTTS's text must be a string, not {type(text).__name__}")
        if not text:
            return []
        if len(text.strip()) != 1:
            text = split_cjk(self.normaliser.normalise(text))
        return self.processor.encode(text, out_type=str)

    def ids(self, tokens: list[str]) -> list[int]:
        """upstream's convert_tokens_to_ids: pieces outside the vocabulary become unk_id."""
        return [self.processor.piece_to_id(t) for t in tokens]

    def pieces(self, ids: list[int]) -> list[str]:
        return [self.processor.id_to_piece(i) for i in ids]

    def unknown(self, tokens: list[str]) -> list[str]:
        """The pieces the BPE cannot encode (upstream prints them as a warning)."""
        unk = self.unk_id
        return [t for t, i in zip(tokens, self.ids(tokens), strict=True) if i == unk]

    @staticmethod
    def segments(tokens: list[str], max_tokens: int = 120, quick_streaming_tokens: int = 0) -> list[list[str]]:
        """upstream's split_segments: the pieces spoken one GPT run each."""
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise InputError(f"max_text_tokens_per_segment must be a whole number of at least 1, not {max_tokens!r}")
        if isinstance(quick_streaming_tokens, bool) or not isinstance(quick_streaming_tokens, int) \
                or quick_streaming_tokens < 0:
            raise InputError("quick_streaming_tokens must be a whole number of at least 0, "
                             f"not {quick_streaming_tokens!r}")
        return _split(list(tokens), SENTENCE_ENDS, max_tokens, quick_streaming_tokens)


def read_glossary(path) -> dict:
    """A model folder's glossary.yaml as upstream's load_glossary_from_yaml reads it: a non-empty mapping replaces
    the (empty) glossary; anything else leaves it empty."""
    import yaml

    path = Path(path)
    if not path.exists():
        return {}
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise CheckpointError(f"{path} is not valid YAML ({str(error).splitlines()[0][:120]}); fix or remove it"
                              ) from None
    return dict(loaded) if loaded and isinstance(loaded, dict) else {}
