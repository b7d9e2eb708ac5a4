"""Loading and speaking for the CosyVoice engine: upstream's CosyVoice2 / CosyVoice3 classes (cosyvoice/cli/
cosyvoice.py and frontend.py) with `stream=False`.

    text ─ normalize + split (text.py) ─ per fragment ┐
    reference ─ mel 24 kHz, S3 tokens, CAM++ ─────────┼ LM (speech tokens) ─ flow (mel) ─ HiFT ─ 24 kHz
      (or a saved speaker of spk2info.pt)             ┘

The modes are upstream's methods: zero_shot = inference_zero_shot (the prompt text and prompt speech tokens lead
the LM), cross_lingual = inference_cross_lingual (the LM gets neither), instruct = inference_instruct2 (the LM gets
the instruction instead of the transcript, no prompt speech); a speaker of spk2info.pt with only an embedding is
inference_sft. A zero-shot speaker saved by upstream's add_zero_shot_spk stands for the recording and its
transcript; in instruct mode the instruction is its prompt text (upstream's frontend_instruct2 would keep the saved
transcript and drop the instruction). Each fragment of the normalised text is one upstream request; the fragments'
waves are joined.

CosyVoice 3 asserts that the LM's text holds <|endofprompt|>: where the text the user gives has none, the
`system_prompt` and that token are put before the prompt text (zero_shot), before each fragment (cross_lingual)
or around the instruction (instruct), as upstream's examples write them. Each request is then exactly upstream's
call with those strings: a fragment that carries the token is not normalised again (upstream skips the frontend
for text holding '<|' and '|>').
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import nn

from mizuoto.core.errors import InputError
from mizuoto.core.options import RuntimeOptions
from mizuoto.nn.hift import compile_decode
from mizuoto.runtime.context import RequestContext
from mizuoto.runtime.handles import ModelHandle

from . import checkpoint, stream
from .bistream import generate_bistream
from .flow import SolveGraphs
from .model import CosyVoiceModel
from .ras import RasParams
from .reference import PromptSpeech, prompt_speech
from .text import normalize, text_frontend
from .tokenizer import CosyVoiceTokenizer

END_OF_PROMPT = "<|endofprompt|>"
# what every output's report says of the text normaliser (text.text_frontend's name)
NORMALISERS = {"wetext": "wetext", "none": "upstream's rules without wetext (wetext is not installed)"}
log = logging.getLogger(__name__)


@dataclass
class CosyVoiceLoaded:
    version: int
    model: CosyVoiceModel
    tokenizer: CosyVoiceTokenizer
    speech_tokenizer: nn.Module
    campplus: nn.Module
    speakers: dict
    sampling: RasParams
    sample_rate: int
    source: str
    handle: ModelHandle
    options: RuntimeOptions

    details: dict = field(default_factory=dict)  # for every output's report: the text normaliser this process uses
    fused_projections: bool = False  # load option: the LM's q/k/v and gate/up projections stacked
    compiled_decode: object = None  # compute.compile: HiFT's decode compiled (None: eager)
    _steps: list = field(default_factory=list)  # [(graphs, the LM's DecoderSteps)]
    _solve: list = field(default_factory=list)  # [(graphs, the flow's SolveGraphs)]

    @property
    def device(self) -> torch.device:
        return self.handle.device

    def lm_steps(self):
        """The LM's decode step, with CUDA graphs when usable."""
        return self._kept(self._steps, self.model.lm.steps)

    def flow_solve(self) -> SolveGraphs:
        """The flow's solver, one CUDA graph per frame count when usable."""
        return self._kept(self._solve, lambda graphs: SolveGraphs(self.model.flow.decoder, graphs))

    def _kept(self, cache: list, build):
        """`build(graphs)` for the model's current Graphs (or None), kept per graphs object: its graphs hold the
        weights' addresses and stay with the loaded model across requests (and rebinds, which share `cache`)."""
        graphs = self.handle.graphs_for(self.options.cuda_graphs)
        for known, built in cache:
            if known is graphs:
                return built
        built = build(graphs)
        cache[:] = [(graphs, built)]
        return built


