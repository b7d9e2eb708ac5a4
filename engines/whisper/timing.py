"""Word-level timestamps: align each text token to the audio with the decoder's cross-attention.

Computes what openai-whisper 20250625's `whisper/timing.py` computes (MIT), step for step, on every
device the way upstream's CPU path does:

- the window is encoded again and the decoder run once over sot_sequence + <|notimestamps|> + text +
  <|endoftext|> on a fresh cache, both with the handwritten attention (upstream's `disable_sdpa()`),
  keeping each decoder layer's cross-attention scores; the alignment heads' scores are softmaxed over
  the audio, normalised per frame across tokens, median-filtered along time and averaged over the heads;
- dynamic time warping over the negated matrix pairs tokens with encoder frames (20 ms each); a word
  starts where its first token's row is first reached;
- `add_word_timestamps` adds upstream's heuristics: punctuation merged into the neighbouring word,
  overlong words at sentence and segment boundaries shortened, segment bounds reconciled.

Upstream runs its DTW with numba on the CPU and a triton kernel on CUDA, and its CUDA median filter
in triton. Here both are numpy / torch and follow upstream's CPU code exactly (the same float64 cost
accumulation and the same tie-breaking), on any device; upstream's CUDA DTW breaks ties between equal
costs differently, so on CUDA upstream itself can disagree with its own CPU path (and with this one).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch

from .alignment_heads import default_alignment_heads
from .audio import HOP_LENGTH, SAMPLE_RATE, TOKENS_PER_SECOND

__all__ = ["WordTiming", "add_word_timestamps", "backtrace", "dtw", "dtw_cpu", "find_alignment",
           "median_filter", "merge_punctuations"]


# -- median filter -------------------------------------------------------------------------------


def median_filter(x: torch.Tensor, filter_width: int) -> torch.Tensor:
    """The median of each `filter_width` window along the last dimension, with reflected edges.

    As upstream: a last dimension no longer than `filter_width // 2` comes back unchanged (before the
    width is checked); the width must be odd; the median is the middle element of each sorted window.
    """
    half = filter_width // 2
    length = x.shape[-1]
    if length <= half:
        return x
    if not (filter_width > 0 and filter_width % 2 == 1):
        raise ValueError("`filter_width` should be an odd number")
    # Reflect padding (the edge element is not repeated), as F.pad(mode="reflect"), by gathering.
    index = torch.cat([torch.arange(half, 0, -1), torch.arange(length),
                       torch.arange(length - 2, length - 2 - half, -1)]).to(x.device)
    padded = x.index_select(-1, index)
    # the middle element of each sorted window, as upstream's CPU path (also on CUDA, where upstream uses triton)
    return padded.unfold(-1, filter_width, 1).sort()[0][..., half]


# -- dynamic time warping ------------------------------------------------------------------------


def backtrace(trace: np.ndarray) -> np.ndarray:
    """The path (2, L) of [row, column] indices from (0, 0) to the bottom-right corner of a DTW
    trace matrix (0: diagonal step, 1: down, 2: right). Writes the first row and column of `trace`."""
    trace[0, :] = 2
    trace[:, 0] = 1
    rows = trace.tolist()
    i, j = trace.shape[0] - 1, trace.shape[1] - 1
    path = []
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        step = rows[i][j]
        if step == 0:
            i, j = i - 1, j - 1
        elif step == 1:
            i -= 1
        elif step == 2:
            j -= 1
        else:
            raise ValueError("Unexpected trace[i, j]")
    return np.array(path, dtype=np.int64).reshape(-1, 2)[::-1, :].T


def dtw_cpu(x: np.ndarray) -> np.ndarray:
    """Upstream's DTW: cumulative cost in float64, each step from the diagonal (0), above (1) or left
    (2) neighbour; the diagonal or the upper one only when strictly below both others, else the left.

    (Upstream allocates its cost matrix as `np.ones(..., dtype=np.float32) * np.inf`, which numpy
    keeps float32 but numba, which compiles it, types as float64: the numba result is the reference.)

    Cells on one anti-diagonal i + j = d depend only on the two previous anti-diagonals, so each is
    computed at once. The cost is stored skewed, `cost_d[d, i] = cost[i, d - i]`, so those reads are
    slices."""
    n, m = x.shape
    diagonals = n + m + 1
    i_grid = np.arange(n + 1)[None, :]
    d_grid = np.arange(diagonals)[:, None]
    j_grid = d_grid - i_grid
    inside = (j_grid >= 1) & (j_grid <= m) & (i_grid >= 1)
    skew_x = np.zeros((diagonals, n + 1), dtype=x.dtype)
    skew_x[inside] = x[np.broadcast_to(i_grid, inside.shape)[inside] - 1, j_grid[inside] - 1]

    cost = np.full((diagonals, n + 1), np.inf, dtype=np.float64)
    step = np.full((diagonals, n + 1), -1, dtype=np.int8)
    cost[0, 0] = 0
    for d in range(2, diagonals):
        lo, hi = max(1, d - m), min(n, d - 1)
        if lo > hi:
            continue
        c0 = cost[d - 2, lo - 1: hi]  # cost[i - 1, j - 1]
        c1 = cost[d - 1, lo - 1: hi]  # cost[i - 1, j]
        c2 = cost[d - 1, lo: hi + 1]  # cost[i, j - 1]
        take0 = (c0 < c1) & (c0 < c2)
        take1 = ~take0 & (c1 < c0) & (c1 < c2)
        best = np.where(take0, c0, np.where(take1, c1, c2))
        cost[d, lo: hi + 1] = skew_x[d, lo: hi + 1] + best
        step[d, lo: hi + 1] = np.where(take0, 0, np.where(take1, 1, 2))

    trace = step[np.arange(n + 1)[:, None] + np.arange(m + 1)[None, :], np.arange(n + 1)[:, None]]
    return backtrace(trace)


def dtw(x: torch.Tensor) -> np.ndarray:
    """The DTW path (2, L) through the cost matrix `x` (N, M), in float64 on the CPU as upstream's CPU path."""
    return dtw_cpu(x.double().cpu().numpy())


