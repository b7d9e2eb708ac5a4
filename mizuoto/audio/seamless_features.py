"""The features transformers' `SeamlessM4TFeatureExtractor` (4.52.1) gives w2v-BERT 2.0, computed the same way.

IndexTTS 2 calls the extractor of facebook/w2v-bert-2.0 on a 16 kHz reference as
`extract_features(audio_16k, sampling_rate=16000, return_tensors="pt")`, with `audio_16k` a (1, samples) tensor
(one waveform, not a batch: its first row is taken). The extractor computes in numpy, and so does this module,
with the same calls on arrays of the same layouts (the reductions below run along the same memory axes, so the
pairwise sums are the same ones):

- the waveform as float32, times 2**15 (Kaldi's 16-bit scale);
- Kaldi-style frames of 400 samples every 160 (no centring, no dither), promoted to float64, each frame's mean
  removed, pre-emphasis 0.97 (the first sample scaled by 1 - 0.97), a Povey window (Hann ** 0.85, symmetric),
  zero-padded to 512 and `np.fft.rfft`'d one frame at a time into a complex64 array (each value rounded);
- power |X|**2 in float64, an 80-bin Kaldi mel bank (20 Hz to 8 kHz, triangles in mel space, no area
  normalisation) as one float64 product, floored at float32's epsilon, natural log, rounded to float32;
- per mel bin over the frames: (x - mean) / sqrt(var(ddof=1) + 1e-7) in float32;
- right padding with `padding_value` up to the batch's longest and then to an even frame count, then pairs of
  frames stacked into 160 features (T // 2 rows); the attention mask (int32) is the real-frame mask at the second
  frame of each pair, so a pair whose second frame is padding is masked.

`padding_value` is the extractor's: 1.0 in w2v-bert-2.0's preprocessor_config.json (the class default is 0.0).
The Kaldi fbank of mizuoto/audio/kaldi_fbank.py is torchaudio's (float32 torch, another window and bank), not this
computation; the triangle construction below is the same arithmetic as mel.transformers_slaney_bank's, on Kaldi
mel-space points and without the Slaney scaling.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from mizuoto.core.errors import InputError

SAMPLE_RATE = 16000
FRAME_LENGTH = 400
HOP_LENGTH = 160
FFT_LENGTH = 512
NUM_MEL_BINS = 80
STRIDE = 2
PREEMPHASIS = 0.97
MEL_FLOOR = 1.192092955078125e-07
W2V_BERT_PADDING_VALUE = 1.0  # facebook/w2v-bert-2.0's preprocessor_config.json
MIN_SAMPLES = FRAME_LENGTH + HOP_LENGTH  # two frames: one frame has no ddof=1 variance (upstream gives NaN)


def _kaldi_mel(freq):
    return 1127.0 * np.log(1.0 + (freq / 700.0))


@lru_cache(maxsize=2)
def kaldi_mel_bank(num_mel_bins: int = NUM_MEL_BINS) -> np.ndarray:
    """transformers' mel_filter_bank(257, num_mel_bins, 20, 8000, 16000, norm=None, mel_scale="kaldi",
    triangularize_in_mel_space=True): float64 (257, num_mel_bins). Read-only: it is shared."""
    num_frequency_bins = FFT_LENGTH // 2 + 1
    mel_freqs = np.linspace(_kaldi_mel(20), _kaldi_mel(SAMPLE_RATE // 2), num_mel_bins + 2)
    fft_bin_width = SAMPLE_RATE / ((num_frequency_bins - 1) * 2)
    fft_freqs = _kaldi_mel(fft_bin_width * np.arange(num_frequency_bins))
    filter_diff = np.diff(mel_freqs)
    slopes = np.expand_dims(mel_freqs, 0) - np.expand_dims(fft_freqs, 1)
    down_slopes = -slopes[:, :-2] / filter_diff[:-1]
    up_slopes = slopes[:, 2:] / filter_diff[1:]
    bank = np.maximum(np.zeros(1), np.minimum(down_slopes, up_slopes))
    bank.setflags(write=False)
    return bank


@lru_cache(maxsize=1)
def povey_window() -> np.ndarray:
    """Hann ** 0.85 over 400 points, symmetric (numpy's hanning), float64. Read-only."""
    window = np.power(np.hanning(FRAME_LENGTH), 0.85).astype(np.float64)
    window.setflags(write=False)
    return window


def log_mel(waveform: np.ndarray) -> np.ndarray:
    """One float32 waveform (samples,) -> log-mel features (frames, 80) float32, a transposed view of an (80, frames)
    array as the extractor's `_extract_fbank_features` returns it (the normalisation reduces along its memory)."""
    wave = (waveform * (2**15)).astype(np.float64)
    window = povey_window()
    frames = int(1 + np.floor((wave.size - FRAME_LENGTH) / HOP_LENGTH))
    spectrum = np.empty((frames, FFT_LENGTH // 2 + 1), dtype=np.complex64)
    buffer = np.zeros(FFT_LENGTH)
    start = 0
    for index in range(frames):
        buffer[:FRAME_LENGTH] = wave[start:start + FRAME_LENGTH]
        buffer[:FRAME_LENGTH] = buffer[:FRAME_LENGTH] - buffer[:FRAME_LENGTH].mean()
        buffer[1:FRAME_LENGTH] -= PREEMPHASIS * buffer[:FRAME_LENGTH - 1]
        buffer[0] *= 1 - PREEMPHASIS
        buffer[:FRAME_LENGTH] *= window
        spectrum[index] = np.fft.rfft(buffer)
        start += HOP_LENGTH
    power = (np.abs(spectrum, dtype=np.float64) ** 2.0).T
    mel = np.maximum(MEL_FLOOR, np.dot(kaldi_mel_bank().T, power))
    return np.asarray(np.log(mel), np.float32).T


def normalise(features: np.ndarray) -> np.ndarray:
    """Per mel bin over the frames: (x - mean) / sqrt(var(ddof=1) + 1e-7), float32, as the extractor does it."""
    return (features - np.expand_dims(features.mean(0), 0)) / np.sqrt(np.expand_dims(features.var(0, ddof=1), 0)
                                                                       + 1e-7)


def _waveform(audio, what: str) -> np.ndarray:
    if isinstance(audio, torch.Tensor):
        audio = audio.detach().cpu()
    array = np.asarray(audio, dtype=np.float32)
    if array.ndim == 2 and array.shape[0] == 1:
        array = array[0]  # the extractor reads the first row of a (1, samples) waveform
    if array.ndim != 1:
        raise InputError(f"{what}: expected mono audio (samples,) or (1, samples), got shape {tuple(array.shape)}")
    if array.size < MIN_SAMPLES:
        raise InputError(f"{what}: {array.size} samples is too short for w2v-BERT features; give at least "
                         f"{MIN_SAMPLES} samples ({MIN_SAMPLES / SAMPLE_RATE * 1000:.0f} ms) at 16 kHz")
    if not np.isfinite(array).all():
        raise InputError(f"{what}: the audio holds NaN or infinite samples")
    return array


def features(audio, *, sample_rate: int = SAMPLE_RATE, padding_value: float = W2V_BERT_PADDING_VALUE,
             what: str = "reference audio") -> tuple[torch.Tensor, torch.Tensor]:
    """16 kHz mono audio -> (input_features (B, T // 2, 160) float32, attention_mask (B, T // 2) int32), as the
    extractor returns them with return_tensors="pt". `audio` is one waveform ((samples,) or (1, samples), a tensor
    or an array: B = 1, IndexTTS's call) or a list of 1-D waveforms (a batch, right-padded to the longest)."""
    if sample_rate != SAMPLE_RATE:
        raise InputError(f"{what}: w2v-BERT features need 16000 Hz audio, got {sample_rate} Hz; resample it first")
    if isinstance(audio, (list, tuple)):
        if not audio:
            raise InputError(f"{what}: an empty batch of audio")
        waves = [_waveform(a, f"{what} [{i}]") for i, a in enumerate(audio)]
    else:
        waves = [_waveform(audio, what)]
    mels = [normalise(log_mel(w)) for w in waves]
    longest = max(len(m) for m in mels)
    length = longest + longest % STRIDE
    padded, masks = [], []
    for m in mels:
        mask = np.ones(len(m), dtype=np.int32)
        if len(m) < length:
            mask = np.pad(mask, (0, length - len(m)))
            m = np.pad(m, ((0, length - len(m)), (0, 0)), "constant", constant_values=padding_value)
        padded.append(m)
        masks.append(mask)
    stacked = np.stack(padded).reshape(len(mels), length // STRIDE, NUM_MEL_BINS * STRIDE)
    mask = np.stack(masks)[:, np.arange(length) % STRIDE == 1]
    return torch.from_numpy(np.ascontiguousarray(stacked)), torch.from_numpy(np.ascontiguousarray(mask))