def load(source: str | Path | None, device: torch.device, dtype: torch.dtype,
         options: RuntimeOptions) -> CosyVoiceLoaded:
    if source is None:
        raise InputError("CosyVoice needs a model: a CosyVoice2-0.5B or Fun-CosyVoice3-0.5B-2512 folder")
    files = checkpoint.find_files(source)
    doc = checkpoint.read_yaml(files.yaml)
    rate = checkpoint.sample_rate(files, doc)
    tokenizer = CosyVoiceTokenizer.from_folder(files.blank_en, f"cv{files.version}")
    lm = checkpoint.load_lm(files, doc, device, dtype)
    fused = bool(options.load_options.get("fused_projections", False))
    if fused:  # opt-in: wider matmuls, other kernels on CUDA
        lm.decoder.fuse()
    flow = checkpoint.load_flow(files, doc, device, dtype)
    vocoder = checkpoint.load_vocoder(files, doc, device, torch.float32)  # upstream keeps HiFT in float32
    speech_tokenizer = checkpoint.load_speech_tokenizer(files, device)
    campplus = checkpoint.load_campplus(files, device)
    model = CosyVoiceModel(lm, flow, vocoder)
    # wetext changes the text when it is installed (upstream's default then): say which normaliser this process uses
    normaliser = text_frontend().name
    log.info("CosyVoice %d text normaliser: %s", files.version, normaliser)
    modules = nn.ModuleList([lm, flow, vocoder, speech_tokenizer, campplus])
    for name, module in zip(("llm.pt", "flow.pt", "hift.pt"), (lm, flow, vocoder), strict=True):
        checkpoint.check_materialised(module, name)
    loaded = CosyVoiceLoaded(files.version, model, tokenizer, speech_tokenizer, campplus,
                             checkpoint.load_speakers(files), checkpoint.sampling(files, doc), rate, str(source),
                             ModelHandle(modules, device), options,
                             details={"text_normaliser": NORMALISERS[normaliser]}, fused_projections=fused)
    return _compiled(loaded, options)


def _compiled(loaded: CosyVoiceLoaded, options: RuntimeOptions) -> CosyVoiceLoaded:
    """compute.compile: HiFT's decode compiled (hift.compile_decode: its F0 predictor and source stay eager)."""
    return replace(loaded, options=options, compiled_decode=compile_decode(
        loaded.model.hift, options.compile, f"cosyvoice{loaded.version}.hift", loaded.device))


def rebind(previous: CosyVoiceLoaded, options: RuntimeOptions) -> CosyVoiceLoaded:
    """The same weights under other runtime options: nothing reloads; the handle, its CUDA graphs, the LM's steps
    and the flow's solve are shared; HiFT's compiled decode follows compute.compile."""
    if options.compile == previous.options.compile:
        return replace(previous, options=options)
    return _compiled(previous, options)


# --------------------------------------------------------------------------------------------------
# Requests


@dataclass
class Request:
    """One upstream request per fragment: the LM's text ids and prompt, the flow's prompt, the embedding."""

    texts: list[list[int]]
    prompt_text: list[int]
    llm_prompt_tokens: torch.Tensor  # (1, S) int32, S may be 0
    flow_prompt_tokens: torch.Tensor
    prompt_feat: torch.Tensor  # (1, 2S, 80)
    embedding: torch.Tensor  # (1, 192)


def _with_end_of_prompt(loaded: CosyVoiceLoaded, text: str, system_prompt: str) -> str:
    """CosyVoice 3's rule: a text without <|endofprompt|> gets the system prompt and the token before it."""
    if loaded.version != 3 or END_OF_PROMPT in text:
        return text
    return f"{system_prompt}{END_OF_PROMPT}{text}"


def _instruction(loaded: CosyVoiceLoaded, instruct: str, system_prompt: str) -> str:
    """The instruct mode's prompt text, written as upstream's examples write it."""
    instruct = instruct.strip()
    if not instruct:
        raise InputError("instruct mode needs instruct_text: say how to speak, e.g. 'Speak in Cantonese.'")
    if END_OF_PROMPT in instruct:
        return instruct
    if loaded.version == 3 and system_prompt:
        return f"{system_prompt} {instruct}{END_OF_PROMPT}"
    return f"{instruct}{END_OF_PROMPT}"


def _speaker(loaded: CosyVoiceLoaded, name: str) -> dict:
    entry = loaded.speakers.get(name)
    if entry is None:
        known = ", ".join(sorted(loaded.speakers)) or "none (this model has no spk2info.pt entries)"
        raise InputError(f"speaker {name!r} is not in the model's spk2info.pt; its speakers: {known}")
    return entry


def _ints(tensor: torch.Tensor) -> list[int]:
    return [int(i) for i in tensor.reshape(-1).tolist()]


