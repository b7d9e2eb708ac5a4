"""F5-TTS's text frontend: vocabulary, pinyin conversion, token ids, chunking and duration planning.

Everything here reproduces f5-tts 1.1.22 exactly (checked against it by
`scripts/parity/f5tts_frontend_live.py`); the upstream function each piece matches is named in its
docstring. The path a request's text takes upstream (`F5TTS.infer` -> `preprocess_ref_audio_text` ->
`infer_process` -> `infer_batch_process` -> `CFM.sample` -> `DiT.TextEmbedding`):

1. the reference transcript gets a sentence end (`punctuate_reference_text`);
2. the text to speak is cut into chunks whose byte budget depends on the reference's length
   (`max_chars_for`, `chunk_text`);
3. the reference transcript gets one more space when it ends in a one-byte character
   (`space_reference_text`), and each chunk is spoken as `reference + chunk` (`model_text`);
4. that string becomes a list of tokens: characters, with Han characters replaced by tone-numbered
   pinyin (`convert_char_to_pinyin`);
5. tokens become ids through `vocab.txt`, unknown tokens 0, batch padding -1 (`tokens_to_ids`);
6. the DiT's text embedding adds 1 to every id (see `tokens_to_ids`).

`plan_chunks` strings steps 1-3 together with the frame counts upstream derives from the same byte
lengths. Not reproduced: the transcription of a reference without transcript (upstream runs a Whisper
pipeline; give a transcript, or transcribe with the Whisper engine first) and everything
`preprocess_ref_audio_text` does to the audio (see `audio.py`).

Segmentation needs `rjieba` for every text, English included: the space the frontend inserts between
two segments depends on where jieba cuts (`"hello,world"` becomes `"hello, world"`). Han characters
also need `pypinyin`. Both are imported when first needed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from mizuoto.core.errors import CheckpointError, InputError

VOCAB_PATH = Path(__file__).resolve().parent / "assets" / "vocab.txt"
UNKNOWN_ID = 0  # what a token missing from the vocabulary maps to (line 0 of vocab.txt: the space)
PADDING_ID = -1  # batch padding; the text embedding's +1 turns it into its filler index 0

SAMPLE_RATE = 24000
HOP_LENGTH = 256
MAX_TOTAL_SECONDS = 22  # reference plus one chunk of speech: the length the chunk budget aims at
SHORT_CHUNK_BYTES = 10  # chunks shorter than this (in UTF-8 bytes) ...
SHORT_CHUNK_SPEED = 0.3  # ... are given this speed, i.e. over three times the time per byte
DEFAULT_CHUNK_BYTES = 135  # chunk_text's default budget (infer_process always passes its own)
CROSS_FADE_SECONDS = 0.15

_PIP_HINT = "pip install pypinyin rjieba"


# --- vocabulary -------------------------------------------------------------------------------------


def load_vocab(path: str | Path = VOCAB_PATH) -> dict[str, int]:
    """The token -> id map of a `vocab.txt`: one token per line, id = line number (upstream's
    `get_tokenizer(path, "custom")`).

    Each line loses exactly its last character, which is the newline: that is how a token that *is* a
    space (line 0 of the default vocabulary, `" \\n"`) survives, so lines are never stripped. The file is
    read as text with universal newlines, like upstream's `open(path, "r")`. A last line without a
    newline therefore loses a real character, as upstream's does; a token listed twice keeps its
    later line number and the vocabulary is one entry smaller than the file. The default file (the one
    upstream ships, see assets/README.md) has 2545 lines, no duplicates and a final newline.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            lines = list(handle)
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"cannot read the F5-TTS vocabulary {path}: {exc}") from None
    return {line[:-1]: index for index, line in enumerate(lines)}