# -- alignment -----------------------------------------------------------------------------------


@dataclass
class WordTiming:
    word: str
    tokens: list[int]
    start: float
    end: float
    probability: float


def _head_indices(heads: torch.Tensor | None, model) -> list[tuple[int, int]]:
    """(layer, head) pairs in row-major order, from a sparse or dense bool mask."""
    if heads is None:
        heads = default_alignment_heads(model)
    if heads.is_sparse:
        pairs = heads.coalesce().indices().T
    else:
        pairs = heads.nonzero()
    return [(int(layer), int(head)) for layer, head in pairs.tolist()]


def find_alignment(model, tokenizer, text_tokens: list[int], mel: torch.Tensor, num_frames: int, *,
                   alignment_heads: torch.Tensor | None, medfilt_width: int = 7,
                   qk_scale: float = 1.0) -> list[WordTiming]:
    """Words of `text_tokens` with start/end times (seconds from the start of `mel`) and the mean
    probability of their tokens.

    mel: (n_mels, 3000) of the 30 s window; num_frames: its mel frames that hold audio;
    alignment_heads: the mask from `alignment_heads.alignment_heads` (None: upstream's default).
    """
    if len(text_tokens) == 0:
        return []

    device = model.decoder.token_embedding.weight.device
    sot = len(tokenizer.sot_sequence)
    tokens = torch.tensor([*tokenizer.sot_sequence, tokenizer.no_timestamps, *text_tokens, tokenizer.eot],
                          device=device)
    scores: list[torch.Tensor] = []
    with torch.no_grad():
        audio = model.encoder(mel.unsqueeze(0), handwritten=True)
        logits = model.decoder(tokens.unsqueeze(0), audio, model.decoder.new_cache(1), alignment=scores)[0]
        probs = logits[sot:, : tokenizer.eot].softmax(dim=-1)
        text_token_probs = probs[np.arange(len(text_tokens)), text_tokens].tolist()

        # (heads, tokens, frames) -> (tokens, frames)
        weights = torch.stack([scores[layer][0, head] for layer, head in _head_indices(alignment_heads, model)])
        weights = weights[:, :, : num_frames // 2]
        weights = (weights * qk_scale).softmax(dim=-1)
        std, mean = torch.std_mean(weights, dim=-2, keepdim=True, correction=0)
        weights = median_filter((weights - mean) / std, medfilt_width)
        matrix = weights.mean(axis=0)[sot:-1]
    token_rows, frames = dtw(-matrix)

    words, word_tokens = tokenizer.split_to_word_tokens([*text_tokens, tokenizer.eot])
    if len(word_tokens) <= 1:
        return []  # only <|endoftext|>: no word boundaries to index with
    boundaries = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))

    # the frame at which the path first reaches each token's row
    first_step = np.pad(np.diff(token_rows), (1, 0), constant_values=1).astype(bool)
    row_times = frames[first_step] / TOKENS_PER_SECOND
    starts = row_times[boundaries[:-1]]
    ends = row_times[boundaries[1:]]
    probabilities = [np.mean(text_token_probs[a:b]) for a, b in zip(boundaries[:-1], boundaries[1:], strict=True)]
    # zip stops before the trailing <|endoftext|> "word"
    return [WordTiming(word, toks, start, end, probability)
            for word, toks, start, end, probability in zip(words, word_tokens, starts, ends, probabilities,
                                                                strict=False)]


