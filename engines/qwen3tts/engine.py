"""Loading and speaking for the Qwen3-TTS engine: upstream's wrapper (`Qwen3TTSModel.generate_custom_voice`,
`generate_voice_design`, `generate_voice_clone`) for one utterance.

    text ─ chat template ─ ids ┐
    CustomVoice: speaker name ─┤                                          ┌─ codec decoder ─ 24 kHz audio
    VoiceDesign: instruct ids ─┼─ talker prefill ─ frame loop (talker + ─┤
    Base: reference ─ x-vector ┤   (prompt.py)      code predictor)      │  Base in-context clone: the
          + transcript ids + reference codes (ICL)                       └─ reference codes go first and
                                                                            their part of the wave is cut

The model folder's kind (config.json `tts_model_type`) decides which request it takes. Requests go
through the same steps as the wrapper's: the texts are tokenized one template each, the sampling
settings are the request's parameters over generation_config.json's, the codes are decoded with the
codec's chunked decode, and for an in-context clone the wave of [reference codes, codes] loses its
first int(reference frames / all frames * samples) samples.

A CustomVoice speaker is picked from `declaration.SPEAKERS` (the released models' nine) or typed in
`custom_speaker` (a fine-tune's own); either is matched against the model's config.json without regard
to case, as upstream matches it, and a name the model lacks is an error that lists the model's own.

`non_streaming_mode` "auto" is upstream's per-kind default: on (the whole text in the prompt) for
CustomVoice and VoiceDesign, off (one text token per frame) for Base. `max_new_tokens` 0 takes the
folder's generation_config.json (upstream's merge: the request's value, else the file's, else 2048).

`speak_stream` yields the waveform while the frames are drawn (see its docstring). `speak_ids` is
`speak` from token ids: what `speak` calls after tokenizing, and what tests use without a tokenizer.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterator

import torch
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.core.options import RuntimeOptions
from mizuoto.runtime.compile import compile_module
from mizuoto.runtime.context import RequestContext
from mizuoto.runtime.handles import ModelHandle

from . import generate, prompt
from .checkpoint import load_talker
from .codec_decoder import CHUNK_SIZE, LEFT_CONTEXT, CodecDecoder, load_codec_decoder
from .config import GenerationSettings, ModelConfig, read_generation_settings
from .declaration import SPEAKERS
from .mimi_encoder import MimiEncoder, load_mimi_encoder
from .speaker import SpeakerEncoder, load_speaker_encoder
from .talker import Talker

SAMPLE_RATE = 24000
SAMPLING = ("do_sample", "temperature", "top_k", "top_p", "repetition_penalty", "subtalker_dosample",
            "subtalker_temperature", "subtalker_top_k", "subtalker_top_p")


@dataclass
class QwenLoaded:
    config: ModelConfig
    talker: Talker  # with its code predictor
    codec: CodecDecoder
    speaker_encoder: SpeakerEncoder | None  # Base models only
    mimi: MimiEncoder | None  # Base models only: reference audio -> codes
    tokenizer: object | None  # tokenizer.QwenTokenizer (encode(text) -> ids); None until it can be loaded
    settings: GenerationSettings  # generation_config.json
    source: str
    handle: ModelHandle
    options: RuntimeOptions
    fused_projections: bool = False
    codec_window: object = None  # compute.compile: the codec decoder's window compiled (else None: eager)
    _steps: list = field(default_factory=list)  # [(graphs, generate.Steps)]: one per graphs object

    @property
    def device(self) -> torch.device:
        return self.talker.device

    @property
    def kind(self) -> str:
        return self.config.kind

    def steps(self) -> generate.Steps:
        """The talker's and predictor's steps, with CUDA graphs when usable (kept per graphs object)."""
        graphs = self.handle.graphs_for(self.options.cuda_graphs)
        for known, steps in self._steps:
            if known is graphs:
                return steps
        steps = generate.Steps(self.talker, graphs)
        self._steps[:] = [(graphs, steps)]
        return steps


def _load_tokenizer(folder: Path):
    """The folder's text tokenizer, or None while the tokenizer module is not there (speak then
    explains; speak_ids works without it)."""
    try:
        from .tokenizer import load_tokenizer
    except ImportError:
        return None
    return load_tokenizer(folder)


def load(source: str | Path | None, device: torch.device, dtype: torch.dtype, options: RuntimeOptions) -> QwenLoaded:
    if source is None:
        raise InputError("Qwen3-TTS needs a model: a Qwen3-TTS model folder (config.json, model.safetensors, "
                         "speech_tokenizer/)")
    source = Path(source)
    folder = source if source.is_dir() else source.parent
    # weights stay views of the memory-mapped files where no cast or move is needed, as upstream's
    config, talker = load_talker(folder, device, dtype)
    fused = bool(options.load_options.get("fused_projections", False))
    if fused:
        talker.decoder.fuse()
        talker.code_predictor.decoder.fuse()
    codec = load_codec_decoder(folder, device, dtype)
    speaker_encoder = mimi = None
    if config.kind == "base":
        speaker_encoder = load_speaker_encoder(folder, device, dtype)
        mimi = load_mimi_encoder(folder, device, dtype)
    modules = nn.ModuleList([m for m in (talker, codec, speaker_encoder, mimi) if m is not None])
    return QwenLoaded(config, talker, codec, speaker_encoder, mimi, _load_tokenizer(folder),
                      read_generation_settings(folder), str(source), ModelHandle(modules, device), options, fused,
                      compile_module(codec, options.compile, "qwen3tts.codec", device=device))


def rebind(previous: QwenLoaded, options: RuntimeOptions) -> QwenLoaded:
    """The same weights under other runtime options: nothing reloads; the handle (and its CUDA graphs)
    and the steps are shared; the compiled codec window follows compute.compile."""
    window = previous.codec_window if options.compile == previous.options.compile else \
        compile_module(previous.codec, options.compile, "qwen3tts.codec", device=previous.device)
    return replace(previous, options=options, codec_window=window)


# --------------------------------------------------------------------------------------------------
# Requests


@dataclass
class Request:
    """One utterance as the talker's prompt takes it, and the reference codes the decode goes after."""

    prompt: prompt.Prompt
    settings: GenerationSettings
    reference_codes: torch.Tensor | None  # (frames, G) of an in-context clone, else None


