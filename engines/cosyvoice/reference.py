"""A reference recording as CosyVoice's frontend reads it (cosyvoice/cli/frontend.py: `_extract_speech_feat`,
`_extract_speech_token`, `_extract_spk_embedding` and the token/mel alignment of `frontend_zero_shot`).

Upstream loads the prompt file three times, each time mono (the channels' mean) and resampled with torchaudio's
`transforms.Resample` when its rate differs (and refused below 16 kHz):

    24 kHz -> the flow's prompt mel: matcha's mel_spectrogram (n_fft 1920, hop 480, 80 bands; CosyVoice 2's fmax 8000,
              CosyVoice 3's none), (1, frames, 80)
    16 kHz -> the speech tokens: whisper's 128-band log-mel through speech_tokenizer_v2/v3 (here: the ported S3
              tokenizer, no ONNX Runtime), 30 s at most
    16 kHz -> the speaker embedding: Kaldi fbank (80 bins, no dither) minus its mean through campplus.onnx (here: the
              ported CAM++), (1, 192)

At 24 kHz (both releases) the mel and the tokens are then cut to a common length: min(frames // 2, tokens) tokens
and twice as many frames.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mizuoto.audio.mel import hifigan_log_mel
from mizuoto.audio.torchaudio_sinc import resample
from mizuoto.core.errors import InputError
from mizuoto.nn.campplus import style_vector
from mizuoto.nn.s3_tokenizer import S3Tokenizer, speech_tokens

TOKENIZER_RATE = 16000  # the speech tokenizer's and CAM++'s input rate
MIN_RATE = 16000  # load_wav's min_sr: upstream refuses a prompt below it
MAX_TOKEN_SECONDS = 30  # _extract_speech_token's limit
MEL = {"n_fft": 1920, "n_mels": 80, "hop_length": 480, "win_length": 1920, "f_min": 0.0}  # the yaml's feat_extractor
FEAT_FMAX = {2: 8000.0, 3: None}


@dataclass
class PromptSpeech:
    """What a recording gives the model: the flow's prompt mel (1, 2S, 80), its speech tokens (1, S) int32 (the LM's
    and the flow's), and the speaker embedding (1, 192)."""

    feat: torch.Tensor
    tokens: torch.Tensor
    embedding: torch.Tensor


def load_wav(wave: torch.Tensor, rate: int, target: int) -> torch.Tensor:
    """upstream's load_wav on a mono float wave (samples,) -> (1, samples at `target`)."""
    wave = wave.reshape(1, -1).float().cpu()
    if rate != target:
        if rate < MIN_RATE:
            raise InputError(f"the reference audio is at {rate} Hz; CosyVoice needs {MIN_RATE} Hz or more "
                             "(upstream refuses lower rates): give a better recording")
        wave = resample(wave, rate, target, transform_kernel=True)
    return wave


def speech_feat(wave_24k: torch.Tensor, version: int, sample_rate: int = 24000) -> torch.Tensor:
    """The flow's prompt mel (1, frames, 80) of a (1, samples) wave at the model's rate."""
    mel = hifigan_log_mel(wave_24k, sample_rate=sample_rate, f_max=FEAT_FMAX[version], **MEL)
    return mel.squeeze(dim=0).transpose(0, 1).unsqueeze(dim=0)


def speaker_embedding(campplus: torch.nn.Module, wave_16k: torch.Tensor) -> torch.Tensor:
    """(1, 192) float32: CAM++ on the fbank minus its mean, as `_extract_spk_embedding` (ONNX there)."""
    device = next(campplus.parameters()).device
    with torch.inference_mode():
        return style_vector(campplus, wave_16k.to(device)).reshape(1, -1).float().cpu()


def prompt_speech(wave: torch.Tensor, rate: int, version: int, tokenizer: S3Tokenizer, campplus: torch.nn.Module,
                  sample_rate: int = 24000) -> PromptSpeech:
    """A mono reference (samples,) at `rate` -> its PromptSpeech, as frontend_zero_shot builds it."""
    wave_16k = load_wav(wave, rate, TOKENIZER_RATE)
    if wave_16k.shape[1] / TOKENIZER_RATE > MAX_TOKEN_SECONDS:
        raise InputError(f"the reference audio is {wave_16k.shape[1] / TOKENIZER_RATE:.1f} s long; CosyVoice's "
                         f"speech tokenizer takes at most {MAX_TOKEN_SECONDS} s: cut it")
    feat = speech_feat(load_wav(wave, rate, sample_rate), version, sample_rate)
    device = next(tokenizer.parameters()).device
    with torch.inference_mode():
        tokens = speech_tokens(tokenizer, wave_16k.to(device)).to(torch.int32).cpu()
    if sample_rate == 24000:  # upstream's "force speech_feat % speech_token = 2" (resample_rate == 24000)
        count = min(int(feat.shape[1] / 2), tokens.shape[1])
        feat, tokens = feat[:, :2 * count], tokens[:, :count]
    if tokens.shape[1] == 0:
        raise InputError("the reference audio is too short for a single speech token (40 ms); give a longer one")
    return PromptSpeech(feat, tokens, speaker_embedding(campplus, wave_16k))
