"""GPT-SoVITS synthesis from prepared fragments: what api_v2's TTS.run (48b1a01) does between its text front end and
the file it returns, for batch_size 1 (api_v2's default) and no streaming.

    fragments (phones, BERT features, normalised text), in the order split_bucket puts them: sorted by the
    length of their normalised text (stable) when split_bucket is on and speed is 1 (and, for v3/v4, parallel_infer
    is off), else as given
    -> per fragment: T2S on [prompt phones + fragment phones] with [prompt BERT, fragment BERT] and the
       prompt's semantic tokens (prompt-free when there is no prompt text) -> the fragment's audio from those
       tokens with its phones only: v2 family SoVITS decode with every reference's timbre and the speed
       (`synthesize`); v3/v4 the CFM and vocoder of vocoder_synthesis.py
    -> audio_postprocess: each fragment divided by its peak when that exceeds 1, followed by fragment_interval
       seconds of silence, back in the text's order, joined, then upstream's int16 conversion
       `(audio * 32768).astype(np.int16)` (numpy's cast, wrap-around at +1.0 included)

The random draws come from one generator in upstream's order (set_seed seeds the global one): each fragment's
T2S races, then its SoVITS (or CFM) noise, fragment after fragment in the processing order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from mizuoto.core.errors import InputError

from .sovits import SynthesizerV2
from .t2s import T2SSampling, Text2Semantic


@dataclass(frozen=True)
class Fragment:
    """One piece of the split text after the front end: phone ids, BERT features (1024, phones), its text."""

    phones: tuple[int, ...]
    bert: torch.Tensor
    norm_text: str


@dataclass(frozen=True)
class Prompt:
    """The reference: its transcript's phones and BERT features (None without a transcript: prompt-free) and
    its semantic tokens (P,)."""

    phones: tuple[int, ...] | None
    bert: torch.Tensor | None
    semantic: torch.Tensor


def processing_order(fragments: list[Fragment], split_bucket: bool, speed: float, vocoder: bool = False,
                     parallel_infer: bool = True) -> list[int]:
    """to_batch's order at batch_size 1: by normalised-text length (a stable sort) when bucketing applies (TTS.run
    turns it off at speed != 1, and for v3/v4 with parallel_infer)."""
    indices = list(range(len(fragments)))
    if split_bucket and speed == 1.0 and not (vocoder and parallel_infer):
        indices.sort(key=lambda i: len(fragments[i].norm_text))
    return indices


# one fragment's semantic tokens (1, 1, T) and phone ids (1, L) -> its audio (samples,)
Decode = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def synthesize(t2s: Text2Semantic, sovits: SynthesizerV2, fragments: list[Fragment], prompt: Prompt,
               refers: list[torch.Tensor], sampling: T2SSampling, generator: torch.Generator, *,
               sv: list[torch.Tensor] | None = None, speed: float = 1.0, noise_scale: float = 0.5,
               **options) -> torch.Tensor:
    """The v2 family: each fragment's tokens through SoVITS' decode with every reference's timbre. The whole
    waveform (samples,) float32: upstream's int16 samples / 32768."""

    def decode(tokens: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        audio = sovits.decode(tokens, text, refers, generator, noise_scale=noise_scale, speed=speed, sv=sv)
        return audio[0, 0, :]

    return synthesize_with(t2s, decode, fragments, prompt, sampling, generator, speed=speed, **options)


def synthesize_with(t2s: Text2Semantic, decode: Decode, fragments: list[Fragment], prompt: Prompt,
                    sampling: T2SSampling, generator: torch.Generator, *, speed: float = 1.0,
                    fragment_interval: float = 0.3, split_bucket: bool = True, parallel_infer: bool = True,
                    vocoder: bool = False, sampling_rate: int = 32000,
                    before_fragment: Callable[[int, int], None] | None = None,
                    before_step: Callable[[], None] | None = None, graphs=None) -> torch.Tensor:
    """Every fragment's GPT tokens, then `decode`'s audio of them, fragment after fragment in the processing order
    (`vocoder`: v3/v4's bucketing rule); joined as audio_postprocess joins them, `fragment_interval` seconds of
    silence counted at `sampling_rate` (the SoVITS file's, whatever rate `decode` makes)."""
    if not fragments:
        raise InputError("there is no text to speak after splitting; give some words")
    if fragment_interval < 0:
        raise InputError(f"fragment_interval must be 0 or more seconds, got {fragment_interval}")
    order = processing_order(fragments, split_bucket, speed, vocoder, parallel_infer)
    device, dtype = t2s.bert_proj.weight.device, t2s.bert_proj.weight.dtype
    pieces: dict[int, torch.Tensor] = {}
    for done, index in enumerate(order):
        if before_fragment is not None:
            before_fragment(done, len(order))
        fragment = fragments[index]
        if prompt.phones is not None:
            phones = torch.tensor(prompt.phones + fragment.phones, dtype=torch.long)
            bert = torch.cat([prompt.bert, fragment.bert], 1)
            semantic = prompt.semantic
        else:
            phones, bert, semantic = torch.tensor(fragment.phones, dtype=torch.long), fragment.bert, None
        result = t2s.generate(phones.to(device), bert.to(device, dtype),
                              None if semantic is None else semantic.to(device), sampling, generator,
                              parallel_infer=parallel_infer, graphs=graphs, before_step=before_step)
        text = torch.tensor([fragment.phones], dtype=torch.long, device=device)
        pieces[index] = decode(result.tokens.view(1, 1, -1), text).detach()
    return postprocess([pieces[i] for i in range(len(fragments))], sampling_rate, fragment_interval)


def postprocess(fragments: list[torch.Tensor], sampling_rate: int, fragment_interval: float) -> torch.Tensor:
    """audio_postprocess without super-sampling: peaks above 1 scaled down, silences appended, joined, int16."""
    silence = None
    if fragment_interval > 0:
        silence = torch.zeros(int(sampling_rate * fragment_interval), dtype=fragments[0].dtype,
                              device=fragments[0].device)
    joined = []
    for audio in fragments:
        peak = torch.abs(audio).max()
        if peak > 1:
            audio = audio / peak
        joined.append(torch.cat([audio, silence], dim=0) if silence is not None else audio)
    samples = (torch.cat(joined, dim=0).cpu().numpy() * 32768).astype(np.int16)
    return torch.from_numpy(samples.astype(np.float32) / 32768)
