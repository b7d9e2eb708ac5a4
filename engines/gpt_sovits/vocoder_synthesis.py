"""From semantic tokens to a waveform for GPT-SoVITS v3, v4 and v5: TTS.using_vocoder_synthesis (parallel_infer off) and
TTS.using_vocoder_synthesis_batched_infer (parallel_infer on, api_v2's default) at 48b1a01, and v5's branch of
using_vocoder_synthesis at ac846f5 (render_v5).

    reference: its mel (v3: 24 kHz, n_fft 1024, hop 256; v4: 32 kHz, n_fft 1280, hop 320; 100 bands, log, then
      scaled from [-12, 2] to [-1, 1]) and decode_encp of its semantic tokens and transcript (fea_ref), both cut
      to the shorter and to the last T_ref frames: the CFM's prompt
    fragment: decode_encp of its tokens and phones -> features cut into chunks of T_chunk - T_ref frames
      -> the CFM (sample_steps Euler steps) continues the prompt's mel over each chunk -> mels back to [-12, 2]
      -> vocoder (v3 BigVGAN 24 kHz, v4 HiFi-GAN 48 kHz)

- parallel: the chunks overlap by 12 frames (the features are padded by 12 zero frames in front), all of them go
  through the CFM as one batch with the same prompt, the vocoder runs once over their mels laid end to end, and
  the chunks' audio is joined by SOLA (the best alignment within 320 samples, then a Hann cross-fade);
- rolling: chunk after chunk, each prompted by the previous chunk's last mels and features.

- v5 (v5dev, v5turbo): v4's reference mel, prompt and vocoder (its own release of the file), and v5's rolling
  chunks (cfm_v5.synthesize) with parallel_infer on or off: upstream's batched path renders v5 fragment by fragment.

Each CFM call draws its starting noise from the request's generator (upstream: the global one), after the GPT's
draws of the same fragment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mizuoto.audio import torchaudio_sinc
from mizuoto.audio.mel import hifigan_log_mel
from mizuoto.core.errors import InputError

from . import cfm_v5
from .sovits_v3 import SynthesizerV3
from .vocoder import V3_SAMPLING_RATE, V3_UPSAMPLE, V4_SAMPLING_RATE, V4_UPSAMPLE

SPEC_MIN, SPEC_MAX = -12, 2  # the mel range the CFM was trained on (norm_spec)
SOLA_SEARCH = 320  # samples the join may shift by
V3_STEPS = 32  # sampling_defaults' legacy_steps: v3/v4's sample_steps when a request names none


@dataclass(frozen=True)
class VocoderLayout:
    """TTS.init_vocoder's vocoder_configs and the reference mel's parameters (mel_fn, mel_fn_v4)."""

    sampling_rate: int  # the vocoder's output
    mel_rate: int  # the reference is resampled to this for its mel
    n_fft: int
    hop: int
    t_ref: int  # at most this many prompt frames
    t_chunk: int  # prompt + chunk frames per CFM call
    upsample: int  # output samples per mel frame
    overlap: int = 12  # frames shared by neighbouring chunks (parallel)


LAYOUTS = {"v3": VocoderLayout(V3_SAMPLING_RATE, 24000, 1024, 256, 468, 934, V3_UPSAMPLE),
           "v4": VocoderLayout(V4_SAMPLING_RATE, 32000, 1280, 320, 500, 1000, V4_UPSAMPLE)}
LAYOUTS["v5dev"] = LAYOUTS["v5turbo"] = LAYOUTS["v4"]  # v5's chunking is its own (cfm_v5), t_ref included


def norm_spec(x: torch.Tensor) -> torch.Tensor:
    return (x - SPEC_MIN) / (SPEC_MAX - SPEC_MIN) * 2 - 1


def denorm_spec(x: torch.Tensor) -> torch.Tensor:
    return (x + 1) / 2 * (SPEC_MAX - SPEC_MIN) + SPEC_MIN


def reference_mel(wave: torch.Tensor, rate: int, layout: VocoderLayout) -> torch.Tensor:
    """The recording as torchaudio loads it (channels, samples) -> its normalised mel (1, 100, frames): two channels
    averaged, resampled with torchaudio's sinc resampler, mel_spectrogram_torch (magnitudes with 1e-8), norm_spec.
    Unlike the timbre's spectrogram, the peak is left as it is."""
    audio = wave.float()
    if audio.shape[0] == 2:
        audio = audio.mean(0).unsqueeze(0)
    if rate != layout.mel_rate:
        audio = torchaudio_sinc.resample(audio, rate, layout.mel_rate)
    mel = hifigan_log_mel(audio, sample_rate=layout.mel_rate, n_fft=layout.n_fft, n_mels=100, hop_length=layout.hop,
                          win_length=layout.n_fft, magnitude_eps=1e-8)
    return norm_spec(mel)


