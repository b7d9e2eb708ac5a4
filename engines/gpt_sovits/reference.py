"""What GPT-SoVITS takes from a reference recording (TTS._get_ref_spec and TTS._set_prompt_semantic at 48b1a01):

- the timbre input: the recording as torchaudio loads it (float, channels first), two channels averaged,
  resampled to the SoVITS rate with torchaudio's default sinc resampler, divided by min(2, peak) when the peak
  exceeds 1, then `spectrogram_torch`: reflect padding of (n_fft - hop) / 2 each side, an uncentred STFT with a
  periodic Hann window, magnitudes sqrt(re^2 + im^2 + 1e-8);
- the prompt: the recording as librosa loads it at 16 kHz (mono by mean, soxr resampling), 3 to 10 s long,
  followed by 0.3 x the SoVITS rate zero samples (9600 at 32 kHz: 0.6 s at 16 kHz, upstream's arithmetic),
  through CN-HuBERT (its raw samples, no feature-extractor normalisation: upstream calls `.model` directly),
  whose last hidden state SoVITS' `extract_latent` turns into semantic tokens. v5's branch (ac846f5) loads the
  prompt with torchaudio and resamples it to 16 kHz with resampy's kaiser_best in torch (load_audio_gpu with
  match_librosa: mizuoto/audio/resampy_kaiser.py) instead; the rest is the same.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mizuoto.audio import librosa_soxr, resampy_kaiser, torchaudio_sinc
from mizuoto.core.errors import InputError

PROMPT_RATE = 16000
PROMPT_MIN, PROMPT_MAX = 48000, 160000  # 3 s and 10 s at 16 kHz: upstream refuses references outside
PROMPT_SILENCE = 0.3  # seconds at the SoVITS rate, appended at 16 kHz


def linear_spectrogram(audio: torch.Tensor, n_fft: int, hop: int, win: int) -> torch.Tensor:
    """mel_processing.spectrogram_torch(center=False): (1, samples) -> (1, n_fft // 2 + 1, frames)."""
    pad = int((n_fft - hop) / 2)
    y = F.pad(audio.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)
    window = torch.hann_window(win).to(dtype=y.dtype, device=y.device)
    spec = torch.stft(y, n_fft, hop_length=hop, win_length=win, window=window, center=False, pad_mode="reflect",
                      normalized=False, onesided=True, return_complex=True)
    return torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-8)


def timbre_audio(wave: torch.Tensor, rate: int, sampling_rate: int) -> torch.Tensor:
    """A recording (channels, samples) at `rate` -> (1, samples) at the SoVITS rate, as _get_ref_spec prepares it."""
    if wave.dim() != 2 or wave.shape[1] == 0:
        raise InputError(f"a reference recording is (channels, samples), got {tuple(wave.shape)}")
    audio = wave.float()
    if audio.shape[0] == 2:  # upstream averages exactly two channels (a mono file stays as it is)
        audio = audio.mean(0).unsqueeze(0)
    if audio.shape[0] != 1:
        raise InputError(f"a reference recording has 1 or 2 channels, got {audio.shape[0]}")
    if rate != sampling_rate:
        audio = torchaudio_sinc.resample(audio, rate, sampling_rate)
    peak = audio.abs().max()
    if peak > 1:
        audio = audio / min(2, peak)
    return audio


def reference_spectrogram(wave: torch.Tensor, rate: int, sampling_rate: int, n_fft: int, hop: int,
                          win: int) -> torch.Tensor:
    return linear_spectrogram(timbre_audio(wave, rate, sampling_rate), n_fft, hop, win)


def prompt_samples(wave: torch.Tensor, rate: int, sampling_rate: int, kaiser: bool = False) -> torch.Tensor:
    """A recording (channels, samples) -> CN-HuBERT's input (1, samples + silence) at 16 kHz; `kaiser`: v5's
    resampling (resampy's kaiser_best) instead of librosa's soxr."""
    mono = wave.float().mean(0) if wave.dim() == 2 else wave.float()
    if rate == PROMPT_RATE:
        wav16k = mono
    elif kaiser:
        wav16k = resampy_kaiser.resample(mono.reshape(1, -1), rate, PROMPT_RATE)[0]
    else:
        wav16k = librosa_soxr.resample(mono, rate, PROMPT_RATE)
    if not PROMPT_MIN <= wav16k.shape[-1] <= PROMPT_MAX:
        raise InputError(f"the reference recording is {wav16k.shape[-1] / PROMPT_RATE:.2f} s long; GPT-SoVITS takes "
                         f"3 to 10 s: cut or choose another reference")
    silence = torch.zeros(int(sampling_rate * PROMPT_SILENCE), dtype=wav16k.dtype, device=wav16k.device)
    return torch.cat([wav16k.reshape(-1), silence]).unsqueeze(0)


def prompt_tokens(wave: torch.Tensor, rate: int, sampling_rate: int, hubert, sovits, kaiser: bool = False) \
        -> torch.Tensor:
    """The reference's semantic tokens (P,) for the GPT, from CN-HuBERT's last hidden state."""
    features = hubert(prompt_samples(wave, rate, sampling_rate, kaiser)).last_hidden_state.transpose(1, 2)
    return sovits.extract_latent(features)[0, 0]