def build_request(loaded: CosyVoiceLoaded, text: str | None, params: dict,
                  reference: tuple[torch.Tensor, int] | None = None, reference_text: str | None = None) -> Request:
    """The request's text fragments and prompt; `text` None: the prompt alone (texts empty), for a text that
    arrives in pieces."""
    if text is not None and not text.strip():
        raise InputError("the text is empty; give some words to speak")
    mode, speaker = params.get("mode", "zero_shot"), (params.get("speaker") or "").strip()
    system_prompt = params.get("system_prompt", "")
    frontend = bool(params.get("text_frontend", True))
    tokenizer = loaded.tokenizer
    if speaker and reference is not None:
        raise InputError("give either a reference recording or a saved speaker, not both: disconnect the audio or "
                         "clear speaker")
    empty = torch.zeros(1, 0, dtype=torch.int32)
    entry = _speaker(loaded, speaker) if speaker else None
    trained = entry is not None and "prompt_speech_feat" not in entry
    if entry is None and reference is None:
        raise InputError("CosyVoice clones a voice: connect a reference recording, or name a saved speaker of "
                         "spk2info.pt")
    fragments = [] if text is None else normalize(text, tokenizer, split=True, frontend=frontend)
    if mode == "cross_lingual":
        fragments = [_with_end_of_prompt(loaded, f, system_prompt) for f in fragments]
    texts = [tokenizer.encode(f) for f in fragments]
    if not texts and text is not None:
        raise InputError("the text has nothing to speak once normalised (only punctuation?); give some words")

    if trained:  # inference_sft: the embedding alone, for the LM and the flow, no prompt
        if mode != "zero_shot":
            raise InputError(f"speaker {speaker!r} is a trained speaker (an embedding only), which upstream speaks "
                             "only as inference_sft: set mode to zero_shot")
        texts = [tokenizer.encode(_with_end_of_prompt(loaded, f, system_prompt)) for f in fragments]
        return Request(texts, [], empty, empty, torch.zeros(1, 0, 80), entry["embedding"].reshape(1, -1).float())

    if entry is not None:  # a zero-shot speaker saved by add_zero_shot_spk: its model inputs as stored
        prompt = PromptSpeech(entry["prompt_speech_feat"].float().cpu(),
                              entry["flow_prompt_speech_token"].to(torch.int32).cpu(),
                              entry["flow_embedding"].reshape(1, -1).float().cpu())
        stored_text = _ints(entry["prompt_text"])
        llm_tokens = entry["llm_prompt_speech_token"].to(torch.int32).cpu()
    else:
        wave, rate = reference
        prompt = prompt_speech(wave, rate, loaded.version, loaded.speech_tokenizer, loaded.campplus,
                               loaded.sample_rate)
        stored_text, llm_tokens = None, prompt.tokens

    if mode == "zero_shot":
        if stored_text is None:
            transcript = (reference_text or "").strip()
            if not transcript:
                raise InputError("zero_shot mode needs the reference's transcript: type it, connect a Whisper "
                                 "model, or use mode cross_lingual")
            transcript = _with_end_of_prompt(loaded, transcript, system_prompt)
            stored_text = tokenizer.encode(normalize(transcript, tokenizer, split=False, frontend=frontend))
        return Request(texts, stored_text, llm_tokens, prompt.tokens, prompt.feat, prompt.embedding)
    if mode == "cross_lingual":
        return Request(texts, [], empty, prompt.tokens, prompt.feat, prompt.embedding)
    if mode == "instruct":
        instruction = _instruction(loaded, params.get("instruct_text", ""), system_prompt)
        return Request(texts, tokenizer.encode(instruction), empty, prompt.tokens, prompt.feat, prompt.embedding)
    raise InputError(f"mode must be one of zero_shot, cross_lingual, instruct; got {mode!r}")


# --------------------------------------------------------------------------------------------------
# Speaking


def fragments(loaded: CosyVoiceLoaded, request: Request, ctx: RequestContext, speed: float = 1.0
              ) -> Iterator[tuple[list[int], torch.Tensor]]:
    """Each fragment's (speech tokens, waveform (1, samples) float32 on the CPU), as upstream's inference_* yields
    them: one request each, the LM's draws then (CosyVoice 2) HiFT's from the request's one generator."""
    device = loaded.device
    generator = ctx.generator_for(device)
    model = loaded.model
    prompt_text = torch.tensor([request.prompt_text], dtype=torch.int32, device=device).reshape(1, -1)
    for done, ids in enumerate(request.texts):
        with ctx.step():
            text = torch.tensor([ids], dtype=torch.int32, device=device)
            tokens = model.speech_tokens(text, prompt_text, request.llm_prompt_tokens.to(device),
                                         generator=generator, before_step=ctx.raise_if_cancelled,
                                         params=loaded.sampling, steps=loaded.lm_steps())
            wave = model.token2wav(tokens, request.flow_prompt_tokens.to(device), request.prompt_feat.to(device),
                                   request.embedding.to(device), speed, generator=generator,
                                   before_step=ctx.raise_if_cancelled, solve=loaded.flow_solve(),
                                   decode=loaded.compiled_decode)
        ctx.progress(done + 1, len(request.texts))
        yield tokens, wave.float().cpu()