@dataclass(frozen=True)
class MelPrompt:
    """What the CFM continues from: the reference's mels and features (1, C, frames), equally long, and its ge."""

    mel: torch.Tensor
    features: torch.Tensor
    ge: torch.Tensor

    @property
    def frames(self) -> int:
        return self.mel.shape[2]


def mel_prompt(synth: SynthesizerV3, layout: VocoderLayout, codes: torch.Tensor, phones: torch.Tensor,
               refer: torch.Tensor, mel: torch.Tensor) -> MelPrompt:
    """decode_encp of the reference's tokens (1, 1, P) and transcript (1, L) with its timbre, beside its mel
    (reference_mel), both cut to the shorter and then to the last t_ref frames."""
    ge = synth.timbre(refer)
    fea_ref = synth.features(codes, phones, ge)
    frames = min(mel.shape[2], fea_ref.shape[2])
    mel, fea_ref = mel[:, :, :frames], fea_ref[:, :, :frames]
    if frames > layout.t_ref:
        mel, fea_ref = mel[:, :, -layout.t_ref:], fea_ref[:, :, -layout.t_ref:]
    return MelPrompt(mel.to(fea_ref.dtype), fea_ref, ge)


def _cfm(synth: SynthesizerV3, features: torch.Tensor, mel: torch.Tensor, steps: int, generator: torch.Generator,
         graphs=None, before_step=None) -> torch.Tensor:
    """cfm.inference(features (B, C, T) as (B, T, C), x_lens [T], the prompt mel, steps, cfg 0)."""
    fea = features.transpose(2, 1)
    lengths = torch.tensor([fea.shape[1]], dtype=torch.long, device=fea.device)
    return synth.cfm.inference(fea, lengths, mel, steps, generator=generator, graphs=graphs, before_step=before_step)


def render_rolling(synth: SynthesizerV3, vocoder, layout: VocoderLayout, prompt: MelPrompt, codes: torch.Tensor,
                   phones: torch.Tensor, steps: int, generator: torch.Generator, speed: float = 1.0, graphs=None,
                   before_step=None) -> torch.Tensor:
    """using_vocoder_synthesis: one fragment (tokens (1, 1, T), phones (1, L)) -> its audio (samples,)."""
    mel, fea_ref, frames = prompt.mel, prompt.features, prompt.frames
    chunk_len = layout.t_chunk - frames
    todo = synth.features(codes, phones, prompt.ge, speed)
    mels, start = [], 0
    while True:
        chunk = todo[:, :, start:start + chunk_len]
        if chunk.shape[-1] == 0:
            break
        start += chunk_len
        out = _cfm(synth, torch.cat([fea_ref, chunk], 2), mel, steps, generator, graphs, before_step)
        out = out[:, :, mel.shape[2]:]
        mel, fea_ref = out[:, :, -frames:], chunk[:, :, -frames:]
        mels.append(out)
    return vocoder(denorm_spec(torch.cat(mels, 2)))[0][0]


def render_v5(synth: SynthesizerV3, vocoder, prompt: MelPrompt, codes: torch.Tensor, phones: torch.Tensor,
              steps: int, cfg: float, generator: torch.Generator, speed: float = 1.0, graphs=None,
              before_step=None) -> torch.Tensor:
    """v5's using_vocoder_synthesis: one fragment (tokens (1, 1, T), phones (1, L)) -> its audio (samples,), the
    CFM's chunks rolling from the reference (synthesize_v5_mel), then the vocoder."""
    todo = synth.features(codes, phones, prompt.ge, speed)
    mel = cfm_v5.synthesize(synth.cfm, prompt.features, todo, prompt.mel, steps, cfg, generator, graphs,
                            before_step)
    return vocoder(denorm_spec(mel))[0][0]


