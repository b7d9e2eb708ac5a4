"""What GPT-SoVITS takes from a reference recording (engines/gpt_sovits/reference.py): the preparation around
upstream's spectrogram (whose own parity is in test_gpt_sovits_sovits.py) and around the prompt's CN-HuBERT
features, against TTS._get_ref_spec's and TTS._set_prompt_semantic's steps."""

import pytest
import torch

from mizuoto.audio import librosa_soxr, torchaudio_sinc
from mizuoto.core.errors import InputError
from mizuoto.engines.gpt_sovits import reference


def wave(channels: int, samples: int, scale: float = 0.5, seed: int = 0) -> torch.Tensor:
    return torch.randn(channels, samples, generator=torch.Generator().manual_seed(seed)) * scale


def test_two_channels_are_averaged_and_other_counts_refused():
    stereo = wave(2, 3200, 0.1)
    assert torch.equal(reference.timbre_audio(stereo, 32000, 32000), stereo.mean(0).unsqueeze(0))
    mono = wave(1, 3200, 0.1)
    assert torch.equal(reference.timbre_audio(mono, 32000, 32000), mono)
    with pytest.raises(InputError, match="1 or 2 channels"):
        reference.timbre_audio(wave(3, 3200), 32000, 32000)
    with pytest.raises(InputError, match=r"\(channels, samples\)"):
        reference.timbre_audio(torch.zeros(3200), 32000, 32000)


def test_other_rates_go_through_torchaudios_resampler_then_the_peak_rule():
    x = wave(1, 4410, 0.2)
    assert torch.equal(reference.timbre_audio(x, 44100, 32000), torchaudio_sinc.resample(x, 44100, 32000))
    loud = wave(1, 3200, 0.1)
    loud[0, 7] = 3.0  # peak above 2: divided by 2
    assert torch.equal(reference.timbre_audio(loud, 32000, 32000), loud / 2)
    loud[0, 7] = 1.5  # between 1 and 2: divided by the peak
    assert torch.equal(reference.timbre_audio(loud, 32000, 32000), loud / torch.tensor(1.5))


def test_the_spectrogram_has_upstreams_frames():
    spec = reference.reference_spectrogram(wave(1, 32000), 32000, 32000, 2048, 640, 2048)
    # reflect padding of (n_fft - hop) / 2 each side, uncentred: samples / hop frames
    assert spec.shape == (1, 1025, 50) and bool((spec > 0).all())


def test_the_prompt_is_3_to_10_seconds_followed_by_upstreams_silence():
    x = wave(1, 4 * 16000)
    samples = reference.prompt_samples(x, 16000, 32000)
    assert samples.shape == (1, 64000 + 9600)  # 0.3 x 32000 zeros, appended at 16 kHz
    assert torch.equal(samples[0, :64000], x[0]) and not samples[0, 64000:].any()
    resampled = reference.prompt_samples(wave(2, 4 * 32000), 32000, 32000)
    assert torch.equal(resampled[0, :-9600], librosa_soxr.resample(wave(2, 4 * 32000).mean(0), 32000, 16000))
    for seconds in (2.9, 10.1):
        with pytest.raises(InputError, match="GPT-SoVITS takes 3 to 10 s"):
            reference.prompt_samples(wave(1, int(seconds * 16000)), 16000, 32000)


def test_prompt_tokens_come_from_the_last_hidden_state():
    class Hubert:
        def __init__(self):
            self.seen = None

        def __call__(self, samples):
            self.seen = samples
            features = torch.randn(1, samples.shape[1] // 320, 768, generator=torch.Generator().manual_seed(1))
            return type("Output", (), {"last_hidden_state": features})()

    class SoVITS:
        def extract_latent(self, features):
            assert features.shape[1] == 768  # (1, 768, frames): transposed as upstream does
            return features[:, :1, ::2].argmax(1, keepdim=True)

    hubert = Hubert()
    tokens = reference.prompt_tokens(wave(1, 3 * 16000), 16000, 32000, hubert, SoVITS())
    assert hubert.seen.shape == (1, 48000 + 9600) and tokens.dim() == 1 and tokens.shape[0] == (57600 // 320 + 1) // 2