def _non_streaming(loaded: QwenLoaded, value: str) -> bool:
    if value == "auto":
        return loaded.kind != "base"  # the wrapper's defaults per kind
    return value == "on"


def generation_settings(loaded: QwenLoaded, params: dict) -> GenerationSettings:
    values = {name: params[name] for name in SAMPLING if name in params}
    return loaded.settings.with_overrides(**values, max_new_tokens=params.get("max_new_tokens") or None)


def chosen_speaker(params: dict) -> str | None:
    """The request's speaker: custom_speaker when typed, else the one picked from the list; None for none."""
    return (params.get("custom_speaker") or "").strip() or (params.get("speaker") or "").strip() or None


def speaker_names(config: ModelConfig) -> list[str]:
    """The model's speakers as the speaker list spells them (config.json keeps them in lower case); a
    fine-tune's own names as its config.json has them."""
    listed = {name.lower(): name for name in SPEAKERS if name}
    return [listed.get(name, name) for name in config.speakers]


def _check_speaker(loaded: QwenLoaded, speaker: str | None) -> None:
    """Upstream's rule: a CustomVoice model needs one of its own speakers, matched without regard to case."""
    names = speaker_names(loaded.config)
    unlisted = [name for name in names if name not in SPEAKERS]
    where = "speaker" if not unlisted else f"speaker (or custom_speaker, for {', '.join(unlisted)})"
    if not speaker:
        raise InputError(f"this CustomVoice model speaks with a preset speaker; set {where} to one of "
                         f"{', '.join(names) or 'none'}")
    if speaker.lower() not in loaded.config.talker.spk_id:
        raise InputError(f"speaker {speaker!r} is not one of this model's speakers ({', '.join(names) or 'none'}); "
                         f"set {where} to one of them")


def _check_kind(loaded: QwenLoaded, params: dict, reference, instruct_ids) -> None:
    kind, speaker = loaded.kind, chosen_speaker(params)
    if kind == "custom_voice":
        _check_speaker(loaded, speaker)
    elif speaker:
        raise InputError(f"speaker {speaker!r} names a preset voice, which only CustomVoice models have; this is a "
                         f"{kind} model, so leave speaker and custom_speaker empty")
    if kind == "base":
        if reference is None:
            raise InputError("this Base model clones a voice: give reference audio (and its transcript)")
        if instruct_ids is not None:
            raise InputError("Base models take no instruct; leave it empty (VoiceDesign models read descriptions)")
    elif reference is not None:
        raise InputError(f"this {kind} model takes no reference audio; disconnect it, or load a Base model to clone "
                         f"a voice")