def tokens_to_ids(texts: Sequence[Sequence[str]], vocab: dict[str, int]) -> torch.Tensor:
    """A batch of token lists -> a (batch, longest) int64 tensor of ids, what `CFM.sample` builds from a
    list-of-lists `text` (upstream's `list_str_to_idx`).

    Tokens not in the vocabulary become `UNKNOWN_ID` (0, the space in the default vocabulary); shorter
    rows are padded with `PADDING_ID` (-1). A plain string counts as its list of characters.

    The ids here are *vocabulary* ids. The DiT's `TextEmbedding.forward` adds 1 to every entry before
    its lookup (its table has `vocab_size + 1` rows), so padding becomes row 0, the filler, and vocabulary
    id i reads row i + 1; it then cuts the row to the number of mel frames or right-pads it with 0
    (filler), and with `text_mask_padding` (True in F5TTS_v1) takes the mask "shifted id == 0" *before*
    CFG's dropped-text pass zeroes all ids, so both passes mask the same positions. `CFM.sample` counts
    real tokens as `ids != -1` when it bounds the duration from below.
    """
    rows = [[vocab.get(token, UNKNOWN_ID) for token in text] for text in texts]
    width = max((len(row) for row in rows), default=0)
    ids = torch.full((len(rows), width), PADDING_ID, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return ids


# --- characters -> tokens ---------------------------------------------------------------------------

# Upstream normalises these before segmenting, so that they hit entries the vocabulary has.
_PUNCTUATION_MAP = str.maketrans({";": ",", "\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})

# A segment in which no space is inserted after a token that is one of these (a space, a colon, quotes).
_NO_SPACE_AFTER = " :'\""


def _is_han(char: str) -> bool:
    # Upstream's notion of "Chinese": U+3100..U+9FFF. Wider than Han (it takes in bopomofo, Hangul
    # compatibility jamo, CJK extension A, Yijing symbols) and narrower (no extensions B+, no compatibility
    # ideographs); kept as is because it decides which characters get a space and a pinyin lookup.
    return "\u3100" <= char <= "\u9fff"


def _jieba_cut():
    try:
        import rjieba
    except ImportError:
        raise InputError(f"F5-TTS's text frontend needs the packages pypinyin and rjieba: {_PIP_HINT}") from None
    return rjieba.cut


def _tone3_pinyin():
    try:
        from pypinyin import Style, lazy_pinyin
    except ImportError:
        raise InputError(f"F5-TTS's text frontend needs the packages pypinyin and rjieba: {_PIP_HINT}") from None
    # TONE3: tone as a trailing digit ("hao3"), neutral tone without one; with the tone sandhi rules
    # (3-3, 不, 一) applied across the string handed over at once.
    return lambda text: lazy_pinyin(text, style=Style.TONE3, tone_sandhi=True)


def _append_ascii_segment(tokens: list[str], segment: str) -> None:
    # A word (more than one character) is set off by a space unless the text already has a separator
    # there: that space is what turns "hello,world" into "hello, world".
    if tokens and len(segment) > 1 and tokens[-1] not in _NO_SPACE_AFTER:
        tokens.append(" ")
    tokens.extend(segment)


def _append_wide_segment(tokens: list[str], segment: str, pinyin) -> None:
    # Every character takes three UTF-8 bytes (in practice: CJK). The segment is converted as a whole
    # so that phrase readings and tone sandhi apply, then read back character by character. pypinyin
    # returns one entry per Han character but one entry per *run* of other characters; upstream
    # indexes the result by character position regardless, so such a run shifts the readings, and a
    # segment that comes up short fails upstream. Both are reproduced (the failure as an InputError).
    readings = pinyin(segment)
    for position, char in enumerate(segment):
        if _is_han(char):
            tokens.append(" ")
        if position >= len(readings):
            raise InputError(f"F5-TTS's text frontend cannot read the characters {segment!r} (upstream fails too)")
        tokens.append(readings[position])


def _append_mixed_segment(tokens: list[str], segment: str, pinyin) -> None:
    # Character by character: Latin-1 as is, Han as its own reading (no phrase context), others as is.
    for char in segment:
        if ord(char) < 256:
            tokens.append(char)
        elif _is_han(char):
            tokens.append(" ")
            tokens.extend(pinyin(char))
        else:
            tokens.append(char)


def convert_char_to_pinyin(texts: Sequence[str], polyphone: bool = True) -> list[list[str]]:
    """Each text -> the token list the model reads (upstream's `model/utils.py::convert_char_to_pinyin`).

    The text is normalised (`;` -> `,`, curly quotes -> straight), cut by jieba, and each segment
    handled by its UTF-8 length: all one-byte (ASCII) -> its characters, preceded by a space when it is a
    word; all three-byte -> the pinyin of the whole segment, a space before each Han character's reading
    (only with `polyphone`, otherwise as the next case); anything else -> character by character. Pinyin
    is TONE3 with tone sandhi. The class is decided on byte counts alone, exactly as upstream does: a
    segment of one 4-byte and one 2-byte character (6 bytes, 2 characters) counts as "three-byte".
    """
    cut = _jieba_cut()
    pinyin = None
    converted = []
    for text in texts:
        tokens: list[str] = []
        for segment in cut(text.translate(_PUNCTUATION_MAP)):
            n_bytes = len(segment.encode("utf-8"))
            if n_bytes == len(segment):
                _append_ascii_segment(tokens, segment)
                continue
            pinyin = pinyin or _tone3_pinyin()
            if polyphone and n_bytes == 3 * len(segment):
                _append_wide_segment(tokens, segment, pinyin)
            else:
                _append_mixed_segment(tokens, segment, pinyin)
        converted.append(tokens)
    return converted


# --- reference transcript and chunks ----------------------------------------------------------------


def punctuate_reference_text(ref_text: str) -> str:
    """The reference transcript ending in a sentence end, as `preprocess_ref_audio_text` leaves it.

    A text ending in ". " or "。" is kept; one ending in "." gets a space; anything else gets ". " (so
    "你好" becomes "你好. "). Upstream transcribes the audio when the transcript is blank; Mizuoto needs
    the transcript, so a blank one is an input error.
    """
    if not ref_text.strip():
        raise InputError("F5-TTS needs the transcript of the reference audio; type what the reference says")
    if ref_text.endswith(". ") or ref_text.endswith("。"):
        return ref_text
    return ref_text + (" " if ref_text.endswith(".") else ". ")


def space_reference_text(ref_text: str) -> str:
    """The punctuated transcript as `infer_batch_process` uses it: one more space after a final one-byte
    character. After `punctuate_reference_text` the text ends in ". " or "。", so an ASCII transcript
    always ends in two spaces here; this is what the model sees and what the duration estimate counts.
    """
    return ref_text + " " if len(ref_text[-1].encode("utf-8")) == 1 else ref_text


def max_chars_for(ref_text: str, ref_samples: int, sample_rate: int, speed: float = 1.0) -> int:
    """The UTF-8 byte budget per chunk of generated text (`infer_process`): the reference's bytes per
    second, times the seconds left of `MAX_TOTAL_SECONDS` after the reference, times `speed`, truncated.

    `ref_text` is the punctuated transcript (before `space_reference_text`), `ref_samples` the reference's
    length in samples at `sample_rate`, as loaded (before mixing down or resampling). A reference of 22 s
    or more gives a budget <= 0: every sentence becomes its own chunk.
    """
    seconds = ref_samples / sample_rate
    return int(len(ref_text.encode("utf-8")) / seconds * (MAX_TOTAL_SECONDS - seconds) * speed)


# Sentence ends: after ASCII ; : , . ! ? only when whitespace follows (the whitespace is dropped); after
# their full-width forms always (nothing is dropped).
_SENTENCE_BREAK = re.compile(r"(?<=[;:,.!?])\s+|(?<=[；：，。！？])")


def _with_separator(sentence: str) -> str:
    # A sentence ending in a one-byte character gets the space its split removed back.
    return sentence + " " if len(sentence[-1].encode("utf-8")) == 1 else sentence


def chunk_text(text: str, max_chars: int = DEFAULT_CHUNK_BYTES) -> list[str]:
    """Sentences packed greedily into chunks of at most `max_chars` UTF-8 bytes (`infer_utils.chunk_text`).

    The budget counts the chunk so far *with* its trailing separator space; a sentence longer than the
    budget becomes a chunk on its own; chunks are stripped of surrounding whitespace. Empty text gives no
    chunk, but whitespace-only text gives one empty chunk, as upstream's does.
    """
    chunks = []
    current = ""
    for sentence in _SENTENCE_BREAK.split(text):
        if not sentence:
            continue
        if len(current.encode("utf-8")) + len(sentence.encode("utf-8")) <= max_chars:
            current += _with_separator(sentence)
            continue
        if current:
            chunks.append(current.strip())
        current = _with_separator(sentence)
    if current:
        chunks.append(current.strip())
    return chunks


def model_text(ref_text: str, gen_text: str) -> str:
    """What the model reads for one chunk: the spaced reference transcript followed by the chunk."""
    return ref_text + gen_text


def chunk_speed(gen_text: str, speed: float = 1.0) -> float:
    """The speed a chunk is timed with: `SHORT_CHUNK_SPEED` for chunks under `SHORT_CHUNK_BYTES` bytes
    (they would come out too short), the requested speed otherwise."""
    return SHORT_CHUNK_SPEED if len(gen_text.encode("utf-8")) < SHORT_CHUNK_BYTES else speed


def reference_frames(ref_samples_24k: int) -> int:
    """Mel frames of the 24 kHz reference, as the generated mel is cut after them."""
    return ref_samples_24k // HOP_LENGTH


def estimate_duration(ref_frames: int, ref_text: str, gen_text: str, speed: float = 1.0) -> int:
    """Total mel frames (reference + generated) for one chunk, `infer_batch_process`'s estimate: the
    reference's frames per transcript byte times the chunk's bytes, over its `chunk_speed`, truncated.

    `ref_text` is the spaced transcript (`space_reference_text`). `CFM.sample` then raises the value to at
    least max(token count, reference frames) + 1 and caps it at its `max_duration`.
    """
    ref_bytes = len(ref_text.encode("utf-8"))
    gen_bytes = len(gen_text.encode("utf-8"))
    return ref_frames + int(ref_frames / ref_bytes * gen_bytes / chunk_speed(gen_text, speed))


def fixed_duration_frames(seconds: float) -> int:
    """Total mel frames for a fixed duration in seconds (reference included), truncated."""
    return int(seconds * SAMPLE_RATE / HOP_LENGTH)


def allocate_fix_durations(fix_duration: float | None, ref_frames: int, chunks: Sequence[str],
                           cross_fade_duration: float = CROSS_FADE_SECONDS) -> list[float | None]:
    """Per-chunk fixed durations in seconds (`infer_batch_process`), reference included in each.

    With one chunk, or no fixed duration, every chunk gets `fix_duration` as given. Otherwise the time
    after the reference (the reference counted in whole frames), plus what the cross-fades will eat, is
    shared in proportion to the chunks' UTF-8 byte lengths, so the joined result lasts about `fix_duration`.
    """
    if fix_duration is None or len(chunks) <= 1:
        return [fix_duration] * len(chunks)
    ref_seconds = ref_frames * HOP_LENGTH / SAMPLE_RATE
    weights = [len(chunk.encode("utf-8")) for chunk in chunks]
    total_weight = sum(weights)
    allocatable = fix_duration - ref_seconds + cross_fade_duration * (len(chunks) - 1)
    return [ref_seconds + allocatable * weight / total_weight for weight in weights]


@dataclass(frozen=True)
class Chunk:
    gen_text: str  # this chunk of the text to speak
    text: str  # what the model reads: spaced reference transcript + gen_text
    frames: int  # requested total mel frames, reference included (before CFM.sample's own bounds)


def plan_chunks(ref_text: str, gen_text: str, *, ref_samples: int, sample_rate: int, ref_samples_24k: int,
                speed: float = 1.0, fix_duration: float | None = None,
                cross_fade_duration: float = CROSS_FADE_SECONDS) -> list[Chunk]:
    """Steps 1-3 of the module docstring plus the frame counts, in upstream's order.

    `ref_samples`/`sample_rate`: the reference as given (for the chunk budget); `ref_samples_24k`: its
    length after `audio.prepare_reference` (for the frame counts). An empty list means nothing to say
    (upstream returns no audio then).
    """
    if not math.isfinite(speed) or speed <= 0:
        raise InputError(f"F5-TTS speed must be a positive number, got {speed}")
    if ref_samples <= 0:
        raise InputError("the F5-TTS reference audio is empty")
    punctuated = punctuate_reference_text(ref_text)
    chunks = chunk_text(gen_text, max_chars_for(punctuated, ref_samples, sample_rate, speed))
    spaced = space_reference_text(punctuated)
    ref_frames = reference_frames(ref_samples_24k)
    planned = []
    durations = allocate_fix_durations(fix_duration, ref_frames, chunks, cross_fade_duration)
    for chunk, seconds in zip(chunks, durations, strict=True):
        if seconds is None:
            frames = estimate_duration(ref_frames, spaced, chunk, speed)
        else:
            frames = fixed_duration_frames(seconds)
        planned.append(Chunk(chunk, model_text(spaced, chunk), frames))
    return planned
