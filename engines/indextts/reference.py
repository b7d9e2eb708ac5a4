"""IndexTTS 2's reference audio: the clips and features infer_v2.py takes from the speaker and emotion prompts.

Matches index-tts/index-tts ee40fa7 `indextts/infer_v2.py`: `IndexTTS2._load_and_cut_audio` and the start of
`infer_generator` (the speaker prompt's 22.05 and 16 kHz clips, `mel_fn`, the Kaldi fbank and CAM++ style), with
`__init__`'s mel_fn arguments read from config.yaml's s2mel section. What the clips then feed (w2v-BERT features,
the codec's S_ref, the length regulator's prompt condition) lives with those models (s2mel.py for the last).

    speaker prompt (any rate, any channels)
      -> librosa.load(path)'s defaults: float32, channels averaged, soxr_hq to 22050 Hz; the first 15 s
      -> torchaudio Resample(22050, 22050), the identity: audio_22k -> mel_fn -> ref_mel (1, 80, frames)
      -> torchaudio Resample(22050, 16000): audio_16k -> w2v-BERT features; Kaldi fbank (80 bins, no dither)
         minus its mean over time -> CAM++ -> style (1, 192)
    emotion prompt -> librosa.load(path, sr=16000): the same to mono, soxr_hq to 16 kHz, the first 15 s

Upstream reads a file; Mizuoto gets the host's waveform (the samples librosa would read), so the decoding step is
not ported: a file read by mizuoto.audio.files gives the same float32 samples as soundfile does for WAV/FLAC.
The mel's fmax follows upstream's reading of the config exactly: the string "None" (the released value) means
half the sample rate, and any other value, even YAML null or 11025, means 8000 Hz.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mizuoto.audio import kaldi_fbank, librosa_soxr, mel, torchaudio_sinc
from mizuoto.core.errors import CheckpointError, InputError

LOAD_RATE = 22050  # librosa.load's default sr: infer_v2 passes none for the speaker prompt
CONTENT_RATE = 16000  # w2v-BERT's and the Kaldi fbank's rate; the emotion prompt is loaded at it
PROMPT_SECONDS = 15  # both prompts are cut to their first 15 s
FMAX_WHEN_SET = 8000  # what IndexTTS2.__init__ takes for any fmax but the string "None"


def to_mono(wave, sr) -> torch.Tensor:
    """(samples,) or (channels, samples) audio -> (samples,) float32, channels averaged as librosa.to_mono
    averages them (numpy's float32 mean over the channel axis)."""
    if isinstance(sr, bool) or not isinstance(sr, int) or sr <= 0:
        raise InputError(f"the reference audio's sample rate must be a positive whole number of Hz, got {sr!r}")
    if not isinstance(wave, torch.Tensor) or wave.dim() not in (1, 2) or not wave.is_floating_point():
        what = f"{tuple(wave.shape)} {wave.dtype}" if isinstance(wave, torch.Tensor) else type(wave).__name__
        raise InputError(f"the reference audio must be a float waveform (samples,) or (channels, samples), got {what}")
    if wave.shape[-1] == 0 or (wave.dim() == 2 and wave.shape[0] == 0):
        raise InputError("the reference audio is empty; give a clip of speech")
    samples = wave.detach().to("cpu", torch.float32)
    if samples.dim() == 1:
        return samples.clone()
    return torch.from_numpy(np.mean(samples.numpy(), axis=0))  # float32 in, float32 out


def load_and_cut(wave, sr: int, rate: int = LOAD_RATE, seconds: float = PROMPT_SECONDS) -> torch.Tensor:
    """`_load_and_cut_audio` on the samples of a file: (1, samples) float32 at `rate`, at most int(seconds * rate)
    samples (the first ones)."""
    audio = to_mono(wave, sr)
    if sr != rate:
        audio = librosa_soxr.resample(audio, sr, rate)
    return audio.unsqueeze(0)[:, : int(seconds * rate)]


@dataclass(frozen=True)
class SpeakerAudio:
    """The speaker prompt as infer_generator holds it: audio_22k (1, n) and audio_16k (1, m), float32."""

    audio_22k: torch.Tensor
    audio_16k: torch.Tensor


def speaker_audio(wave, sr: int) -> SpeakerAudio:
    """The speaker prompt's two clips: loaded at 22.05 kHz and cut, then torchaudio's Resample transforms."""
    audio = load_and_cut(wave, sr)
    audio_22k = torchaudio_sinc.resample(audio, LOAD_RATE, 22050)  # equal rates: the clip itself
    audio_16k = torchaudio_sinc.resample(audio, LOAD_RATE, CONTENT_RATE, transform_kernel=True)
    return SpeakerAudio(audio_22k, audio_16k)


def emotion_audio(wave, sr: int) -> torch.Tensor:
    """The emotion prompt's clip: `_load_and_cut_audio(path, 15, sr=16000)`, (1, samples) float32."""
    return load_and_cut(wave, sr, rate=CONTENT_RATE)


@dataclass(frozen=True)
class MelSettings:
    """IndexTTS2.__init__'s mel_fn arguments (s2mel.preprocess_params)."""

    sample_rate: int = 22050
    n_fft: int = 1024
    win_length: int = 1024
    hop_length: int = 256
    n_mels: int = 80
    f_min: float = 0.0
    f_max: float | None = None

    @classmethod
    def from_section(cls, section: dict) -> "MelSettings":
        """From config.yaml's s2mel section, read as upstream reads it (fmin defaults to 0; fmax: see module)."""
        try:
            params = section["preprocess_params"]
            spect = params["spect_params"]
            values = {"sample_rate": int(params["sr"]), "n_fft": int(spect["n_fft"]),
                      "win_length": int(spect["win_length"]), "hop_length": int(spect["hop_length"]),
                      "n_mels": int(spect["n_mels"])}
        except (KeyError, TypeError, ValueError) as error:
            raise CheckpointError(f"config.yaml s2mel.preprocess_params lacks a usable {error}; check the model's "
                                  f"config") from None
        f_max = None if spect.get("fmax", "None") == "None" else FMAX_WHEN_SET
        return cls(**values, f_min=spect.get("fmin", 0), f_max=f_max)

    def mel(self, audio: torch.Tensor) -> torch.Tensor:
        """mel_spectrogram(audio.float(), ...): (1, samples) at sample_rate -> log mel (1, n_mels, frames)."""
        if audio.dim() != 2:
            raise InputError(f"the s2mel mel takes audio (batch, samples), got shape {tuple(audio.shape)}")
        return mel.hifigan_log_mel(audio.float(), sample_rate=self.sample_rate, n_fft=self.n_fft, n_mels=self.n_mels,
                                   hop_length=self.hop_length, win_length=self.win_length, f_min=self.f_min,
                                   f_max=self.f_max)


def fbank(audio_16k: torch.Tensor) -> torch.Tensor:
    """`kaldi.fbank(audio_16k, num_mel_bins=80, dither=0, sample_frequency=16000)` minus its mean over time:
    (frames, 80)."""
    if audio_16k.dim() != 2 or audio_16k.shape[0] != 1:
        raise InputError(f"the fbank takes one 16 kHz clip (1, samples), got shape {tuple(audio_16k.shape)}")
    if audio_16k.shape[1] < 400:  # one 25 ms frame
        raise InputError(f"the reference audio is too short for its speaker style: {audio_16k.shape[1]} samples "
                         f"at 16 kHz, it needs at least 400 (25 ms); give a longer clip")
    return kaldi_fbank.campplus_features(audio_16k)


def style(campplus, audio_16k: torch.Tensor) -> torch.Tensor:
    """CAM++'s style of the 16 kHz clip, `campplus_model(feat.unsqueeze(0))`: (1, embedding_size)."""
    return campplus(fbank(audio_16k).unsqueeze(0))
