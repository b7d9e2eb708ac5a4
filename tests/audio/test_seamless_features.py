"""mizuoto/audio/seamless_features.py in process: shapes, padding and masks as the extractor lays them out.

Bit-for-bit agreement with transformers 4.52.1's SeamlessM4TFeatureExtractor is checked against the set
indextts/w2vbert by tests/nn/test_w2v_bert.py (its pinned subprocess computes the features of every recorded
waveform).
"""

import numpy as np
import pytest
import torch

from mizuoto.audio import seamless_features as sf


def tone(samples: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(samples) / 16000
    return 0.3 * torch.sin(2 * torch.pi * 220 * t) + 0.05 * torch.randn(samples, generator=g)


@pytest.mark.parametrize("samples, frames", [(560, 2), (5000, 29), (16000, 98), (16123, 99)])
def test_shapes_and_mask(samples, frames):
    features, mask = sf.features(tone(samples)[None])
    rows = (frames + frames % 2) // 2
    assert features.shape == (1, rows, 160) and features.dtype == torch.float32
    assert mask.shape == (1, rows) and mask.dtype == torch.int32
    # an odd frame count pads one frame of padding_value; its pair is masked
    assert mask[0, :-1].all() and bool(mask[0, -1]) == (frames % 2 == 0)
    if frames % 2:
        assert torch.all(features[0, -1, 80:] == sf.W2V_BERT_PADDING_VALUE)


def test_one_waveform_in_any_form_gives_the_same_features():
    wave = tone(8000)
    ours = sf.features(wave[None])
    for form in (wave, wave.numpy(), wave.double().numpy(), wave[None].numpy()):
        other = sf.features(form)
        assert torch.equal(other[0], ours[0]) and torch.equal(other[1], ours[1])


def test_a_batch_pads_to_the_longest_with_the_padding_value():
    a, b = tone(5000, 1), tone(3000, 2)
    features, mask = sf.features([a.numpy(), b.numpy()], padding_value=0.0)
    alone, _ = sf.features(b, padding_value=0.0)
    assert features.shape == (2, 15, 160) and mask.sum(-1).tolist() == [14, 8]
    assert torch.equal(features[1, :9], alone[0])  # b: 17 frames and one of padding in 9 rows, then rows of padding
    assert torch.all(features[1, 9:] == 0.0)


def test_normalised_per_bin():
    features, _ = sf.features(tone(32000))
    frames = features[0].reshape(-1, 80).double()
    assert frames.mean(0).abs().max() < 5e-4  # float32 arithmetic
    assert (frames.std(0) - 1).abs().max() < 1e-3


def test_the_bank_and_window_are_shared_read_only():
    bank, window = sf.kaldi_mel_bank(), sf.povey_window()
    assert bank.shape == (257, 80) and bank.dtype == np.float64 and not bank.flags.writeable
    assert window.shape == (400,) and not window.flags.writeable
    assert bank[0].max() == 0.0 and (bank.max(0) > 0).all()  # DC below 20 Hz; every filter has a bin
