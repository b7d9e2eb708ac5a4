"""Loading and speaking for the dummy engine."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from mizuoto.core.options import RuntimeOptions
from mizuoto.nn import qwen_lean
from mizuoto.nn.qwen import AttentionStep
from mizuoto.runtime import decode, sampling
from mizuoto.runtime.compile import compile_module
from mizuoto.runtime.context import RequestContext
from mizuoto.runtime.graphs import DecoderSteps
from mizuoto.runtime.handles import ModelHandle

from . import checkpoint
from .config import PAD, DummyConfig, small
from .model import DummyModel, init_weights
from .synth import synthesise
from .text import encode

BUILTIN_WEIGHTS_SEED = 0


@dataclass
class DummyLoaded:
    model: DummyModel
    source: str
    handle: ModelHandle
    options: RuntimeOptions
    encoder: object = None  # the compiled encoder, when compute.compile is on
    steps: DecoderSteps | None = None  # the decoder's step, with its CUDA graphs when used
    lean: bool = True  # on the CPU without graphs, step with mizuoto.nn.qwen_lean (the same bits, faster)

    @property
    def config(self) -> DummyConfig:
        return self.model.config

    @property
    def device(self) -> torch.device:
        return self.model.code_head.weight.device


def _empty_model(config: DummyConfig) -> DummyModel:
    # Built on the meta device, so constructing it draws nothing from the global generator.
    with torch.device("meta"):
        model = DummyModel(config)
    model.to_empty(device="cpu")
    model.reset_buffers()
    return model.eval()


def build(config: DummyConfig | None = None, weights_seed: int = BUILTIN_WEIGHTS_SEED) -> DummyModel:
    """A model with weights drawn from `weights_seed` (float32, on the CPU)."""
    model = _empty_model(config or small())
    init_weights(model, weights_seed)
    return model


def save(model: DummyModel, path) -> Path:
    return checkpoint.save(model, path)


def load(source: str | Path | None, device: torch.device, dtype: torch.dtype,
         options: RuntimeOptions) -> DummyLoaded:
    """Load a checkpoint written by `save`, or build the built-in weights when `source` is None."""
    if source is None:
        model = build()
        description = f"built-in weights (seed {BUILTIN_WEIGHTS_SEED})"
    else:
        path = Path(source)
        config, tensors = checkpoint.read(path)
        model = _empty_model(config)
        checkpoint.check_state(model, tensors, path)
        model.load_state_dict(tensors)
        description = str(path)
    # The synthesiser's rate is a load option, not part of the weights.
    rate = options.load_options.get("sample_rate", model.config.sample_rate)
    model.config = replace(model.config, sample_rate=rate)
    model = model.to(device=device, dtype=dtype)
    encoder = compile_module(model.encoder, options.compile, "dummy.encoder", device=device)
    return DummyLoaded(model, description, ModelHandle(model, device), options, encoder)


def rebind(previous: DummyLoaded, options: RuntimeOptions) -> DummyLoaded:
    """The same weights under other runtime options (policy, compile, CUDA graphs): nothing reloads.
    The weights' handle (and so their CUDA graphs) is shared; the compiled encoder follows compile."""
    model = previous.model
    encoder = previous.encoder if options.compile == previous.options.compile else \
        compile_module(model.encoder, options.compile, "dummy.encoder", device=previous.device)
    return replace(previous, options=options, encoder=encoder,
                   steps=previous.steps if options.cuda_graphs == previous.options.cuda_graphs else None)


def batch_ids(texts: list[str], config: DummyConfig, device) -> tuple[torch.Tensor, list[int]]:
    """Encode texts into one right-padded (B, L) id tensor, and each text's length in ids."""
    encoded = [encode(t, config) for t in texts]
    width = max(len(ids) for ids in encoded)
    return (torch.tensor([ids + [PAD] * (width - len(ids)) for ids in encoded], device=device),
            [len(ids) for ids in encoded])


def text_states(loaded: DummyLoaded, texts: list[str], ctx: RequestContext) -> list[torch.Tensor]:
    """The encoder's states for each text (padding removed)."""
    ids, lengths = batch_ids(texts, loaded.config, loaded.device)
    padded = min(lengths) < ids.shape[1]
    with torch.inference_mode(), ctx.step():
        states = (loaded.encoder or loaded.model.encoder)(ids, padded)
    return [states[i, :n] for i, n in enumerate(lengths)]


def sampler_for(config: DummyConfig, params: dict, n_bytes: int, device) -> sampling.Sampler:
    return sampling.Sampler(sampling.SamplingParams(
        temperature=params["temperature"], top_k=params["top_k"] or None, top_p=params["top_p"],
        repetition_penalty=params["repetition_penalty"], min_new_tokens=config.min_codes_per_byte * n_bytes,
        eos_token_ids=(config.eos_code,)), config.codes + 1, device)