def build_request(loaded: QwenLoaded, text_ids, ctx: RequestContext, params: dict,
                  reference: tuple[torch.Tensor, int] | None = None, reference_ids=None,
                  instruct_ids=None) -> Request:
    """The utterance's prompt as upstream's wrapper builds it for the model's kind. `text_ids`: ids of
    prompt.assistant_text(text); `instruct_ids`: of prompt.instruct_text(instruct) or None;
    `reference_ids`: of prompt.reference_text(transcript) or None; `reference`: (mono wave, rate)."""
    _check_kind(loaded, params, reference, instruct_ids)
    if instruct_ids is not None and prompt.drops_instruct(loaded.config):
        instruct_ids = None  # upstream ignores instructions on the 0.6B CustomVoice model
    # every text id takes a position, in the prefill or one per frame: refuse before any encoding
    clone = loaded.kind == "base" and not params.get("x_vector_only", False)
    _check_room(loaded, text_ids, _id_count(instruct_ids) +
                (_id_count(reference_ids, prompt.ROLE + prompt.REF_TAIL) if clone else 0))
    talker, config = loaded.talker, loaded.config
    non_streaming = _non_streaming(loaded, params.get("non_streaming_mode", "auto"))
    x_vector = codes = None
    with ctx.step(), torch.inference_mode():
        if loaded.kind == "base":
            wave, rate = reference
            wave = torch.as_tensor(wave, dtype=torch.float32).cpu()
            x_vector = loaded.speaker_encoder.x_vector(wave, rate)
            if not params.get("x_vector_only", False):
                if reference_ids is None:
                    raise InputError("cloning from the reference needs its transcript (or turn on x_vector_only)")
                codes = loaded.mimi.encode(wave, rate).transpose(0, 1)  # (frames, G)
        built = prompt.build_prompt(talker, config, text_ids, language=params.get("language") or "auto",
                                    speaker=chosen_speaker(params), x_vector=x_vector, instruct_ids=instruct_ids,
                                    reference_ids=reference_ids if codes is not None else None,
                                    reference_codes=codes, non_streaming=non_streaming)
    positions = built.embeds.shape[1] + built.trailing.shape[1]
    _check_room(loaded, text_ids, positions=positions)
    # Generation itself is not capped at max_position_embeddings: upstream computes RoPE for any position and
    # draws on past it, and so do we (the default path stays upstream's).
    settings = generation_settings(loaded, params)
    return Request(built, settings, codes)


def _id_count(ids, template: int = 0) -> int:
    """How many ids a tokenized template holds, less `template` ids of its frame (0 for none)."""
    return 0 if ids is None else max(int(torch.as_tensor(ids).shape[-1]) - template, 0)


def _check_room(loaded: QwenLoaded, text_ids, others: int = 0, positions: int | None = None) -> None:
    """A one-line InputError when the prompt and the text take the talker's every position (its
    max_position_embeddings) and leave none for speech. `positions`: the prefill and the ids fed one per
    frame, when built; before that, a lower bound: the text's ids and `others` (instruct, transcript)."""
    limit = loaded.config.talker.decoder.max_position_embeddings
    text = _id_count(text_ids, prompt.ROLE + prompt.TAIL)
    needed = text + others if positions is None else positions
    if needed >= limit:
        what = f"the prompt takes {needed:,} positions with it" if positions is not None else \
            f"{needed:,} with the instruct or the reference transcript" if others else ""
        raise InputError(f"the text is {text:,} tokens{'; ' + what if what else ''}; Qwen3-TTS reads at most "
                         f"{limit:,} positions (its max_position_embeddings), the prompt and the frames it "
                         f"generates together: shorten the text or split it")


def _batch(loaded: QwenLoaded, request: Request) -> prompt.Batch:
    with torch.inference_mode():
        pad = prompt.tts_specials(loaded.talker, loaded.config)[2]
        return prompt.batch_prompts([request.prompt], pad)


# --------------------------------------------------------------------------------------------------
# Speaking


def speak(loaded: QwenLoaded, text: str, ctx: RequestContext, params: dict,
          reference: tuple[torch.Tensor, int] | None = None, reference_text: str | None = None
          ) -> tuple[torch.Tensor, int]:
    """Text -> (waveform (1, samples) float32 on the CPU, 24000)."""
    return speak_ids(loaded, ctx=ctx, params=params, reference=reference, **_tokenized(loaded, text, params,
                                                                                         reference_text))


def _tokenized(loaded: QwenLoaded, text: str, params: dict, reference_text: str | None) -> dict:
    """Each text through its own template and the tokenizer, as the wrapper's _tokenize_texts."""
    if not (text or "").strip():
        raise InputError("the text is empty; give some words to speak")
    tokenizer = loaded.tokenizer
    if tokenizer is None:
        raise CheckpointError("the Qwen3-TTS text tokenizer is not available in this Mizuoto build yet")

    def ids(template: str) -> torch.Tensor:
        return torch.tensor([tokenizer.encode(template)], dtype=torch.long)

    instruct = params.get("instruct") or ""
    return dict(text_ids=ids(prompt.assistant_text(text)),
                instruct_ids=ids(prompt.instruct_text(instruct)) if instruct else None,
                # an x-vector-only clone reads no transcript (upstream tokenizes it, then ignores it)
                reference_ids=(ids(prompt.reference_text(reference_text))
                               if reference_text and not params.get("x_vector_only", False) else None))