def merge_punctuations(alignment: list[WordTiming], prepended: str, appended: str) -> None:
    """In place: an opening mark (" (" etc.) joins the word after it, a closing one the word before;
    the mark's own entry is left with an empty word and no tokens."""
    # right to left: a space-led opening mark moves into the nearest following word that kept its text
    target = len(alignment) - 1
    for index in range(len(alignment) - 2, -1, -1):
        mark, word = alignment[index], alignment[target]
        if mark.word.startswith(" ") and mark.word.strip() in prepended:
            word.word = mark.word + word.word
            word.tokens = mark.tokens + word.tokens
            mark.word, mark.tokens = "", []
        else:
            target = index

    # left to right: a closing mark joins the nearest preceding word that does not end in a space
    target = 0
    for index in range(1, len(alignment)):
        word, mark = alignment[target], alignment[index]
        if not word.word.endswith(" ") and mark.word in appended:
            word.word = word.word + mark.word
            word.tokens = word.tokens + mark.tokens
            mark.word, mark.tokens = "", []
        else:
            target = index


def add_word_timestamps(*, segments: list[dict], model, tokenizer, mel: torch.Tensor, num_frames: int,
                        prepend_punctuations: str = "\"'“¿([{-",
                        append_punctuations: str = "\"'.。,，!！?？:：”)]}、",
                        last_speech_timestamp: float, alignment_heads: torch.Tensor | None, **kwargs) -> None:
    """Give each segment (dicts with "seek", "start", "end", "tokens") a "words" list of
    {word, start, end, probability}, aligning all segments' text tokens together, and adjust the
    segments' "start"/"end" to their words, as upstream. `kwargs` go to `find_alignment`."""
    if len(segments) == 0:
        return

    per_segment = [[token for token in segment["tokens"] if token < tokenizer.eot] for segment in segments]
    text_tokens = list(itertools.chain.from_iterable(per_segment))
    alignment = find_alignment(model, tokenizer, text_tokens, mel, num_frames, alignment_heads=alignment_heads,
                               **kwargs)

    durations = np.array([timing.end - timing.start for timing in alignment])
    durations = durations[durations.nonzero()]
    median_duration = np.median(durations) if len(durations) > 0 else 0.0
    median_duration = min(0.7, float(median_duration))
    max_duration = median_duration * 2

    # Words next to a sentence end are kept within twice the median word duration (upstream's stopgap
    # until a VAD-based segmentation).
    if len(durations) > 0:
        sentence_end_marks = ".。!！?？"
        for index in range(1, len(alignment)):
            timing = alignment[index]
            if timing.end - timing.start > max_duration:
                if timing.word in sentence_end_marks:
                    timing.end = timing.start + max_duration
                elif alignment[index - 1].word in sentence_end_marks:
                    timing.start = timing.end - max_duration

    merge_punctuations(alignment, prepend_punctuations, append_punctuations)

    time_offset = segments[0]["seek"] * HOP_LENGTH / SAMPLE_RATE
    word_index = 0
    for segment, segment_tokens in zip(segments, per_segment, strict=True):
        consumed = 0
        words = []
        while word_index < len(alignment) and consumed < len(segment_tokens):
            timing = alignment[word_index]
            if timing.word:
                words.append(dict(word=timing.word, start=round(time_offset + timing.start, 2),
                                  end=round(time_offset + timing.end, 2), probability=timing.probability))
            consumed += len(timing.tokens)
            word_index += 1

        if len(words) > 0:
            first, last = words[0], words[-1]
            # After a pause, the first word (and the second) are kept within twice the median duration.
            if first["end"] - last_speech_timestamp > median_duration * 4 and (
                    first["end"] - first["start"] > max_duration
                    or (len(words) > 1 and words[1]["end"] - first["start"] > max_duration * 2)):
                if len(words) > 1 and words[1]["end"] - words[1]["start"] > max_duration:
                    boundary = max(words[1]["end"] / 2, words[1]["end"] - max_duration)
                    first["end"] = words[1]["start"] = boundary
                first["start"] = max(0, first["end"] - max_duration)

            # A first word starting well before the segment starts at the segment instead, and the
            # other way round the segment starts at its first word.
            if segment["start"] < first["end"] and segment["start"] - 0.5 > first["start"]:
                first["start"] = max(0, min(first["end"] - median_duration, segment["start"]))
            else:
                segment["start"] = first["start"]

            # the same for the last word and the segment's end
            if segment["end"] > last["start"] and segment["end"] + 0.5 < last["end"]:
                last["end"] = max(last["start"] + median_duration, segment["end"])
            else:
                segment["end"] = last["end"]

            last_speech_timestamp = segment["end"]

        segment["words"] = words
