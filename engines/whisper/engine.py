"""Loading and transcribing for the Whisper engine."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy
import torch

from mizuoto.core.errors import InputError
from mizuoto.core.options import RuntimeOptions
from mizuoto.runtime.context import RequestContext
from mizuoto.runtime.handles import ModelHandle

from . import checkpoint
from .audio import SAMPLE_RATE
from .model import Whisper
from .steps import DecoderSteps


@dataclass
class WhisperLoaded:
    model: Whisper
    source: str
    handle: ModelHandle
    options: RuntimeOptions
    steps: DecoderSteps | None = None  # the decoder's one-token step, with its CUDA graphs when used

    @property
    def device(self) -> torch.device:
        return self.model.decoder.token_embedding.weight.device


def load(source: str | Path | None, device: torch.device, dtype: torch.dtype,
         options: RuntimeOptions) -> WhisperLoaded:
    if source is None:
        raise InputError("Whisper needs a checkpoint: an openai .pt file or a Hugging Face folder")
    model = checkpoint.load(source, device=device, dtype=dtype)
    return WhisperLoaded(model, str(source), ModelHandle(model, device), options)


def rebind(previous: WhisperLoaded, options: RuntimeOptions) -> WhisperLoaded:
    """The same weights under other runtime options: nothing reloads; the weights' handle (and so
    their CUDA graphs) is shared."""
    return replace(previous, options=options,
                   steps=previous.steps if options.cuda_graphs == previous.options.cuda_graphs else None)


def decode_steps(loaded: WhisperLoaded) -> DecoderSteps:
    """The decoder's one-token step: CUDA graphs of everything but attention when they are usable for
    this model now (kept on the loaded model across requests and windows), else the same segments
    eagerly."""
    graphs = loaded.handle.graphs_for(loaded.options.cuda_graphs)
    if loaded.steps is None or loaded.steps.graphs is not graphs:
        loaded.steps = DecoderSteps(loaded.model.decoder, graphs)
    return loaded.steps


def to_options(params: dict) -> dict:
    """Node/CLI parameters -> transcribe()'s keyword arguments, with openai-whisper's CLI semantics:
    a temperature list grows from `temperature` by `temperature_increment_on_fallback`; 0 means off for
    beam_size, best_of and patience; "auto" language means detect it."""
    p = dict(params)
    increment = p.pop("temperature_increment_on_fallback")
    start = p.pop("temperature")
    # numpy's float64 arange, as openai-whisper's CLI builds it: float32 steps would change the logits.
    temperature = tuple(numpy.arange(start, 1.0 + 1e-6, increment)) if increment and increment > 0 else start
    options = {"temperature": temperature, "language": None if p["language"] == "auto" else p["language"]}
    for name in ("beam_size", "best_of", "patience", "length_penalty"):
        options[name] = p[name] or None
    for name in ("task", "initial_prompt", "condition_on_previous_text", "compression_ratio_threshold",
                 "logprob_threshold", "no_speech_threshold", "word_timestamps", "clip_timestamps",
                 "carry_initial_prompt", "without_timestamps"):
        options[name] = p[name]
    options["initial_prompt"] = options["initial_prompt"] or None
    options["hallucination_silence_threshold"] = p["hallucination_silence_threshold"] or None
    options["fp16"] = False  # the network computes in the dtype it was loaded in
    return options


def transcribe(loaded: WhisperLoaded, audio: torch.Tensor, ctx: RequestContext, params: dict) -> dict:
    """16 kHz mono float32 audio -> openai-whisper's result dict (text, segments, language), plus
    `language_probs` when the language was detected."""
    from .transcribe import transcribe as run

    if audio.dim() != 1 or audio.shape[0] == 0:
        raise InputError("Whisper needs mono audio with at least one sample")
    # The policy is bound for the whole run (encoder, word alignment) and again around every decoder
    # step, which is also where a cancellation is seen.
    detected = {}
    with torch.inference_mode(), ctx.step():
        result = run(loaded.model, audio.to(torch.float32), generator=ctx.generator_for(loaded.device),
                     progress=ctx.progress, steps=decode_steps(loaded), step_scope=ctx.step,
                     on_language=detected.update, **to_options(params))
    if detected:  # the language was detected: its probabilities, most likely first
        result["language_probs"] = dict(sorted(detected.items(), key=lambda item: -item[1]))
    return result


__all__ = ["SAMPLE_RATE", "WhisperLoaded", "load", "rebind", "to_options", "transcribe"]
