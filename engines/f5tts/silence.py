"""F5-TTS's reference clipping and trimming, natively: what `preprocess_ref_audio_text` does with pydub.

f5-tts 1.1.22 prepares the reference *file* with pydub 0.25.1 before anything else, in milliseconds:

1. `split_on_silence` at silences of >= 1000 ms under -50 dBFS (1000 ms kept around each piece, seek step
   10 ms); pieces are appended until the next one would pass 12 s once 6 s are collected;
2. if that is still over 12 s, the same at silences of >= 100 ms under -40 dBFS;
3. if still over 12 s, a hard cut at 12000 ms;
4. leading and trailing 10 ms chunks under -42 dBFS trimmed, then 50 ms of silence appended;
5. the result written to a WAV (same rate, channels and sample width) that the model then loads.

This module redoes it on integer PCM, with numpy only (no pydub, no `audioop`, which Python 3.13
removed), and gives the samples that WAV holds. The pydub details that decide the exact samples:

- lengths are `round(1000 * frames / rate)` ms (Python's half-to-even) and a slice [a, b) ms covers frames
  int(a * (rate / 1000.0)) to int(b * (rate / 1000.0)), both ends first capped at the length in ms; as
  that rounding can put the end past the data, a non-empty slice is padded with zero frames (at most
  0.5 ms) and counts them in its RMS;
- RMS is `audioop.rms`: over all interleaved samples of all channels, summed in double in file order,
  sqrt(sum / count) truncated to an integer; dBFS is 20 * log10(rms / 2 ** (bits - 1)), -inf for 0;
- appending goes through pydub's `_sync`: the empty start and the 50 ms silence are pydub's `silent`
  segments, mono 16-bit at 11025 Hz, so each appended piece takes the larger rate: a reference below
  11025 Hz is resampled to 11025 Hz piece by piece with `audioop.ratecv` (reproduced by `_ratecv`), and
  the 50 ms pad becomes however many zero frames ratecv makes of 551 frames at the output rate;
- channels are kept (the model's frontend averages them later); silence is judged on all of them at once.

When no chunk of the (clipped) audio reaches -42 dBFS upstream trims everything, keeping at most a few
frames that length rounding leaves, or, when step 1 found nothing but silence, returns the pad alone
(mono, 11025 Hz). `preprocess_reference` reproduces that; `trim_reference`, the engine's entry, raises
`InputError` instead, since such a reference carries no voice.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from mizuoto.core.errors import InputError

CLIP_MS = 12000  # pieces are collected up to this length ...
ENOUGH_MS = 6000  # ... and the limit applies only once this much is collected
EDGE_DB = -42.0  # remove_silence_edges' threshold
EDGE_CHUNK_MS = 10
PAD_MS = 50
SILENT_RATE = 11025  # pydub's AudioSegment.silent default rate
# (min_silence_len ms, silence_thresh dBFS) of the two split passes; keep_silence and seek_step are shared.
PASSES = ((1000, -50.0), (100, -40.0))
KEEP_MS = 1000
SEEK_MS = 10

# Beyond this many samples a window's double sum of int16 squares could round, so prefix sums stop being exact.
_EXACT_INT16_SAMPLES = 2 ** 23


# --- pydub's arithmetic ------------------------------------------------------------------------------


def length_ms(frames: int, rate: int) -> int:
    """pydub's len(segment): the duration in ms, rounded half to even."""
    return round(1000 * (frames / rate))


def frame_at(ms, rate: int):
    """The frame where millisecond `ms` starts in a pydub slice (ints or an int array)."""
    if isinstance(ms, np.ndarray):
        return (ms * (rate / 1000.0)).astype(np.int64)  # the same IEEE product, truncated like int()
    return int(ms * (rate / 1000.0))


def max_amplitude(dtype) -> float:
    """pydub's max_possible_amplitude: 2 ** bits / 2, a float."""
    return (2 ** (np.dtype(dtype).itemsize * 8)) / 2


def db_to_float(db: float) -> float:
    """pydub.utils.db_to_float (amplitude)."""
    return 10 ** (float(db) / 20)


def dbfs(rms: int, dtype) -> float:
    """pydub's dBFS for a segment of that RMS and sample type."""
    ratio = float(rms / max_amplitude(dtype))
    return -float("inf") if ratio == 0 else 20 * math.log(ratio, 10)


def rms(samples: np.ndarray) -> int:
    """`audioop.rms` of these samples, taken in the order given (interleave frames before calling)."""
    flat = np.asarray(samples).ravel().astype(np.float64)
    if flat.size == 0:
        return 0
    # audioop sums val * val in double one sample after another; cumsum keeps that order (sum() is pairwise).
    return int(math.sqrt(float(np.cumsum(flat * flat)[-1]) / flat.size))


