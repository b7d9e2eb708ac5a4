"""mizuoto/audio/resampy_kaiser.py beyond its parity set (gpt_sovits_v5's resample cases, upstream's own function):
the stored table is resampy's kaiser_best shape, equal rates copy, lengths are int(samples * ratio), a band-limited
tone survives, rows are independent, and bad input is a one-line error."""

import math

import pytest
import torch

from mizuoto.audio import resampy_kaiser
from mizuoto.core.errors import InputError


def test_the_table_is_a_half_window_of_50_zero_crossings():
    table = resampy_kaiser._table()
    assert table.dtype == torch.float32 and table.numel() == 50 * resampy_kaiser.PRECISION + 1
    assert table[0] == table.max() and 0.9 < float(table[0]) < 0.92  # the rolloff, at the centre
    assert abs(float(table[-1])) < 1e-6  # tapered to nothing at the last zero crossing


def test_equal_rates_copy_and_lengths_follow_the_ratio():
    audio = torch.randn(2, 1001, generator=torch.Generator().manual_seed(0))
    same = resampy_kaiser.resample(audio, 16000, 16000)
    assert torch.equal(same, audio) and same.data_ptr() != audio.data_ptr()
    for rate in (44100, 22050, 8000):
        assert resampy_kaiser.resample(audio, rate, 16000).shape == (2, int(1001 * (16000 / rate)))


def test_a_tone_below_both_nyquists_comes_through():
    rate, freq = 48000, 1000.0
    t = torch.arange(rate, dtype=torch.float64) / rate
    out = resampy_kaiser.resample(torch.sin(2 * math.pi * freq * t).float()[None], rate, 16000)[0]
    want = torch.sin(2 * math.pi * freq * torch.arange(out.numel(), dtype=torch.float64) / 16000).float()
    assert (out[200:-200] - want[200:-200]).abs().max() < 1e-3


def test_rows_are_resampled_independently():
    audio = torch.randn(2, 3000, generator=torch.Generator().manual_seed(1))
    both = resampy_kaiser.resample(audio, 32000, 16000)
    assert torch.equal(both[1], resampy_kaiser.resample(audio[1:], 32000, 16000)[0])


def test_bad_input_is_a_one_line_error():
    with pytest.raises(InputError, match="takes .channels, samples. audio"):
        resampy_kaiser.resample(torch.zeros(10), 32000, 16000)
    with pytest.raises(InputError, match="sample rates must be positive"):
        resampy_kaiser.resample(torch.zeros(1, 10), 0, 16000)