def decode_steps(loaded: DummyLoaded):
    """The decoder's one-code step: CUDA graphs of everything but attention when they are usable for
    this model now (kept on the loaded model across requests), else the same segments eagerly."""
    graphs = loaded.handle.graphs_for(loaded.options.cuda_graphs)
    if loaded.steps is None or loaded.steps.graphs is not graphs:
        model = loaded.model
        loaded.steps = DecoderSteps(model.decoder, graphs, head=lambda h: model.code_head(h[:, -1]).float())
    return loaded.steps


def decode_codes(loaded: DummyLoaded, states: torch.Tensor, ctx: RequestContext, params: dict) -> torch.Tensor:
    """Text states (L, dim) -> acoustic codes (n,), drawn one at a time with one device wait per step."""
    model, config, device = loaded.model, loaded.config, loaded.device
    decoder = model.decoder
    n_bytes = states.shape[0]
    max_codes = config.max_codes_per_byte * n_bytes
    length = n_bytes + 1  # the text, then the start code
    positions = torch.arange(length + max_codes, device=device)[None]
    cache = decoder.new_cache(1, length + max_codes)
    sampler = sampler_for(config, params, n_bytes, device)
    seen = torch.zeros(1, config.codes + 1, dtype=torch.bool, device=device) if sampler.needs_history else None
    steps = decode_steps(loaded)
    dtype = model.code_head.weight.dtype

    def step(ids: torch.Tensor, index: int) -> torch.Tensor:
        at = length + index
        with ctx.step():  # binds the model's attention policy for this step only
            mask = decoder.mask_for(None, 1, at + 1, padded=False)
            cos, sin = decoder.rope(positions[:, at: at + 1], dtype)
            if lean is not None:
                hidden = lean(decoder.embed(ids), cos, qwen_lean.signed_sin(sin), cache, mask)
                logits = model.code_head(hidden[:, -1]).float()
            else:
                logits = steps(ids, (cos, sin), AttentionStep(cache, mask))
        cache.advance(1)
        return logits

    with torch.inference_mode():
        lean = qwen_lean.LeanDecoder(decoder, dtype) \
            if loaded.lean and steps.graphs is None and qwen_lean.usable(model) else None
        with ctx.step():
            start = torch.full((1, 1), config.start_code, device=device)
            prompt = torch.cat([model.bridge(states[None]), decoder.embed(start)], dim=1)
            hidden = decoder(prompt, positions[:, :length], cache, decoder.mask_for(None, length, length))
            logits = model.code_head(hidden[:, -1]).float()
        tokens, n = decode.generate_tokens(step, logits, sampler, ctx.generator_for(device), max_codes,
                                           (config.eos_code,), None, seen,
                                           before_step=lambda done: ctx.progress(done, max_codes))
        ctx.progress(max_codes, max_codes)
    codes = tokens[0, :n]
    return codes[:-1] if n and int(codes[-1]) == config.eos_code else codes


def reference_pitch(mono: torch.Tensor, sample_rate: int) -> float:
    """A rough pitch of a recording from its zero-crossing rate (a hum has two crossings a period)."""
    centred = mono - mono.mean()
    crossings = int(((centred[:-1] < 0) != (centred[1:] < 0)).sum())
    return min(400.0, max(60.0, crossings / 2 / (mono.shape[-1] / sample_rate)))


def speak(loaded: DummyLoaded, text: str, ctx: RequestContext, params: dict,
          reference: tuple[torch.Tensor, int] | None = None,
          reference_text: str | None = None) -> tuple[torch.Tensor, int]:
    """Text -> (waveform (channels, samples) float32 on the CPU, sample rate). With a reference
    recording, the dummy hums around the recording's pitch (it reads no transcript: `reference_text`
    is accepted so that tests can declare a transcript-reading variant of it)."""
    (states,) = text_states(loaded, [text], ctx)
    codes = decode_codes(loaded, states, ctx, params)
    model = loaded.model
    with torch.inference_mode():
        raw = model.code_params(codes.clamp(max=loaded.config.codes - 1))
        # A lead-in and a lead-out frame around the codes: the synthesiser silences the first and last.
        raw = torch.cat([raw[:1], raw, raw[-1:]]) if raw.shape[0] else model.code_params.weight[:2]
        config = loaded.config
        if reference is not None:
            scale = reference_pitch(*reference) / ((config.f0_low + config.f0_high) / 2)
            config = replace(config, f0_low=config.f0_low * scale, f0_high=config.f0_high * scale)
        wave = synthesise(raw, config, params["speed"], ctx.generator_for(loaded.device))
    return wave.cpu(), loaded.config.sample_rate
