"""F5-TTS's audio around the model: reference preparation, torchaudio's resampler, loudness, cross-fades.

Reproduces f5-tts 1.1.22's `infer_batch_process` (checked by `scripts/parity/f5tts_frontend_live.py`):

- `prepare_reference`: the loaded reference mixed to mono (channel mean), raised to `TARGET_RMS` when
  quieter, resampled to 24 kHz with `torchaudio.transforms.Resample` (reproduced by `resample`);
- `restore_loudness`: each generated chunk scaled back by the same factor;
- `cross_fade`: the chunks joined with linear cross-fades.

Before that, `preprocess_ref_audio_text`'s audio steps (cut at silences to about 12 s, silent edges
trimmed, padding, 16-bit samples) are in `silence.py`; its transcript step (a sentence end) in `text.py`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from mizuoto.audio.torchaudio_sinc import resample  # noqa: F401  (F5-TTS resamples with torchaudio)
from mizuoto.core.errors import InputError

SAMPLE_RATE = 24000
TARGET_RMS = 0.1
CROSS_FADE_SECONDS = 0.15

# --- reference and loudness ---------------------------------------------------------------------------


def prepare_reference(wave: torch.Tensor, sample_rate: int,
                      target_rms: float = TARGET_RMS) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference as F5-TTS conditions on it, and its original loudness: (wave (1, samples) float32 at
    24 kHz, rms as a 0-d float32 tensor).

    `wave` is (samples,) or (channels, samples), float, at `sample_rate` (ComfyUI's AUDIO is
    (batch, channels, samples): pass one item). Channels are averaged; when the RMS is below
    `target_rms` the wave is scaled up to it (louder references are left alone); then it is resampled.
    Upstream does all of this on the CPU, before moving the result to the model's device: pass a CPU
    tensor for upstream's exact numbers.
    """
    wave = torch.as_tensor(wave)
    if wave.dim() == 1:
        wave = wave[None]
    if wave.dim() != 2:
        raise InputError(f"the F5-TTS reference must be (samples,) or (channels, samples), not {tuple(wave.shape)}")
    if wave.shape[-1] == 0:
        raise InputError("the F5-TTS reference audio is empty")
    # torchaudio.load, upstream's source, hands over float32.
    wave = wave.to(torch.float32)
    if wave.shape[0] > 1:
        wave = torch.mean(wave, dim=0, keepdim=True)
    rms = torch.sqrt(torch.mean(torch.square(wave)))
    if not bool(rms > 0):
        # Upstream would divide by zero and generate from NaNs; a silent (or non-finite) reference carries no voice.
        raise InputError("the F5-TTS reference audio is silent or not finite; give a recording of the voice")
    if rms < target_rms:
        wave = wave * target_rms / rms
    return resample(wave, sample_rate, SAMPLE_RATE), rms


def restore_loudness(wave, rms: torch.Tensor, target_rms: float = TARGET_RMS):
    """A generated wave scaled back to the reference's loudness: `wave * rms / target_rms` when
    `prepare_reference` raised the reference (rms below target), `wave` unchanged otherwise."""
    return wave * rms / target_rms if rms < target_rms else wave


# --- joining chunks -----------------------------------------------------------------------------------


def cross_fade(waves: Sequence, sample_rate: int = SAMPLE_RATE,
               cross_fade_duration: float = CROSS_FADE_SECONDS) -> np.ndarray:
    """Generated chunks (1-D numpy arrays or tensors) joined as upstream joins them, as a numpy array.

    Each next chunk overlaps the result so far by int(cross_fade_duration * sample_rate) samples, capped
    by both lengths: the overlap is `prev * linspace(1, 0) + next * linspace(0, 1)`. The numpy dtypes
    follow upstream's: the ramps are float64, so as soon as one overlap happens the result is float64;
    with no overlap (duration <= 0, empty chunks) the float32 chunks are concatenated as float32, and a
    single chunk comes back as it is.
    """
    if not waves:
        raise InputError("there are no generated chunks to join")
    arrays = [w.detach().cpu().numpy() if isinstance(w, torch.Tensor) else np.asarray(w) for w in waves]
    if any(a.ndim != 1 for a in arrays):
        raise InputError(f"cross_fade joins 1-D waves, got shapes {[a.shape for a in arrays]}")
    if cross_fade_duration <= 0:
        return np.concatenate(arrays)
    if len(arrays) == 1:
        return arrays[0]
    # Upstream rebuilds the whole result at every join (quadratic in the number of chunks: minutes for a long
    # text); here only the last `width` samples, the most an overlap can reach back, stay in `tail`, the rest is
    # set aside once. The same products and sums, so the same values; float32 pieces set aside before the
    # first overlap are widened exactly when everything is joined (upstream widens them at that overlap).
    width = int(cross_fade_duration * sample_rate)
    done, tail, total = [], arrays[0], len(arrays[0])
    for following in arrays[1:]:
        overlap = min(width, total, len(following))
        if overlap <= 0:
            tail = np.concatenate([tail, following])
        else:
            faded = tail[-overlap:] * np.linspace(1, 0, overlap) + following[:overlap] * np.linspace(0, 1, overlap)
            tail = np.concatenate([tail[:-overlap], faded, following[overlap:]])
        total += len(following) - overlap
        if len(tail) > width:
            done.append(tail[:len(tail) - width])
            tail = tail[len(tail) - width:]
    return np.concatenate([*done, tail])