def speak_ids(loaded: QwenLoaded, text_ids, ctx: RequestContext, params: dict,
              reference: tuple[torch.Tensor, int] | None = None, reference_ids=None,
              instruct_ids=None) -> tuple[torch.Tensor, int]:
    """`speak` from token ids (see build_request): (waveform (1, samples) float32 on the CPU, 24000)."""
    request = build_request(loaded, text_ids, ctx, params, reference, reference_ids, instruct_ids)
    (codes,) = generate.generate_codes(loaded.talker, _batch(loaded, request), request.settings, ctx, loaded.steps())
    with ctx.step(), torch.inference_mode():
        wave = decode(loaded, codes, request.reference_codes)
    return wave.float().cpu()[None], SAMPLE_RATE


def decode(loaded: QwenLoaded, codes: torch.Tensor, reference_codes: torch.Tensor | None = None) -> torch.Tensor:
    """Codes (frames, G) -> wave (samples,) as the wrapper decodes them: through the tokenizer's batch
    decode; an in-context clone's reference codes first, their share of the wave then cut off."""
    if reference_codes is None:
        if codes.shape[0] == 0:
            return torch.zeros(0)
        return loaded.codec.decode_utterances([codes], loaded.codec_window)[0]
    whole = torch.cat([reference_codes.to(codes.device), codes], dim=0)
    wave = loaded.codec.decode_utterances([whole], loaded.codec_window)[0]
    reference_frames, total = int(reference_codes.shape[0]), int(whole.shape[0])
    cut = int(reference_frames / max(total, 1) * wave.shape[0])  # upstream's float expression, kept as is
    return wave[cut:]


def speak_stream(loaded: QwenLoaded, text: str, ctx: RequestContext, params: dict,
                 reference: tuple[torch.Tensor, int] | None = None, reference_text: str | None = None,
                 chunk_frames: int = CHUNK_SIZE, left_context: int = LEFT_CONTEXT) -> Iterator[torch.Tensor]:
    """Like `speak`, but yields the waveform in pieces (1, n) float32 on the CPU while the frames are
    drawn: each time `chunk_frames` new frames are in, they are decoded (with `left_context` frames
    before them) and their samples yielded; the rest when the utterance ends.

    With the default 300/25 the pieces, concatenated, are `speak`'s waveform bit for bit (upstream's
    chunked decode, done as the frames come): except that an in-context clone's reference part is cut
    at reference frames x samples per frame, where upstream's float cut can land one sample earlier
    (int(r / n * n * s) < r * s when the division rounds down). Smaller chunks give sound sooner; each
    chunk then sees only `left_context` frames of the past through the codec's 72-frame attention
    window, so those waves differ slightly from upstream's (CodecDecoder.chunked_decode with the same
    sizes gives them)."""
    ids = _tokenized(loaded, text, params, reference_text)
    yield from stream_ids(loaded, ctx=ctx, params=params, reference=reference, chunk_frames=chunk_frames,
                          left_context=left_context, **ids)


def stream_ids(loaded: QwenLoaded, text_ids, ctx: RequestContext, params: dict,
               reference: tuple[torch.Tensor, int] | None = None, reference_ids=None, instruct_ids=None,
               chunk_frames: int = CHUNK_SIZE, left_context: int = LEFT_CONTEXT) -> Iterator[torch.Tensor]:
    """`speak_stream` from token ids."""
    request = build_request(loaded, text_ids, ctx, params, reference, reference_ids, instruct_ids)
    stream = loaded.codec.stream(1, chunk_frames, left_context, loaded.codec_window)
    skip = 0  # samples of the reference still to drop
    if request.reference_codes is not None:
        with ctx.step(), torch.inference_mode():
            skip = request.reference_codes.shape[0] * loaded.codec.samples_per_frame
            first = stream.push(request.reference_codes.T[None])

        def out(wave: torch.Tensor):
            nonlocal skip
            dropped = min(skip, wave.shape[-1])
            skip -= dropped
            return wave[:, dropped:]

        pending = [out(first)]
    else:
        def out(wave: torch.Tensor):
            return wave

        pending = []
    for piece in pending:
        if piece.shape[-1]:
            yield piece.float().cpu()
    for frame in generate.iterate_frames(loaded.talker, _batch(loaded, request), request.settings, ctx,
                                         loaded.steps()):
        with ctx.step(), torch.inference_mode():
            piece = out(stream.push(frame[:, :, None]))
        if piece.shape[-1]:
            yield piece.float().cpu()
    with ctx.step(), torch.inference_mode():
        piece = out(stream.flush())
    if piece.shape[-1]:
        yield piece.float().cpu()


__all__ = ["SAMPLE_RATE", "QwenLoaded", "Request", "build_request", "decode", "load", "rebind", "speak", "speak_ids",
           "speak_stream", "stream_ids"]
