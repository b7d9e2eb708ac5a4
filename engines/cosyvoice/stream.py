"""Streaming one CosyVoice request chunk by chunk, as upstream's CosyVoice2Model / CosyVoice3Model.tts(stream=True)
(cosyvoice/cli/model.py) chunks it:

    the LM's tokens accumulate; a chunk is vocoded as soon as `hop + look-ahead` new tokens are there (the first
    hop also covers the padding that rounds the flow prompt's tokens up to a multiple of 25); the hop starts at 25
    tokens and doubles after each chunk up to 100; the flow runs in its streaming (chunk-masked) mode on every
    token so far minus the look-ahead; the mel past what was vocoded goes to the vocoder; once the LM has ended,
    the rest is one last chunk with the flow's full attention and `finalize`.

The vocoders keep what upstream keeps per request: CosyVoice 3's causal HiFT vocodes the whole mel so far again and
returns the samples past the last chunk's (hift_causal.CausalHiFTStream); CosyVoice 2's HiFT vocodes the new mel
after an 8-frame mel cache, its source continued from the cached source, and cross-fades the first 3840 samples
with the previous chunk's held-back tail over a Hamming window (upstream's fade_in_out).

Upstream runs the LM in a thread and polls it every 0.1 s, so which draws come first depends on timing: CosyVoice 2's
HiFT draws from the global generator on the main thread while the LM thread samples from it (ENGINES.md §3). Ours is
sequential and defined: after each LM token the chunk it completes (if any) is vocoded, then the next token is drawn
(upstream's own code in that schedule is what the reference writer records). CosyVoice 3 draws nothing after the LM,
so its chunks do not depend on the order. Upstream also keeps the grown hop on the model for the next request; ours
starts every request at 25, as a freshly loaded upstream model does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np
import torch

from mizuoto.core.errors import InputError
from mizuoto.nn.hift_causal import CausalHiFTStream

from .llm import keep_silences

TOKEN_HOP, MAX_TOKEN_HOP, HOP_SCALE = 25, 100, 2  # token_hop_len, token_max_hop_len, stream_scale_factor
CV2_MEL_CACHE = 8  # CosyVoice2Model's mel_cache_len
CV2_SOURCE_CACHE = CV2_MEL_CACHE * 480  # its source_cache_len (samples)


class HiFTStream:
    """CosyVoice2Model.token2wav's HiFT part for one request (its hift_cache_dict entry)."""

    def __init__(self, hift: torch.nn.Module, generator: torch.Generator, decode=None):
        self.hift, self.generator, self.decode = hift, generator, decode
        self.cache: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # mel, source, speech
        # np.hamming in float64, as upstream multiplies by it (float32 * float64 promotes, then stored as float32)
        self.window = torch.from_numpy(np.hamming(2 * CV2_SOURCE_CACHE))

    def _fade(self, speech: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        n = CV2_SOURCE_CACHE
        window = self.window.to(speech.device)
        speech = speech.clone()
        speech[..., :n] = speech[..., :n] * window[:n] + previous[..., -n:] * window[n:]
        return speech

    def push(self, mel: torch.Tensor, finalize: bool) -> torch.Tensor:
        if self.cache is not None:
            mel = torch.concat([self.cache[0], mel], dim=2)
            cache_source = self.cache[1]
        else:
            cache_source = torch.zeros(1, 1, 0, device=mel.device)
        speech, source = self.hift.inference(mel, self.generator, cache_source=cache_source, decode=self.decode)
        if self.cache is not None:
            speech = self._fade(speech, self.cache[2])
        if finalize:
            return speech
        self.cache = (mel[:, :, -CV2_MEL_CACHE:], source[:, :, -CV2_SOURCE_CACHE:], speech[:, -CV2_SOURCE_CACHE:])
        return speech[:, :-CV2_SOURCE_CACHE]


def stream_request(model, text: torch.Tensor, prompt_text: torch.Tensor, llm_prompt_tokens: torch.Tensor,
                   flow_prompt_tokens: torch.Tensor, prompt_feat: torch.Tensor, embedding: torch.Tensor, *,
                   generator: torch.Generator, params, before_step: Callable[[], None] | None = None,
                   steps=None, solve=None, decode=None, lm_tokens: Iterator[int] | None = None
                   ) -> Iterator[torch.Tensor]:
    """One request's waveform, chunk by chunk ((1, n) each, on the model's device): CosyVoiceModel's LM, flow and
    vocoder as upstream's tts(stream=True); `steps` the LM's DecoderSteps, `solve` the flow's SolveGraphs, `decode`
    HiFT's compiled decode; `lm_tokens`: the LM's speech tokens from elsewhere (bistream.generate_bistream, for a
    text arriving in pieces), else `model.lm.generate` on `text`."""
    flow, device = model.flow, prompt_feat.device
    look, ratio = flow.config.pre_lookahead_len, flow.config.token_mel_ratio
    prompt = flow_prompt_tokens.to(torch.int32)
    prompt_len = torch.tensor([prompt.shape[1]], dtype=torch.int32, device=device)
    pad = math.ceil(prompt.shape[1] / TOKEN_HOP) * TOKEN_HOP - prompt.shape[1]
    vocoder = HiFTStream(model.hift, generator, decode) if model.version == 2 else CausalHiFTStream(model.hift, decode)
    tokens: list[int] = []
    state = {"offset": 0, "hop": TOKEN_HOP}

    def chunk(upto: int, finalize: bool) -> torch.Tensor:
        token = torch.tensor([tokens[:upto]], dtype=torch.int32, device=device)
        with torch.inference_mode():
            mel = flow.inference(token, torch.tensor([upto], dtype=torch.int32, device=device), prompt, prompt_len,
                                 prompt_feat, embedding, streaming=not finalize, finalize=finalize,
                                 before_step=before_step, solve=solve, generator=generator)
            return vocoder.push(mel[:, :, state["offset"] * ratio:], finalize)

    def ready() -> Iterator[torch.Tensor]:
        hop = state["hop"] + pad if state["offset"] == 0 else state["hop"]
        if len(tokens) - state["offset"] >= hop + look:
            wave = chunk(state["offset"] + hop + look, finalize=False)
            state["offset"] += hop
            state["hop"] = min(MAX_TOKEN_HOP, state["hop"] * HOP_SCALE)
            yield wave

    lm = lm_tokens if lm_tokens is not None else model.lm.generate(
        text, prompt_text, llm_prompt_tokens, generator=generator, params=params, before_step=before_step, steps=steps)
    for token in keep_silences(lm, model.version):
        tokens.append(token)
        yield from ready()
    if not tokens:
        raise InputError("the LM spoke no speech token for this text; give a longer text or another seed")
    yield chunk(len(tokens), finalize=True)


def check_streamable(speed: float) -> None:
    if speed != 1.0:
        raise InputError(f"speed {speed} cannot be streamed (upstream changes speed only without streaming): set "
                         "speed to 1 or speak without streaming")
