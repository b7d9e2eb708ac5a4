"""The log-mel features transformers' `WhisperFeatureExtractor` (4.57) gives a Whisper encoder, computed the same way.

Seed-VC feeds its content encoder through the feature extractor (`extractor([audio], return_tensors="pt",
return_attention_mask=True, sampling_rate=16000)`), whose torch path differs from openai-whisper's
`log_mel_spectrogram` (engines/whisper/audio.py) in its filter bank: transformers computes the Slaney bank in
float64 itself and rounds it to float32 when it multiplies, as a transposed view (`mel_filters.T @ power`).
The steps: zeros appended up to 30 s (longer audio is cut there), a centred STFT with a periodic Hann window,
the last frame dropped, power, the projection, log10 of max(x, 1e-10), a floor at each clip's maximum minus 8,
then (x + 4) / 4. The attention mask it also returns does not change the encoder's input (SpecAugment runs
only in training), so it is not computed.
"""

from __future__ import annotations

from functools import lru_cache

import torch

from mizuoto.core.errors import InputError

from .mel import transformers_slaney_bank

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
CHUNK_SECONDS = 30
N_SAMPLES = CHUNK_SECONDS * SAMPLE_RATE


@lru_cache(maxsize=4)
def _bank(n_mels: int) -> torch.Tensor:
    """(n_fft // 2 + 1, n_mels) float32, the layout transformers keeps (it multiplies by the transpose)."""
    bank = transformers_slaney_bank(1 + N_FFT // 2, n_mels, 0.0, 8000.0, SAMPLE_RATE)
    return torch.from_numpy(bank).to(torch.float32)


def log_mel(audio: torch.Tensor, n_mels: int = 80) -> torch.Tensor:
    """16 kHz mono audio (samples,) or a batch (batch, samples) -> features (batch, n_mels, 3000), float32 on
    the CPU, as the feature extractor returns them for 30 s windows."""
    audio = torch.as_tensor(audio).detach().to("cpu", torch.float32)
    if audio.dim() == 1:
        audio = audio[None]
    if audio.dim() != 2 or audio.shape[-1] == 0:
        raise InputError(f"the Whisper features take mono 16 kHz audio; got shape {tuple(audio.shape)}")
    if audio.shape[-1] >= N_SAMPLES:
        audio = audio[:, :N_SAMPLES].contiguous()
    else:
        audio = torch.nn.functional.pad(audio, (0, N_SAMPLES - audio.shape[-1]))
    stft = torch.stft(audio, N_FFT, HOP_LENGTH, window=torch.hann_window(N_FFT), return_complex=True)
    power = stft[..., :-1].abs() ** 2
    mel = _bank(n_mels).T @ power
    log_spec = torch.clamp(mel, min=1e-10).log10()
    peak = log_spec.max(dim=2, keepdim=True)[0].max(dim=1, keepdim=True)[0]
    log_spec = torch.maximum(log_spec, peak - 8.0)
    return (log_spec + 4.0) / 4.0
