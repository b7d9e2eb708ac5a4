"""mizuoto.audio.librosa_soxr against librosa itself: `librosa.resample(res_type="soxr_hq")` for 15 rate pairs
(8 to 96 kHz into 16 and 24 kHz, and up), lengths from one sample to 2999, float32 and float64, mono and
stereo; and `librosa.load(path, sr=..., mono=True)` of a stereo 24-bit FLAC, a 16-bit WAV and a float WAV,
read here with mizuoto.audio.files, mixed to mono as the engines' reference check mixes, and resampled.

The set (tests/parity/data/audio/librosa_resample) is written by librosa 0.11.0 and soxr 1.1.0 themselves
(scripts/parity/librosa_resample_references.py, in the voxcpm oracle environment). Every output must be
identical: same length, same dtype, same bits.
"""

from __future__ import annotations

import json

import pytest
import torch
from helpers import reference_dir
from safetensors.torch import load_file

from mizuoto.audio import files
from mizuoto.audio.librosa_soxr import output_length, resample
from mizuoto.core.errors import InputError
from mizuoto.engines.spec import Reference


@pytest.fixture(scope="module")
def data():
    return reference_dir("audio/librosa_resample")


@pytest.fixture(scope="module")
def references(data):
    return json.loads((data / "references.json").read_text()), load_file(str(data / "references.safetensors"))


def test_every_case_is_librosas(references):
    info, tensors = references
    assert len(info["cases"]) == 15 * 6 * 2
    different = []
    for case in info["cases"]:
        x, want = tensors[f"{case['name']}/input"], tensors[f"{case['name']}/output"]
        got = resample(x, case["orig"], case["target"])
        if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
            different.append(case["name"])
    assert different == []


def test_librosa_load_is_read_mixed_and_resampled_here(references, data):
    """What VoxCPM2's `librosa.load(path, sr=16000, mono=True)` gives is what the host's reading (files.read),
    the reference check's mono mix and the engine's resample give."""
    info, tensors = references
    mix = Reference(0.0, 60.0)
    for load in info["loads"]:
        wave, rate = files.read(data / load["file"])
        mono = mix.check(wave, rate)
        got = resample(mono, rate, load["sr"])
        want = tensors[load["output"]]
        assert got.dtype == want.dtype and torch.equal(got, want), load


def test_equal_rates_return_the_input_and_lengths_follow_librosa():
    x = torch.rand(100)
    assert resample(x, 16000, 16000) is x
    assert output_length(4801, 48000, 16000) == 1601 and output_length(1, 44100, 16000) == 1
    assert resample(torch.rand(3, 5, 441), 44100, 16000).shape == (3, 5, 160)


@pytest.mark.parametrize("wave, rates, message", [
    (torch.zeros(10, dtype=torch.int16), (24000, 16000), "float32 or float64"),
    (torch.zeros(10), (0, 16000), "positive"),
    (torch.tensor(1.0), (24000, 16000), "time axis"),
])
def test_bad_input_is_one_line(wave, rates, message):
    with pytest.raises(InputError, match=message):
        resample(wave, *rates)
