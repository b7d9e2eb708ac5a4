"""Whisper's log-mel front end against openai-whisper 20250625's own `whisper.audio` (the oracle).

Both run here, in one process, on the CPU at the same thread count, so the spectrograms must be equal
bit for bit. The resampler has no upstream counterpart (openai-whisper calls ffmpeg); it is checked for
what a resampler must do: keep a tone's frequency and amplitude, reject what would alias, keep lengths.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from mizuoto.audio import resample as resampling
from mizuoto.core.errors import InputError
from mizuoto.engines.whisper import audio

upstream = pytest.importorskip("whisper.audio")

SR = audio.SAMPLE_RATE


def _noise(seconds, seed=0, scale=0.1):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(int(seconds * SR), generator=g)).float()


def _sweep(seconds, f0=50.0, f1=7900.0):
    t = torch.arange(int(seconds * SR), dtype=torch.float64) / SR
    phase = 2 * math.pi * (f0 * t + (f1 - f0) / (2 * seconds) * t * t)  # linear chirp f0 -> f1
    return (0.6 * torch.sin(phase)).float()


SIGNALS = {
    "noise_7s": lambda: _noise(7.3),
    "sweep_30s": lambda: _sweep(30.0),
    "sweep_4s": lambda: _sweep(4.0, 20.0, 8000.0),
    "silence_5s": lambda: torch.zeros(5 * SR),
    "clipped_noise_12s": lambda: _noise(12.0, seed=1, scale=3.0).clamp(-1.0, 1.0),
    "quiet_tone_in_silence": lambda: torch.cat([torch.zeros(SR), 1e-4 * _sweep(1.0, 440.0, 440.0), torch.zeros(SR)]),
    "long_noise_41s": lambda: _noise(41.7, seed=2, scale=0.3),
    "short_0.05s": lambda: _noise(0.05, seed=3),
}


def test_constants_match_upstream():
    for name in ("SAMPLE_RATE", "N_FFT", "HOP_LENGTH", "CHUNK_LENGTH", "N_SAMPLES", "N_FRAMES",
                 "N_SAMPLES_PER_TOKEN", "FRAMES_PER_SECOND", "TOKENS_PER_SECOND"):
        assert getattr(audio, name) == getattr(upstream, name), name
        assert type(getattr(audio, name)) is int


@pytest.mark.parametrize("n_mels", [80, 128])
def test_mel_filters_equal_upstream_and_are_cached(n_mels):
    ours = audio.mel_filters("cpu", n_mels)
    theirs = upstream.mel_filters("cpu", n_mels)
    assert ours.dtype == torch.float32 and ours.shape == (n_mels, audio.N_FFT // 2 + 1)
    assert torch.equal(ours, theirs)
    assert audio.mel_filters("cpu", n_mels) is ours


def test_mel_filters_reject_other_sizes():
    with pytest.raises(InputError, match="80 and 128"):
        audio.mel_filters("cpu", 64)


@pytest.mark.parametrize("n_mels", [80, 128])
@pytest.mark.parametrize("signal", sorted(SIGNALS))
def test_log_mel_equals_upstream(signal, n_mels):
    x = SIGNALS[signal]()
    ours = audio.log_mel_spectrogram(x, n_mels)
    theirs = upstream.log_mel_spectrogram(x, n_mels)
    assert ours.shape == (n_mels, x.numel() // audio.HOP_LENGTH)
    assert ours.dtype == torch.float32
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("n_mels", [80, 128])
@pytest.mark.parametrize("signal", ["sweep_4s", "silence_5s", "long_noise_41s"])
def test_log_mel_with_transcribe_padding_equals_upstream(signal, n_mels):
    x = SIGNALS[signal]()
    ours = audio.log_mel_spectrogram(x, n_mels, padding=audio.N_SAMPLES)
    theirs = upstream.log_mel_spectrogram(x, n_mels, padding=upstream.N_SAMPLES)
    assert ours.shape[-1] == (x.numel() + audio.N_SAMPLES) // audio.HOP_LENGTH
    assert torch.equal(ours, theirs)
    # transcribe's next step: the 3000-frame window the encoder reads
    assert torch.equal(audio.pad_or_trim(ours[:, :1234], audio.N_FRAMES),
                       upstream.pad_or_trim(theirs[:, :1234], upstream.N_FRAMES))


def test_log_mel_of_numpy_and_batches_equals_upstream():
    x = _noise(3.1, seed=4).numpy()
    assert torch.equal(audio.log_mel_spectrogram(x), upstream.log_mel_spectrogram(x))
    assert torch.equal(audio.log_mel_spectrogram(x, device="cpu"), upstream.log_mel_spectrogram(x, device="cpu"))
    # float64 input: upstream needs float32 (its matmul fails on float64); ours converts first
    assert torch.equal(audio.log_mel_spectrogram(x.astype(np.float64)), upstream.log_mel_spectrogram(x))
    # a non-contiguous view
    y = _noise(6.2, seed=5).numpy()[::2]
    assert torch.equal(audio.log_mel_spectrogram(y, 128), upstream.log_mel_spectrogram(np.ascontiguousarray(y), 128))
    # batches: (batch, samples) -> (batch, n_mels, frames), floored at the whole batch's maximum as upstream
    batch = torch.stack([_noise(2.0, seed=6), 0.01 * _noise(2.0, seed=7)])
    ours = audio.log_mel_spectrogram(batch, 80, padding=500)
    assert ours.shape == (2, 80, (2 * SR + 500) // audio.HOP_LENGTH)
    assert torch.equal(ours, upstream.log_mel_spectrogram(batch, 80, padding=500))


def test_log_mel_takes_no_paths():
    with pytest.raises(InputError, match="file path"):
        audio.log_mel_spectrogram("speech.wav")


@pytest.mark.parametrize("length", [5, 10, 17])
@pytest.mark.parametrize("axis", [0, 1, -1, -2])
def test_pad_or_trim_equals_upstream(length, axis):
    rng = np.random.default_rng(length)
    for dtype in (np.float32, np.float64, np.int16):
        a = (rng.standard_normal((10, 10, 3)) * 100).astype(dtype)
        for array in (a, torch.from_numpy(a)):
            ours = audio.pad_or_trim(array, length, axis=axis)
            theirs = upstream.pad_or_trim(array, length, axis=axis)
            assert type(ours) is type(theirs) and ours.shape == theirs.shape and ours.dtype == theirs.dtype
            if torch.is_tensor(ours):
                assert torch.equal(ours, theirs)
            else:
                np.testing.assert_array_equal(ours, theirs)


def test_pad_or_trim_default_is_thirty_seconds_and_copies():
    x = _noise(31.0)
    y = audio.pad_or_trim(x)
    assert torch.equal(y, upstream.pad_or_trim(x)) and y.shape == (audio.N_SAMPLES,)
    y[0] += 1.0
    assert x[0] != y[0]  # a new tensor, as upstream's index_select gives
    z = audio.pad_or_trim(x.numpy())
    z[1] += 1.0
    assert x[1] != z[1]
    short = _noise(2.0).numpy()
    np.testing.assert_array_equal(audio.pad_or_trim(short), upstream.pad_or_trim(short))


# --- resampling and down-mixing (no upstream counterpart) ---

def _tone(rate, seconds, freq=1000.0, amp=0.5):
    t = torch.arange(int(rate * seconds), dtype=torch.float64) / rate
    return (amp * torch.sin(2 * math.pi * freq * t)).float()


@pytest.mark.parametrize("rate", [44100, 48000, 22050, 8000, 11025, 32000, 44101])
def test_resampled_tone_keeps_frequency_and_amplitude(rate):
    seconds = 1.0 if rate == 44101 else 2.0  # 44101/16000 has no small ratio: the slower gather path
    x = _tone(rate, seconds)
    y = audio.resample(x, rate, SR)
    assert y.dtype == torch.float32
    assert y.numel() == round(x.numel() * SR / rate)
    expected = _tone(SR, y.numel() / SR).double()[: y.numel()]
    edge = SR // 20  # 50 ms at each end, where the zero padding rings
    error = (y[edge:-edge].double() - expected[edge:-edge]).abs().max().item()
    assert error < 1e-3, error
    assert abs(y[edge:-edge].abs().max().item() - 0.5) < 1e-3


@pytest.mark.parametrize("rate", [44100, 48000, 22050])
def test_resampling_rejects_what_would_alias(rate):
    above = audio.resample(_tone(rate, 1.0, freq=8200.0), rate, SR)  # above the new Nyquist frequency
    assert above[800:-800].abs().max().item() < 1e-4
    passband = audio.resample(_tone(rate, 1.0, freq=6500.0), rate, SR)
    expected = _tone(SR, 1.0, freq=6500.0)[: passband.numel()]
    assert (passband[800:-800] - expected[800:-800]).abs().max().item() < 1e-3


def test_resampling_to_the_same_rate_is_the_identity():
    x = _noise(1.5, seed=9)
    assert audio.resample(x, SR, SR) is x
    assert torch.equal(audio.resample(x, SR), x)


@pytest.mark.parametrize("rates", [(44100, 16000), (48000, 16000), (22050, 16000), (8000, 16000),
                                   (32000, 16000), (16000, 44100), (16000, 24000), (12345, 16000)])
def test_resampled_length_is_rounded(rates):
    orig, new = rates
    for n in (0, 1, 2, 3, 7, 100, 441, 999, 4410, 12347):
        y = audio.resample(torch.zeros(n), orig, new)
        exact = Fraction(n * new, orig)
        assert y.numel() == math.floor(exact + Fraction(1, 2))  # halves round up
        if exact.denominator != 2:
            assert y.numel() == round(n * new / orig)


def test_resampling_keeps_leading_dims_dtype_and_converts_integers():
    x = torch.randn(2, 3, 4410, dtype=torch.float64)
    y = audio.resample(x, 44100)
    assert y.shape == (2, 3, 1600) and y.dtype == torch.float64
    assert torch.allclose(y[1, 2], audio.resample(x[1, 2], 44100), rtol=0, atol=1e-12)
    ints = audio.resample(torch.ones(4800, dtype=torch.int16), 48000)
    assert ints.dtype == torch.float32 and ints.shape == (1600,)
    with pytest.raises(InputError):
        audio.resample(x, 0)


def test_gather_and_convolution_paths_agree():
    x = torch.randn(2, 20000, generator=torch.Generator().manual_seed(3))
    for orig in (44100, 22050, 8000, 48000):
        g = math.gcd(orig, SR)
        up, down = SR // g, orig // g
        n_out = (2 * x.shape[-1] * up + down) // (2 * down)
        cutoff = resampling.ROLLOFF * min(up, down) / (2 * down)
        half_width = resampling.ZERO_CROSSINGS / (2 * cutoff)
        args = (x, up, down, n_out, cutoff, half_width, math.ceil(half_width))
        a, b = resampling._resample_polyphase(*args), resampling._resample_direct(*args)
        assert a.shape == b.shape == (2, n_out)
        assert (a - b).abs().max().item() < 1e-5


def test_to_mono_averages_the_channel_axis():
    stereo = torch.stack([torch.ones(100), -3 * torch.ones(100)])
    assert torch.equal(audio.to_mono(stereo), -torch.ones(100))
    batch = torch.randn(2, 3, 50)
    assert torch.equal(audio.to_mono(batch), batch.mean(dim=1))
    mono = torch.randn(50)
    assert audio.to_mono(mono) is mono
    assert audio.to_mono(torch.ones(2, 10, dtype=torch.int16)).dtype == torch.float32