def _window_rms(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """audioop.rms of the pydub slices data[starts:ends] (frames, with pydub's zero padding past the end).

    `data` is (frames, channels). A slice that starts inside the data and ends past it is padded with zero
    frames, which count in the mean; one that starts at or past the end is empty (pydub pads only from a
    non-empty slice), RMS 0.
    """
    total, channels = data.shape
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    real_ends = np.minimum(ends, total)
    counts = np.where(starts < real_ends, ends - starts, 0) * channels
    out = np.zeros(len(starts), dtype=np.int64)
    if data.dtype == np.int16 and (counts.max(initial=0) < _EXACT_INT16_SAMPLES):
        # Every partial sum is an integer below 2 ** 53, so audioop's double sum equals this exact one.
        per_frame = np.zeros(total, dtype=np.int64)
        for channel in data.T:  # column by column: numpy's sum over a short last axis is very slow
            wide = channel.astype(np.int64)
            per_frame += wide * wide
        prefix = np.concatenate([[0], np.cumsum(per_frame)])
        sums = prefix[np.maximum(real_ends, starts).clip(max=total)] - prefix[starts.clip(max=total)]
        live = counts > 0
        out[live] = np.floor(np.sqrt(sums[live].astype(np.float64) / counts[live])).astype(np.int64)
        return out
    for i, (start, end, count) in enumerate(zip(starts, real_ends, counts, strict=True)):
        if count:
            part = data[start:end].ravel().astype(np.float64)
            out[i] = int(math.sqrt(float(np.cumsum(part * part)[-1]) / count))
    return out


# --- a pydub segment -----------------------------------------------------------------------------------


class _Segment:
    """An AudioSegment's content: `data` (frames, channels) int16/int32, in file (interleaved) order."""

    def __init__(self, data: np.ndarray, rate: int):
        self.data = data
        self.rate = rate

    @classmethod
    def silent(cls, ms: int) -> _Segment:
        return cls(np.zeros((int(SILENT_RATE * (ms / 1000.0)), 1), dtype=np.int16), SILENT_RATE)

    def __len__(self) -> int:
        return length_ms(self.data.shape[0], self.rate)

    def slice(self, start: int, end: int) -> _Segment:
        """segment[start:end] in ms (start, end >= 0), with pydub's capping and zero padding."""
        size = len(self)
        first, last = frame_at(min(start, size), self.rate), frame_at(min(end, size), self.rate)
        part = self.data[first:last]
        if part.shape[0] and part.shape[0] < last - first:
            part = np.concatenate([part, np.zeros((last - first - part.shape[0], part.shape[1]), part.dtype)])
        return _Segment(part, self.rate)

    def reverse(self) -> _Segment:
        # audioop.reverse reverses samples, not frames: the channels of each frame come out swapped too.
        return _Segment(np.ascontiguousarray(self.data[::-1, ::-1]), self.rate)

    def converted(self, channels: int, rate: int, dtype) -> _Segment:
        """set_channels, set_frame_rate, set_sample_width in `_sync`'s order; only ever widening here."""
        data = self.data
        if data.shape[1] != channels:
            if data.shape[1] != 1:
                raise ValueError("pydub only widens mono segments to several channels")
            data = np.repeat(data, channels, axis=1)  # tostereo with factor 1 and from_mono copy exactly
        if rate != self.rate and data.shape[0]:
            data = _ratecv(data, self.rate, rate)
        if np.dtype(dtype) != data.dtype:
            data = data.astype(np.int32) << 16  # lin2lin 2 -> 4 bytes
        return _Segment(data, rate)

    def __add__(self, other: _Segment) -> _Segment:
        """append(crossfade=0) after `_sync`: the larger channel count, rate and sample width win."""
        channels = max(self.data.shape[1], other.data.shape[1])
        rate = max(self.rate, other.rate)
        dtype = max(self.data.dtype, other.data.dtype, key=lambda d: d.itemsize)
        a, b = self.converted(channels, rate, dtype), other.converted(channels, rate, dtype)
        return _Segment(np.concatenate([a.data, b.data]), rate)


def _ratecv(data: np.ndarray, in_rate: int, out_rate: int) -> np.ndarray:
    """`audioop.ratecv(data, width, channels, in_rate, out_rate, None)` with weights (1, 0).

    ratecv walks a counter d from -out: each input frame adds out, each output frame subtracts in, and
    outputs while d >= 0. So output j follows input k = 1 + ceil(j * in / out) and sits at phase
    d = (k - 1) * out - j * in; it is trunc((prev * d + cur * (out - d)) / out) in double on 32-bit scaled
    samples (int16 shifted up 16 bits, and back down after), prev being the input before cur (0 at first).
    """
    gcd = math.gcd(in_rate, out_rate)
    in_rate, out_rate = in_rate // gcd, out_rate // gcd
    count = (data.shape[0] - 1) * out_rate // in_rate + 1
    j = np.arange(count, dtype=np.int64)
    k = 1 + (j * in_rate + out_rate - 1) // out_rate
    d = ((k - 1) * out_rate - j * in_rate).astype(np.float64)[:, None]
    shift = 16 if data.dtype == np.int16 else 0
    scaled = data.astype(np.int64) << shift
    cur = scaled[k - 1].astype(np.float64)
    prev = np.where((k >= 2)[:, None], scaled[np.maximum(k - 2, 0)], 0).astype(np.float64)
    out = np.trunc((prev * d + cur * (out_rate - d)) / out_rate).astype(np.int64)
    return (out >> shift).astype(data.dtype)


# --- pydub.silence -------------------------------------------------------------------------------------


def detect_silence(seg: _Segment, min_len: int, thresh_db: float, step: int) -> list[list[int]]:
    """pydub.silence.detect_silence: [start, end] ms ranges whose every min_len window is quiet enough."""
    size = len(seg)
    if size < min_len:
        return []
    threshold = db_to_float(thresh_db) * max_amplitude(seg.data.dtype)
    last = size - min_len
    starts = list(range(0, last + 1, step))
    if last % step:
        starts.append(last)
    starts_ms = np.array(starts, dtype=np.int64)
    levels = _window_rms(seg.data, frame_at(starts_ms, seg.rate), frame_at(starts_ms + min_len, seg.rate))
    quiet = [s for s, level in zip(starts, levels.tolist(), strict=True) if level <= threshold]
    if not quiet:
        return []
    ranges = []
    first = prev = quiet[0]
    for start in quiet[1:]:
        # Windows that overlap (or follow at the seek step) belong to the same silence.
        if start != prev + step and start > prev + min_len:
            ranges.append([first, prev + min_len])
            first = start
        prev = start
    ranges.append([first, prev + min_len])
    return ranges


def detect_nonsilent(seg: _Segment, min_len: int, thresh_db: float, step: int) -> list[list[int]]:
    """pydub.silence.detect_nonsilent: the complement of detect_silence, in ms."""
    silent = detect_silence(seg, min_len, thresh_db, step)
    size = len(seg)
    if not silent:
        return [[0, size]]
    if silent[0][0] == 0 and silent[0][1] == size:
        return []
    ranges, prev_end = [], 0
    for start, end in silent:
        ranges.append([prev_end, start])
        prev_end = end
    if silent[-1][1] != size:
        ranges.append([prev_end, size])
    if ranges[0] == [0, 0]:
        ranges.pop(0)
    return ranges


def split_on_silence(seg: _Segment, min_len: int, thresh_db: float, keep: int, step: int) -> list[_Segment]:
    """pydub.silence.split_on_silence: the non-silent pieces widened by `keep` ms, overlaps split halfway."""
    ranges = [[start - keep, end + keep] for start, end in detect_nonsilent(seg, min_len, thresh_db, step)]
    for here, after in zip(ranges, ranges[1:], strict=False):
        if after[0] < here[1]:
            here[1] = (here[1] + after[0]) // 2
            after[0] = here[1]
    size = len(seg)
    return [seg.slice(max(start, 0), min(end, size)) for start, end in ranges]


def detect_leading_silence(seg: _Segment, thresh_db: float = EDGE_DB, chunk: int = EDGE_CHUNK_MS) -> int:
    """pydub.silence.detect_leading_silence: ms before the first chunk at or above `thresh_db`, or the length."""
    size = len(seg)
    starts = np.arange(0, size, chunk, dtype=np.int64)
    ends = np.minimum(starts + chunk, size)
    levels = _window_rms(seg.data, frame_at(starts, seg.rate), frame_at(ends, seg.rate))
    for start, level in zip(starts.tolist(), levels.tolist(), strict=True):
        if not dbfs(level, seg.data.dtype) < thresh_db:
            return start
    return size


# --- the preprocessing ---------------------------------------------------------------------------------


def _collect(seg: _Segment, min_len: int, thresh_db: float) -> _Segment:
    wave = _Segment.silent(0)
    for piece in split_on_silence(seg, min_len, thresh_db, KEEP_MS, SEEK_MS):
        longer = wave + piece
        if len(wave) > ENOUGH_MS and len(longer) > CLIP_MS:
            break
        wave = longer
    return wave


def _preprocess(samples: np.ndarray, sample_rate: int) -> tuple[np.ndarray, int, bool]:
    data = np.asarray(samples)
    if data.ndim == 1:
        data = data[None]
    if data.ndim != 2 or data.shape[0] < 1:
        raise InputError(f"reference samples must be (channels, samples), not {data.shape}")
    if data.dtype not in (np.int16, np.int32):
        raise InputError(f"reference samples must be int16 or int32 PCM, not {data.dtype}")
    if int(sample_rate) <= 0:
        raise InputError(f"the reference sample rate must be positive, got {sample_rate}")
    original = _Segment(np.ascontiguousarray(data.T), int(sample_rate))
    for min_len, thresh_db in PASSES:
        wave = _collect(original, min_len, thresh_db)
        if len(wave) <= CLIP_MS:
            break
    if len(wave) > CLIP_MS:
        wave = wave.slice(0, CLIP_MS)
    # remove_silence_edges
    start = detect_leading_silence(wave)
    audible = start < len(wave)
    wave = wave.slice(start, len(wave))
    end = detect_leading_silence(wave.reverse())
    if end > 0:
        wave = wave.slice(0, len(wave) - end)
    wave = wave + _Segment.silent(PAD_MS)
    return np.ascontiguousarray(wave.data.T), wave.rate, audible


def preprocess_reference(samples: np.ndarray, sample_rate: int) -> tuple[np.ndarray, int]:
    """Upstream's reference audio preprocessing on PCM ints: (samples (channels, n) int, sample rate).

    `samples` is (channels, samples) or (samples,), int16 or int32, as read from the file. The result is
    what the exported WAV holds: the same sample type and channels, at max(sample_rate, 11025) Hz, except
    when step 1 finds nothing but silence: then it is 50 ms of mono 16-bit silence at 11025 Hz.
    """
    out, rate, _ = _preprocess(samples, sample_rate)
    return out, rate


def output_rate(sample_rate: int) -> int:
    """The rate of `trim_reference`'s result: pydub raises a reference below 11025 Hz to 11025 Hz."""
    return max(int(sample_rate), SILENT_RATE)


def to_pcm16(wave: torch.Tensor) -> np.ndarray:
    """Float audio as the int16 samples of a 16-bit WAV.

    Upstream only ever sees files; a 16-bit file loads as ints / 32768, which this inverts exactly.
    Other audio (generated, or from a 24-bit or float file) is quantised as a 16-bit export would be:
    round(clip(x, -1, 1 - 1/32768) * 32768), ties to even.
    """
    x = wave.detach().to(device="cpu", dtype=torch.float64).numpy()
    return np.rint(np.clip(x, -1.0, 32767 / 32768) * 32768).astype(np.int16)


def trim_reference(wave: torch.Tensor, sample_rate: int) -> torch.Tensor:
    """The reference F5-TTS conditions on after `preprocess_ref_audio_text`: (channels, n) float32.

    `wave` is (channels, samples) or (samples,) float at `sample_rate`. It is taken to 16-bit ints
    (`to_pcm16`), clipped and trimmed as upstream does, and returned as ints / 32768, which is what
    torchaudio.load or soundfile (float32) read from upstream's temporary WAV, at `output_rate(sample_rate)`.
    Channels are kept: the engine's reference preparation averages them, as upstream's inference does.
    Raises InputError for empty, non-finite or silent audio (nothing reaches -42 dBFS), where upstream
    would go on with a reference of (almost) nothing but the 50 ms pad.
    """
    wave = torch.as_tensor(wave)
    if wave.dim() == 1:
        wave = wave[None]
    if wave.dim() != 2 or wave.shape[0] < 1:
        raise InputError(f"the F5-TTS reference must be (samples,) or (channels, samples), not {tuple(wave.shape)}")
    if wave.shape[-1] == 0:
        raise InputError("the F5-TTS reference audio is empty")
    if not torch.is_floating_point(wave) or not bool(torch.isfinite(wave).all()):
        raise InputError("the F5-TTS reference audio must be finite floating-point samples")
    out, _, audible = _preprocess(to_pcm16(wave), sample_rate)
    if not audible:
        raise InputError("the F5-TTS reference audio is silent (no 10 ms reaches -42 dBFS); give a voice recording")
    return torch.from_numpy(out.astype(np.float32) / np.float32(32768))
