"""Transcribing audio of any length: exact to openai-whisper 20250625's `whisper/transcribe.py` (MIT).

The audio's log-mel spectrogram (with 30 s of silence appended) is read in 30-second windows. Each
window is decoded (with temperature fallback when the text is too repetitive or too improbable),
split into segments at its timestamp tokens, optionally given word timestamps, and the window start
("seek") moves on to where the last complete segment ended. The options, their defaults, the order
of every decode (so every draw from the generator) and the result dict are upstream's:
`{"text", "segments", "language"}`, each segment `{id, seek, start, end, text, tokens, temperature,
avg_logprob, compression_ratio, no_speech_prob}` plus `words` with word timestamps (and an empty
`words` on a cleared segment, as upstream).

Where we differ from upstream's code, the results do not:

- `audio` is a 16 kHz mono waveform (tensor or numpy array); there is no ffmpeg, so a file path is
  an `InputError`.
- Sampling draws from `generator` (a `torch.Generator`; None: the default one, as upstream); a
  generator seeded with N gives what upstream gives after `torch.manual_seed(N)`.
- `fp16` is accepted and passed on but casts nothing: the network runs in the dtype it was loaded
  in, and each window's mel is cast to it (upstream's `fp16=False` on a float32 model is a float32
  model here). Upstream's CPU/fp16 warnings are therefore not raised.
- Word timestamps read the cross-attention heads `alignment_heads` (a mask from
  `alignment_heads.alignment_heads`; None: upstream's default, the last half of the decoder layers),
  which upstream keeps on its model.
- Instead of a tqdm bar, `progress(done_frames, total_frames)` is called after every window (also
  after windows skipped as silence or hallucination, where upstream's bar does not move):
  done_frames is how far the window start has moved, at most total_frames, the mel frames of the
  audio. A host can raise from it to stop between windows.
- The one difference in results: a clip (`clip_timestamps`) that ends after the audio ends with the
  audio, where upstream decodes windows of zero or negative length and may never finish. Clips
  within the audio are upstream's.
- Bad options raise `InputError` (a ValueError) where upstream fails with an assertion or a bare
  ValueError.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import numpy as np
import torch

from mizuoto.core.errors import InputError

from .audio import FRAMES_PER_SECOND, HOP_LENGTH, N_FRAMES, N_SAMPLES, SAMPLE_RATE, log_mel_spectrogram, pad_or_trim
from .decoding import DecodingOptions, DecodingResult, decode, detect_language
from .languages import LANGUAGES
from .timing import add_word_timestamps
from .tokenizer import Tokenizer, get_tokenizer

__all__ = ["APPEND_PUNCTUATIONS", "PREPEND_PUNCTUATIONS", "format_timestamp", "transcribe"]

PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
# What the hallucination check leaves out of a segment's words: upstream's fixed string (the default
# marks, whatever the caller merges), tested with `in`, so any substring of it counts.
_PUNCTUATION = PREPEND_PUNCTUATIONS + APPEND_PUNCTUATIONS


def format_timestamp(seconds: float, always_include_hours: bool = False, decimal_marker: str = ".") -> str:
    """[HH:]MM:SS.mmm of a non-negative time in seconds, rounded to the millisecond (upstream's utils)."""
    if seconds < 0:
        raise InputError(f"a timestamp must not be negative, got {seconds}")
    total_ms = round(seconds * 1000.0)
    hours, rest = divmod(total_ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, ms = divmod(rest, 1_000)
    hours_part = f"{hours:02d}:" if always_include_hours or hours > 0 else ""
    return f"{hours_part}{minutes:02d}:{secs:02d}{decimal_marker}{ms:03d}"


def _printable(text: str) -> str:
    """`text` with characters the interpreter's default encoding cannot hold replaced by '?'."""
    encoding = sys.getdefaultencoding()
    if encoding == "utf-8":
        return text
    return text.encode(encoding, errors="replace").decode(encoding)


def _last_end(segments: list[dict]) -> float | None:
    """The end of the last word of the last segment that has words, else the last segment's end
    (None without segments)."""
    for segment in reversed(segments):
        if segment["words"]:
            return segment["words"][-1]["end"]
    return segments[-1]["end"] if segments else None


def _clips(clip_timestamps: str | Sequence[float], content_frames: int) -> list[tuple[int, int]]:
    """(start, end) mel-frame pairs to transcribe; a missing last end is the end of the audio."""
    if isinstance(clip_timestamps, str):
        parts = clip_timestamps.split(",") if clip_timestamps else []
        try:
            seconds = [float(part) for part in parts]
        except ValueError:
            raise InputError(f"clip_timestamps must be comma-separated seconds (start,end,start,...), "
                             f"got {clip_timestamps!r}") from None
    else:
        seconds = list(clip_timestamps)
    points = [round(s * FRAMES_PER_SECOND) for s in seconds] or [0]
    if len(points) % 2:
        points.append(content_frames)
    # Ends past the audio are cut to it: upstream decodes its padding there with windows of zero or
    # negative length, whose seek can stall or move backwards (it may never finish).
    return [(start, min(end, content_frames)) for start, end in zip(points[0::2], points[1::2], strict=True)]


# -- hallucination heuristics (word timestamps) ----------------------------------------------------


def _word_anomaly(word: dict) -> float:
    """How unlike speech a word is: improbable, very short or very long."""
    duration = word["end"] - word["start"]
    score = 0.0
    if word.get("probability", 0.0) < 0.15:
        score += 1.0
    if duration < 0.133:
        score += (0.133 - duration) * 15
    if duration > 2.0:
        score += duration - 2.0
    return score


def _is_anomalous(segment: dict | None) -> bool:
    """Whether the first (up to 8) non-punctuation words of a segment look hallucinated."""
    if segment is None or not segment["words"]:
        return False
    words = [w for w in segment["words"] if w["word"] not in _PUNCTUATION][:8]
    score = sum(_word_anomaly(w) for w in words)
    return score >= 3 or score + 0.01 >= len(words)


def _first_with_words(segments: list[dict]) -> dict | None:
    return next((segment for segment in segments if segment["words"]), None)


# -- one run ---------------------------------------------------------------------------------------


class _Run:
    """The state of one transcription: the mel, the options, and what the windows produced so far."""

    def __init__(self, model, mel: torch.Tensor, tokenizer: Tokenizer, decode_options: dict, *,
                 temperatures: Sequence[float], compression_ratio_threshold, logprob_threshold,
                 no_speech_threshold, condition_on_previous_text: bool, initial_prompt_tokens: list[int],
                 carry_initial_prompt: bool, generator: torch.Generator | None, steps=None, step_scope=None):
        self.model = model
        self.steps, self.step_scope = steps, step_scope
        self.mel = mel
        self.tokenizer = tokenizer
        self.decode_options = decode_options
        self.temperatures = temperatures
        self.compression_ratio_threshold = compression_ratio_threshold
        self.logprob_threshold = logprob_threshold
        self.no_speech_threshold = no_speech_threshold
        self.condition_on_previous_text = condition_on_previous_text
        self.carry_initial_prompt = carry_initial_prompt
        self.generator = generator
        weight = model.decoder.token_embedding.weight
        self.device, self.dtype = weight.device, weight.dtype

        self.content_frames = mel.shape[-1] - N_FRAMES
        self.content_duration = float(self.content_frames * HOP_LENGTH / SAMPLE_RATE)
        if N_FRAMES % model.dims.n_audio_ctx:
            raise InputError(f"Whisper's transcribe needs n_audio_ctx to divide {N_FRAMES} mel frames; this "
                             f"checkpoint has n_audio_ctx={model.dims.n_audio_ctx}")
        self.input_stride = N_FRAMES // model.dims.n_audio_ctx  # mel frames per encoder position: 2
        self.time_precision = self.input_stride * HOP_LENGTH / SAMPLE_RATE  # seconds per position: 0.02

        self.initial_prompt_tokens = initial_prompt_tokens
        self.all_tokens: list[int] = list(initial_prompt_tokens)
        self.all_segments: list[dict] = []
        self.prompt_reset_since = 0
        self.remaining_prompt_length = model.dims.n_text_ctx // 2 - 1 - len(initial_prompt_tokens)
        self.last_speech_timestamp = 0.0

    # -- decoding one window

    def prompt(self) -> list[int]:
        """The previous-text prompt of the next window."""
        if self.carry_initial_prompt:
            skipped = max(len(self.initial_prompt_tokens), self.prompt_reset_since)
            recent = self.all_tokens[skipped:][-self.remaining_prompt_length:]
            return self.initial_prompt_tokens + recent
        return self.all_tokens[self.prompt_reset_since:]

    def decode_with_fallback(self, mel_segment: torch.Tensor) -> DecodingResult:
        """Decode at each temperature in turn until the result is neither too repetitive nor too
        improbable (an improbable one that is probably silence is accepted too)."""
        result = None
        for t in self.temperatures:
            kwargs = dict(self.decode_options)
            if t > 0:  # sampling: no beams
                kwargs.pop("beam_size", None)
                kwargs.pop("patience", None)
            else:  # greedy or beam search: one candidate
                kwargs.pop("best_of", None)
            result = decode(self.model, mel_segment, DecodingOptions(**kwargs, temperature=t),
                            generator=self.generator, steps=self.steps, step_scope=self.step_scope)
            if not self.needs_fallback(result):
                break
        return result

    def needs_fallback(self, result: DecodingResult) -> bool:
        too_repetitive = (self.compression_ratio_threshold is not None
                          and result.compression_ratio > self.compression_ratio_threshold)
        improbable = self.logprob_threshold is not None and result.avg_logprob < self.logprob_threshold
        silent = (self.no_speech_threshold is not None and result.no_speech_prob > self.no_speech_threshold
                  and improbable)
        return (too_repetitive or improbable) and not silent

    def is_silence(self, result: DecodingResult) -> bool:
        """No speech: a likely no-speech token, unless the text is probable enough."""
        if self.no_speech_threshold is None or not result.no_speech_prob > self.no_speech_threshold:
            return False
        return not (self.logprob_threshold is not None and result.avg_logprob > self.logprob_threshold)

    # -- segments of one window

    def segment(self, seek: int, start: float, end: float, tokens: list[int], result: DecodingResult) -> dict:
        text_tokens = [token for token in tokens if token < self.tokenizer.eot]
        return {
            "seek": seek,
            "start": start,
            "end": end,
            "text": self.tokenizer.decode(text_tokens),
            "tokens": list(tokens),
            "temperature": result.temperature,
            "avg_logprob": result.avg_logprob,
            "compression_ratio": result.compression_ratio,
            "no_speech_prob": result.no_speech_prob,
        }

    def split(self, result: DecodingResult, seek: int, segment_size: int) -> tuple[list[dict], int, bool]:
        """The window's segments, the next seek, and whether the tokens end in a lone timestamp.

        Each pair of adjacent timestamp tokens closes a segment. With such pairs, an unfinished
        last segment is dropped and the next window starts at its opening timestamp (a lone final
        timestamp instead means nothing follows, and the next window starts after this one).
        Without pairs the whole window is one segment, ending at its last timestamp if any.
        """
        tokens = list(result.tokens)
        begin = self.tokenizer.timestamp_begin
        time_offset = float(seek * HOP_LENGTH / SAMPLE_RATE)
        is_timestamp = [token >= begin for token in tokens]
        single_timestamp_ending = is_timestamp[-2:] == [False, True]
        cuts = [i + 1 for i in range(len(tokens) - 1) if is_timestamp[i] and is_timestamp[i + 1]]

        segments = []
        if cuts:
            if single_timestamp_ending:
                cuts.append(len(tokens))
            last_cut = 0
            for cut in cuts:
                piece = tokens[last_cut:cut]
                segments.append(self.segment(seek, time_offset + (piece[0] - begin) * self.time_precision,
                                             time_offset + (piece[-1] - begin) * self.time_precision, piece,
                                             result))
                last_cut = cut
            if single_timestamp_ending:
                next_seek = seek + segment_size
            else:
                next_seek = seek + (tokens[last_cut - 1] - begin) * self.input_stride
        else:
            duration = segment_size * HOP_LENGTH / SAMPLE_RATE
            timestamps = [token for token, flag in zip(tokens, is_timestamp, strict=True) if flag]
            if timestamps and timestamps[-1] != begin:
                duration = (timestamps[-1] - begin) * self.time_precision
            segments.append(self.segment(seek, time_offset, time_offset + duration, tokens, result))
            next_seek = seek + segment_size
        return segments, next_seek, single_timestamp_ending

    def skip_hallucinations(self, segments: list[dict], seek: int, previous_seek: int, segment_size: int,
                            single_timestamp_ending: bool, threshold: float) -> tuple[int, bool]:
        """Move `seek` past silences around likely hallucinations; drop (in place) the segments from a
        hallucination on. Returns (seek, whether the window is discarded altogether)."""
        time_offset = float(previous_seek * HOP_LENGTH / SAMPLE_RATE)
        window_end_time = float((previous_seek + N_FRAMES) * HOP_LENGTH / SAMPLE_RATE)
        segment_duration = segment_size * HOP_LENGTH / SAMPLE_RATE

        if not single_timestamp_ending:
            last_word_end = _last_end(segments)
            if last_word_end is not None and last_word_end > time_offset:
                if window_end_time - last_word_end > threshold:
                    seek = round(last_word_end * FRAMES_PER_SECOND)
                else:
                    seek = previous_seek + segment_size

        # a possibly hallucinated first segment after a long silence: start the next window at it
        first = _first_with_words(segments)
        if first is not None and _is_anomalous(first):
            gap = first["start"] - time_offset
            if gap > threshold:
                return previous_seek + round(gap * FRAMES_PER_SECOND), True

        # a possible hallucination with silence (or more hallucination) on both sides: drop it and what
        # follows, and start the next window at it
        previous_end = self.last_speech_timestamp
        for index, segment in enumerate(segments):
            if not segment["words"]:
                continue
            if _is_anomalous(segment):
                following = _first_with_words(segments[index + 1:])
                next_start = following["words"][0]["start"] if following is not None else time_offset + segment_duration
                silence_before = (segment["start"] - previous_end > threshold or segment["start"] < threshold
                                  or segment["start"] - time_offset < 2.0)
                silence_after = (next_start - segment["end"] > threshold or _is_anomalous(following)
                                 or window_end_time - segment["end"] < 2.0)
                if silence_before and silence_after:
                    seek = round(max(time_offset + 1, segment["start"]) * FRAMES_PER_SECOND)
                    if self.content_duration - segment["end"] < threshold:
                        seek = self.content_frames
                    del segments[index:]
                    break
            previous_end = segment["end"]
        return seek, False

    def keep(self, segments: list[dict], result: DecodingResult) -> None:
        """Append the window's segments (a zero-length or blank one emptied) and its tokens."""
        for segment in segments:
            if segment["start"] == segment["end"] or segment["text"].strip() == "":
                segment["text"] = ""
                segment["tokens"] = []
                segment["words"] = []
        first_id = len(self.all_segments)
        self.all_segments.extend({"id": first_id + i, **segment} for i, segment in enumerate(segments))
        self.all_tokens.extend(token for segment in segments for token in segment["tokens"])
        if not self.condition_on_previous_text or result.temperature > 0.5:
            # a window decoded hot is no prompt for the next one
            self.prompt_reset_since = len(self.all_tokens)

    def window(self, seek: int, clip_end: int) -> tuple[int, torch.Tensor]:
        """(frames of audio in the window, its (n_mels, 3000) mel on the model's device and dtype)."""
        size = min(N_FRAMES, self.content_frames - seek, clip_end - seek)
        mel_segment = pad_or_trim(self.mel[:, seek: seek + size], N_FRAMES)
        return size, mel_segment.to(device=self.device, dtype=self.dtype)


def _progress_to(progress: Callable[[int, int], None] | None, seek: int, total: int) -> None:
    if progress is not None:
        progress(min(seek, total), total)


def transcribe(
    model,
    audio: torch.Tensor | np.ndarray,
    *,
    verbose: bool | None = None,
    temperature: float | Sequence[float] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
    compression_ratio_threshold: float | None = 2.4,
    logprob_threshold: float | None = -1.0,
    no_speech_threshold: float | None = 0.6,
    condition_on_previous_text: bool = True,
    initial_prompt: str | None = None,
    carry_initial_prompt: bool = False,
    word_timestamps: bool = False,
    prepend_punctuations: str = PREPEND_PUNCTUATIONS,
    append_punctuations: str = APPEND_PUNCTUATIONS,
    clip_timestamps: str | Sequence[float] = "0",
    hallucination_silence_threshold: float | None = None,
    generator: torch.Generator | None = None,
    alignment_heads: torch.Tensor | None = None,
    progress: Callable[[int, int], None] | None = None,
    steps=None,
    step_scope: Callable[[], AbstractContextManager] | None = None,
    on_language: Callable[[dict[str, float]], None] | None = None,
    **decode_options,
) -> dict:
    """Transcribe (or translate) 16 kHz mono audio with a Whisper model, as openai-whisper does.

    model: a `model.Whisper`. audio: float waveform at 16 kHz, shape (samples,), tensor or numpy.
    verbose: True prints each segment, False only the detected language, None nothing.
    temperature: one temperature or the fallback sequence tried in order while a decode is too
        repetitive (gzip compression ratio above `compression_ratio_threshold`) or too improbable
        (average log probability below `logprob_threshold`), unless it is silence (no-speech
        probability above `no_speech_threshold` and improbable); such silent windows are skipped.
    condition_on_previous_text: prompt each window with the text so far (reset after a window
        decoded above temperature 0.5).
    initial_prompt: text that prompts the first window; with `carry_initial_prompt`, every window
        (the text so far is cut on the left to make room).
    word_timestamps: add each segment's "words" (start, end, probability) from cross-attention and
        DTW, and start the next window after the last word; punctuation marks in
        `prepend_punctuations` / `append_punctuations` join the next / previous word.
    clip_timestamps: "start,end,start,..." seconds (or a list) of the parts to transcribe; a missing
        last end is the end of the audio.
    hallucination_silence_threshold: with word timestamps, skip silences longer than this (seconds)
        around likely hallucinations.
    generator: the draws when sampling (None: torch's default generator).
    alignment_heads: the decoder heads word timestamps read (None: upstream's default heads).
    progress: `progress(done_frames, total_frames)` after each window.
    steps: the decoder's one-token step kept with the model (`steps.DecoderSteps`, with its CUDA
        graphs); None runs the step eagerly.
    step_scope: entered around every decoder call (a host binds its attention policy and checks for
        cancellation there).
    on_language: called with the language probabilities when the language is detected (upstream's result
        has no place for them).
    decode_options: `DecodingOptions` fields (language, task, beam_size, best_of, patience,
        length_penalty, suppress_tokens, ...); language None detects it on the first 30 s.

    Returns {"text": all text, "segments": [...], "language": the language given or detected}.
    """
    if isinstance(audio, (str, os.PathLike)):
        raise InputError("Whisper's transcribe takes a 16 kHz mono waveform (tensor or numpy array), not a file "
                         "path: read the file and resample it to 16 kHz first")
    if len(getattr(audio, "shape", ())) != 1:
        raise InputError(f"Whisper's transcribe takes mono audio of shape (samples,), got shape "
                         f"{tuple(getattr(audio, 'shape', ()))}")
    temperatures = [temperature] if isinstance(temperature, (int, float)) else list(temperature)
    if not temperatures:
        raise InputError("temperature must be a number or a non-empty sequence of numbers")

    # the audio with 30 s of silence after it, so every window can be cut from it
    mel = log_mel_spectrogram(audio, model.dims.n_mels, padding=N_SAMPLES)
    weight = model.decoder.token_embedding.weight

    if decode_options.get("language") is None:
        if not model.is_multilingual:
            decode_options["language"] = "en"
        else:
            if verbose:
                print("Detecting language using up to the first 30 seconds. Use `--language` to specify the language")
            first = pad_or_trim(mel, N_FRAMES).to(device=weight.device, dtype=weight.dtype)
            _, probs = detect_language(model, first)
            decode_options["language"] = max(probs, key=probs.get)
            if on_language is not None:
                on_language(probs)
            if verbose is not None:
                print(f"Detected language: {LANGUAGES[decode_options['language']].title()}")

    language: str = decode_options["language"]
    task: str = decode_options.get("task", "transcribe")
    tokenizer = get_tokenizer(model.is_multilingual, num_languages=model.num_languages, language=language, task=task)
    if word_timestamps and task == "translate":
        warnings.warn("Word-level timestamps on translations may not be reliable.", stacklevel=2)

    initial_prompt_tokens = tokenizer.encode(" " + initial_prompt.strip()) if initial_prompt is not None else []
    run = _Run(model, mel, tokenizer, decode_options, temperatures=temperatures,
               compression_ratio_threshold=compression_ratio_threshold, logprob_threshold=logprob_threshold,
               no_speech_threshold=no_speech_threshold, condition_on_previous_text=condition_on_previous_text,
               initial_prompt_tokens=initial_prompt_tokens, carry_initial_prompt=carry_initial_prompt,
               generator=generator, steps=steps, step_scope=step_scope)
    total = run.content_frames

    for clip_start, clip_end in _clips(clip_timestamps, total):
        seek = clip_start
        while True:
            seek = max(seek, clip_start)
            if seek >= clip_end:
                break
            previous_seek = seek
            time_offset = float(seek * HOP_LENGTH / SAMPLE_RATE)
            segment_size, mel_segment = run.window(seek, clip_end)

            decode_options["prompt"] = run.prompt()
            result = run.decode_with_fallback(mel_segment)
            if run.is_silence(result):
                seek += segment_size  # on to the next window
                _progress_to(progress, seek, total)
                continue

            segments, seek, single_timestamp_ending = run.split(result, seek, segment_size)

            if word_timestamps:
                add_word_timestamps(segments=segments, model=model, tokenizer=tokenizer, mel=mel_segment,
                                    num_frames=segment_size, prepend_punctuations=prepend_punctuations,
                                    append_punctuations=append_punctuations,
                                    last_speech_timestamp=run.last_speech_timestamp, alignment_heads=alignment_heads)
                if not single_timestamp_ending:
                    last_word_end = _last_end(segments)
                    if last_word_end is not None and last_word_end > time_offset:
                        seek = round(last_word_end * FRAMES_PER_SECOND)

                if hallucination_silence_threshold is not None:
                    seek, discard = run.skip_hallucinations(segments, seek, previous_seek, segment_size,
                                                            single_timestamp_ending, hallucination_silence_threshold)
                    if discard:
                        _progress_to(progress, seek, total)
                        continue

                last_word_end = _last_end(segments)
                if last_word_end is not None:
                    run.last_speech_timestamp = last_word_end

            if verbose:
                for segment in segments:
                    line = f"[{format_timestamp(segment['start'])} --> {format_timestamp(segment['end'])}] "
                    print(_printable(line + segment["text"]))

            run.keep(segments, result)
            _progress_to(progress, seek, total)

    return {
        "text": tokenizer.decode(run.all_tokens[len(initial_prompt_tokens):]),
        "segments": run.all_segments,
        "language": language,
    }
