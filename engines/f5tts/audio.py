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

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch
import torch.nn.functional as F

from mizuoto.core.errors import InputError

SAMPLE_RATE = 24000
TARGET_RMS = 0.1
CROSS_FADE_SECONDS = 0.15

# torchaudio's resampling defaults (sinc_interp_hann).
LOWPASS_FILTER_WIDTH = 6
ROLLOFF = 0.99


# --- resampling -------------------------------------------------------------------------------------


@lru_cache(maxsize=32)
def _sinc_kernel(orig: int, new: int, compute_dtype: torch.dtype, phase_dtype: torch.dtype,
                 out_dtype: torch.dtype) -> tuple[torch.Tensor, int]:
    """The (new, 1, taps) polyphase filter bank of torchaudio's sinc_interp_hann resampler, on the CPU,
    for rates already divided by their gcd; and its half width in input samples.

    Row j holds the taps for output phase j, i.e. for the input position j * orig / new: a
    Hann-windowed sinc low-pass at `ROLLOFF` of the lower Nyquist frequency, `LOWPASS_FILTER_WIDTH` zero
    crossings each side. The operations and their dtypes are torchaudio 2.11's (the last bits of every
    tap depend on them): the phase offsets j / new are computed in `phase_dtype` and only then added to
    the tap positions in `compute_dtype`. Shared between callers: never modified in place.
    """
    cutoff = min(orig, new) * ROLLOFF  # in units of the reduced rates
    width = math.ceil(LOWPASS_FILTER_WIDTH * orig / cutoff)
    positions = torch.arange(-width, width + orig, dtype=compute_dtype)[None, None] / orig
    phases = torch.arange(0, -new, -1, dtype=phase_dtype)[:, None, None] / new
    t = (phases + positions) * cutoff
    t = t.clamp(-LOWPASS_FILTER_WIDTH, LOWPASS_FILTER_WIDTH)
    window = torch.cos(t * math.pi / LOWPASS_FILTER_WIDTH / 2) ** 2
    t = t * math.pi
    sinc = torch.where(t == 0, torch.tensor(1.0).to(t), t.sin() / t)
    kernel = sinc * (window * (cutoff / orig))
    return kernel.to(out_dtype), width


def resample(wave: torch.Tensor, orig_freq: int, new_freq: int, *, transform_kernel: bool = True) -> torch.Tensor:
    """`wave` (..., samples) resampled from `orig_freq` to `new_freq` Hz along its last axis, bit for bit
    as torchaudio 2.11 does it with its defaults (sinc_interp_hann, width 6, rolloff 0.99).

    `transform_kernel=True` reproduces `torchaudio.transforms.Resample(orig_freq, new_freq)` (what
    F5-TTS uses): the filter is built in float64 (phase offsets in float32, torch's default dtype) and kept
    in float32, whatever the waveform's dtype; a float64 waveform is filtered with that float32 filter
    widened (torchaudio would refuse the dtype mix). `False` reproduces `torchaudio.functional.resample`,
    which builds the filter in the waveform's own dtype, so float32 input gives slightly different taps.

    Equal rates return `wave` itself. The output has ceil(samples * new / orig) samples, that ceiling
    taken in float32 like torchaudio's (so it can come out one short for very long inputs); the signal
    counts as zero beyond both ends. Runs on `wave`'s device; only the CPU result is exact to upstream.
    """
    orig_freq, new_freq = int(orig_freq), int(new_freq)
    if orig_freq <= 0 or new_freq <= 0:
        raise InputError(f"sample rates must be positive, got {orig_freq} and {new_freq}")
    if not torch.is_floating_point(wave):
        raise InputError(f"resample needs a floating-point waveform, got {wave.dtype}")
    if orig_freq == new_freq:
        return wave
    gcd = math.gcd(orig_freq, new_freq)
    orig, new = orig_freq // gcd, new_freq // gcd
    if transform_kernel:
        kernel, width = _sinc_kernel(orig, new, torch.float64, torch.float32, torch.float32)
    else:
        kernel, width = _sinc_kernel(orig, new, wave.dtype, wave.dtype, wave.dtype)
    kernel = kernel.to(device=wave.device, dtype=wave.dtype)

    shape = wave.shape
    rows = wave.reshape(-1, shape[-1])
    length = rows.shape[-1]
    # Each output block of `new` samples comes from one stride-`orig` step: output channel j of the
    # convolution is phase j, so transposing and flattening interleaves the phases into time order.
    padded = F.pad(rows, (width, width + orig))
    blocks = F.conv1d(padded[:, None], kernel, stride=orig)
    out = blocks.transpose(1, 2).reshape(rows.shape[0], -1)
    n_out = int(torch.tensor(new * length / orig, dtype=torch.float32).ceil())
    out = out[..., :n_out]
    return out.reshape(shape[:-1] + out.shape[-1:])


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
    joined = arrays[0]
    for following in arrays[1:]:
        overlap = min(int(cross_fade_duration * sample_rate), len(joined), len(following))
        if overlap <= 0:
            joined = np.concatenate([joined, following])
            continue
        faded = joined[-overlap:] * np.linspace(1, 0, overlap) + following[:overlap] * np.linspace(0, 1, overlap)
        joined = np.concatenate([joined[:-overlap], faded, following[overlap:]])
    return joined