def render_batched(synth: SynthesizerV3, vocoder, layout: VocoderLayout, prompt: MelPrompt,
                   fragments: list[tuple[torch.Tensor, torch.Tensor]], steps: int, generator: torch.Generator,
                   speed: float = 1.0, graphs=None, before_step=None) -> list[torch.Tensor]:
    """using_vocoder_synthesis_batched_infer: fragments [(tokens (1, 1, T), phones (1, L))] -> their audio."""
    chunk_len, overlap = layout.t_chunk - prompt.frames, layout.overlap
    features = [synth.features(codes, phones, prompt.ge, speed) for codes, phones in fragments]
    padded = F.pad(torch.cat(features, 2), (overlap, 0), "constant", 0)
    chunks, pos, padding = [], 0, 0
    while True:  # upstream's loop: a last chunk that holds only the overlap is kept too
        if pos != 0:
            pos -= overlap
        chunk = padded[:, :, pos:pos + chunk_len]
        pos += chunk_len
        if chunk.shape[-1] == 0:
            break
        padding = chunk_len - chunk.shape[2]
        chunks.append(F.pad(chunk, (0, padding), "constant", 0) if padding else chunk)
    batch = torch.cat(chunks, 0)
    fea = torch.cat([prompt.features.repeat(batch.shape[0], 1, 1), batch], 2)
    mels = _cfm(synth, fea, prompt.mel, steps, generator, graphs, before_step)[:, :, -chunk_len:]
    mels = mels.permute(1, 0, 2).contiguous().view(mels.shape[1], -1).unsqueeze(0)
    audio = vocoder(denorm_spec(mels))[0][0]
    step = chunk_len * layout.upsample
    audio = sola([audio[p:p + step] for p in range(0, audio.shape[-1], step)], overlap * layout.upsample)
    audio = audio[overlap * layout.upsample:-padding * layout.upsample] if padding > 0 else \
        audio[overlap * layout.upsample:]
    pieces = []
    for fea_ in features:
        pieces.append(audio[:fea_.shape[2] * layout.upsample])
        audio = audio[fea_.shape[2] * layout.upsample:]
    return pieces


def sola(pieces: list[torch.Tensor], overlap: int, search: int = SOLA_SEARCH) -> torch.Tensor:
    """TTS.sola_algorithm: each piece's start is aligned with the previous piece's last `overlap` samples (the shift
    within `search` samples of best normalised correlation), then cross-faded over them with a Hann window. Each
    piece loses its last `overlap` samples and its first `shift` ones."""
    dtype = pieces[0].dtype
    pieces = list(pieces)
    for i in range(len(pieces) - 1):
        f1, f2 = pieces[i].float(), pieces[i + 1].float()
        w1, w2 = f1[-overlap:], f2[:overlap + search]
        corr = F.conv1d(w2.view(1, 1, -1), w1.view(1, 1, -1)).view(-1)
        energy = F.conv1d(w2.view(1, 1, -1) ** 2, torch.ones_like(w1).view(1, 1, -1)).view(-1) + 1e-8
        shift = (corr / energy.sqrt()).argmax()
        pieces[i] = f1[:-overlap]
        joined = f2[shift:]
        window = torch.hann_window(overlap * 2, device=f1.device, dtype=f1.dtype)
        # in place, as upstream: the cross-fade writes into the piece (a view of the vocoder's output)
        joined[:overlap] = window[:overlap] * joined[:overlap] + window[overlap:] * f1[-overlap:]
        pieces[i + 1] = joined
    return torch.cat(pieces, 0).to(dtype)


def check_sample_steps(steps: int) -> int | None:
    """The declaration's bounds (the host checks them first: a library caller gets the same message); 0 is None,
    the version's default (api_v2's sample_steps=None at ac846f5; 32 at 48b1a01, which named no other version)."""
    if not isinstance(steps, int) or isinstance(steps, bool) or not 0 <= steps <= 128:
        raise InputError(f"sample_steps must be between 0 and 128 (0: the version's default), got {steps!r}")
    return steps or None


def sampling(version: str, steps: int, cfg: float) -> tuple[int, float]:
    """A request's (sample_steps, cfg_rate) -> the CFM's: 0 steps and a negative cfg are the version's defaults
    (resolve_sampling); v3/v4 have no guidance."""
    steps = check_sample_steps(steps)
    if not isinstance(cfg, (int, float)) or isinstance(cfg, bool) or not math.isfinite(cfg):
        raise InputError(f"cfg_rate must be a number, got {cfg!r}")
    if version in cfm_v5.DEFAULTS:
        return cfm_v5.v5_sampling(version, steps, None if cfg < 0 else cfg)
    if cfg >= 0:
        raise InputError(f"{version} has no classifier-free guidance (cfg_rate is v5's): set cfg_rate to -1")
    return steps or V3_STEPS, 0.0