def speak_request(loaded: CosyVoiceLoaded, request: Request, ctx: RequestContext,
                  speed: float = 1.0) -> tuple[torch.Tensor, int]:
    """A built request -> (waveform (1, samples) float32 on the CPU, 24000): the fragments' waves joined."""
    waves = [wave for _, wave in fragments(loaded, request, ctx, speed)]
    return torch.cat(waves, dim=1), loaded.sample_rate


def speak(loaded: CosyVoiceLoaded, text: str, ctx: RequestContext, params: dict,
          reference: tuple[torch.Tensor, int] | None = None, reference_text: str | None = None
          ) -> tuple[torch.Tensor, int]:
    """Text -> (waveform (1, samples) float32 on the CPU, 24000)."""
    request = build_request(loaded, text, params, reference, reference_text)
    return speak_request(loaded, request, ctx, float(params.get("speed", 1.0)))


def speak_stream(loaded: CosyVoiceLoaded, text: str, ctx: RequestContext, params: dict,
                 reference: tuple[torch.Tensor, int] | None = None, reference_text: str | None = None
                 ) -> Iterator[torch.Tensor]:
    """Like `speak`, but yields the waveform chunk by chunk ((1, n) float32 on the CPU), each fragment streamed as
    upstream's tts(stream=True) streams it (stream.py); speed must be 1, as upstream requires."""
    speed = float(params.get("speed", 1.0))
    stream.check_streamable(speed)
    request = build_request(loaded, text, params, reference, reference_text)
    device = loaded.device
    generator = ctx.generator_for(device)
    prompt_text = torch.tensor([request.prompt_text], dtype=torch.int32, device=device).reshape(1, -1)
    for done, ids in enumerate(request.texts):
        chunks = stream.stream_request(
            loaded.model, torch.tensor([ids], dtype=torch.int32, device=device), prompt_text,
            request.llm_prompt_tokens.to(device), request.flow_prompt_tokens.to(device), request.prompt_feat.to(device),
            request.embedding.to(device), generator=generator, params=loaded.sampling,
            before_step=ctx.raise_if_cancelled, steps=loaded.lm_steps(), solve=loaded.flow_solve(),
            decode=loaded.compiled_decode)
        while True:
            with ctx.step():
                wave = next(chunks, None)
            if wave is None:
                break
            yield wave.float().cpu()
        ctx.progress(done + 1, len(request.texts))


def speak_text_stream(loaded: CosyVoiceLoaded, pieces: Iterable[str], ctx: RequestContext, params: dict,
                      reference: tuple[torch.Tensor, int] | None = None, reference_text: str | None = None
                      ) -> Iterator[torch.Tensor]:
    """A text that arrives in pieces (an LLM's output, as it is written) spoken as it arrives: upstream's
    CosyVoice2 / CosyVoice3 `inference_*` given a generator as tts_text with stream=True. Each piece is tokenised on
    its own and not normalised (upstream's frontend passes a generator through), the LM is bistream.py's
    inference_bistream, and the waveform comes chunk by chunk as in `speak_stream` ((1, n) float32 on the CPU).
    The prompt is `speak`'s for the same parameters; CosyVoice 3 needs <|endofprompt|> in the prompt text, which
    zero_shot and instruct give it (cross_lingual has no prompt text)."""
    stream.check_streamable(float(params.get("speed", 1.0)))
    request = build_request(loaded, None, params, reference, reference_text)  # the prompt: the text comes in pieces
    device = loaded.device
    generator = ctx.generator_for(device)
    prompt_text = torch.tensor([request.prompt_text], dtype=torch.int32, device=device).reshape(1, -1)
    llm_prompt = request.llm_prompt_tokens.to(device)
    ids = ([t] for piece in pieces for t in loaded.tokenizer.encode(piece))  # upstream feeds one token at a time
    tokens = generate_bistream(loaded.model.lm, ids, prompt_text, llm_prompt, generator=generator,
                               params=loaded.sampling, before_step=ctx.raise_if_cancelled, steps=loaded.lm_steps())
    chunks = stream.stream_request(
        loaded.model, None, prompt_text, llm_prompt, request.flow_prompt_tokens.to(device),
        request.prompt_feat.to(device), request.embedding.to(device), generator=generator, params=loaded.sampling,
        before_step=ctx.raise_if_cancelled, solve=loaded.flow_solve(), decode=loaded.compiled_decode, lm_tokens=tokens)
    while True:
        with ctx.step():
            wave = next(chunks, None)
        if wave is None:
            return
        yield wave.float().cpu()


__all__ = ["CosyVoiceLoaded", "Request", "build_request", "fragments", "load", "rebind", "speak", "speak_request",
           "speak_stream", "speak_text_stream"]
