"""Loading and speaking for the IndexTTS engine: upstream's IndexTTS2 (indextts/infer_v2.py at ee40fa7), `infer`.

    speaker reference ─ 22.05 kHz, cut to 15 s ─ 16 kHz ─ w2v-BERT hidden_states[17], normalised ─ spk_cond_emb
        │                    │                             └─ MaskGCT codec ─ S_ref ─ length regulator ─ prompt cond
        │                    └─ mel ─ ref_mel                 Kaldi fbank ─ CAM++ ─ style
    emotion: a second reference's w2v-BERT features (or the speaker's), merged by emo_alpha; or an 8-value vector
             (the sliders, or QwenEmotion's reading of a description) mixed from feat1/feat2's rows
    text ─ normalise, CJK split, BPE ─ segments of max_text_tokens_per_segment ─ per segment:
        GPT prompt [speaker latents + emovec, speed rows, text] ─ beam-search sampling ─ mel codes
        ─ GPT latents ─ gpt_layer + codec embedding ─ length regulator (x1.72) ─ [prompt cond, cond]
        ─ s2mel CFM (25 Euler steps, CFG 0.7) ─ mel ─ BigVGAN ─ PCM scale, clamped
    segments joined with interval_silence between them

The request's draws come from its generator in upstream's global order: one torch.rand([]) per w2v-BERT layer for
each reference pass (LayerDrop's coin, eval mode too), the GPT's multinomial per step, use_random's Python
random.randint per emotion group (a random.Random seeded with the request's seed), the CFM's noise.
The waveform is upstream's `save_pcm_wav` input divided by 32767: what its WAV file holds, as float.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import nn

from mizuoto.audio import seamless_features
from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.core.options import RuntimeOptions
from mizuoto.nn import bigvgan, campplus, maskgct_codec, w2v_bert
from mizuoto.runtime.beam_sample import beam_sample
from mizuoto.runtime.compile import compile_module
from mizuoto.runtime.context import RequestContext
from mizuoto.runtime.handles import ModelHandle

from . import emotion as emotions
from . import files as release
from . import reference, s2mel
from .conformer import position_table
from .declaration import EMOTIONS
from .gpt import GptConfig, UnifiedVoice, load_gpt
from .text import IndexText, read_glossary

SAMPLE_RATE = 22050
PCM16_MAX = s2mel.INT16_PEAK  # upstream's clamp(32767 * wave) and save_pcm_wav's / 32767
log = logging.getLogger(__name__)


@dataclass
class IndexTTSLoaded:
    version: str
    gpt: UnifiedVoice
    semantic: w2v_bert.W2vBert
    semantic_config: w2v_bert.W2vBertConfig
    stats: w2v_bert.SemanticStats
    padding_value: float
    codec: nn.Module
    s2mel: s2mel.S2Mel
    campplus: nn.Module
    vocoder: nn.Module
    text: IndexText
    emotions: emotions.EmotionBank
    emotion_model: object | None  # emotion_text.EmotionText, or None when not loaded
    mel: reference.MelSettings
    source: str
    handle: ModelHandle
    options: RuntimeOptions
    details: dict = field(default_factory=dict)
    compiled_vocoder: object = None  # compute.compile: BigVGAN compiled (None: eager)

    @property
    def device(self) -> torch.device:
        return self.handle.device

    @property
    def config(self) -> GptConfig:
        return self.gpt.gpt_config


def _normaliser(choice: str) -> str:
    """auto: wetext when it is installed (upstream's normaliser), else none (the text as written)."""
    if choice != "auto":
        return choice
    try:
        import wetext  # noqa: F401
    except ImportError:
        log.warning("IndexTTS: wetext is not installed, so the text is spoken as written (numbers, dates and "
                    "symbols are not read out as upstream reads them): pip install wetext")
        return "none"
    return "wetext"


def load(source: str | Path | None, device: torch.device, dtype: torch.dtype,
         options: RuntimeOptions) -> IndexTTSLoaded:
    if source is None:
        raise InputError("IndexTTS needs a model: an IndexTTS-2 folder (IndexTeam/IndexTTS-2)")
    found = release.locate(Path(source))
    config = found.config
    gpt_config = GptConfig.from_dict(config["gpt"])
    gpt = load_gpt(_gpt_state(found.gpt, gpt_config), gpt_config, device=device, dtype=dtype)
    semantic = w2v_bert.load_folder(found.w2v_bert, layers=w2v_bert.INDEXTTS_LAYER).to(device)
    stats = w2v_bert.SemanticStats.load(found.w2v_stat, semantic.config.hidden_size)
    codec = maskgct_codec.load_semantic_codec(found.codec, maskgct_codec.CodecConfig.from_section(
        config["semantic_codec"]), device=device)
    s2mel_config = s2mel.S2MelConfig.from_section(config["s2mel"])
    back = s2mel.S2Mel.from_checkpoint(found.s2mel, s2mel_config).to(device)  # float32, as upstream keeps it
    speaker = campplus.load_campplus(found.campplus, config=None, device=device)
    vocoder = bigvgan.load_folder(found.bigvgan, device)
    glossary = found.folder / "glossary.yaml"
    normaliser = _normaliser(str(options.load_options.get("text_normaliser", "auto")))
    text = IndexText.load(found.bpe, normaliser, read_glossary(glossary) if glossary.is_file() else None)
    bank = emotions.EmotionBank.load(found.folder, config["emo_num"], found.emo_matrix.name, found.spk_matrix.name,
                                     device)
    emotion_model = None  # QwenEmotion's port is not checked against upstream yet: emotion=text is refused
    modules = nn.ModuleList([gpt, semantic, codec, back, speaker, vocoder]
                            + ([emotion_model.lm] if emotion_model is not None else []))
    return _compiled(IndexTTSLoaded(
        found.version, gpt, semantic, semantic.config, stats, _padding_value(found.w2v_bert), codec, back, speaker,
        vocoder, text, bank, emotion_model, s2mel_config.mel, str(source),
        ModelHandle(modules, device), options,
        details={"text_normaliser": text.normaliser.name,
                 "emotion_model": "loaded" if emotion_model is not None else "not loaded"}), options)


def _compiled(loaded: IndexTTSLoaded, options: RuntimeOptions) -> IndexTTSLoaded:
    """compute.compile: BigVGAN compiled (its share of the time grows with the audio's length; the GPT and the
    CFM replay CUDA graphs instead)."""
    return replace(loaded, options=options, compiled_vocoder=compile_module(
        loaded.vocoder, options.compile, "indextts.bigvgan", device=loaded.device))


def _gpt_state(path: Path, config: GptConfig) -> dict:
    """gpt.pth's state dict, with the Conformers' position tables built where the file has none: they are not
    trained (upstream's strict=False load keeps the ones its constructor built)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a corrupt or foreign file: one line, not torch's traceback
        raise CheckpointError(f"IndexTTS GPT checkpoint {path} cannot be read ({type(exc).__name__}); download "
                              f"gpt.pth again from IndexTeam/IndexTTS-2") from None
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds no state dict; point at IndexTTS 2's gpt.pth")
    conditioning = config.conditioning()
    for prefix, module in (("conditioning_encoder", conditioning.condition_module),
                           ("emo_conditioning_encoder", conditioning.emo_condition_module)):
        key = f"{prefix}.embed.pos_enc.pe"
        if key not in state:
            state[key] = position_table(module.output_size)
    return state


def _padding_value(folder: Path) -> float:
    import json

    path = Path(folder) / "preprocessor_config.json"
    if not path.is_file():
        return seamless_features.W2V_BERT_PADDING_VALUE
    return float(json.loads(path.read_text(encoding="utf-8")).get("padding_value",
                                                                   seamless_features.W2V_BERT_PADDING_VALUE))


def rebind(previous: IndexTTSLoaded, options: RuntimeOptions) -> IndexTTSLoaded:
    """The same weights under other runtime options: nothing reloads; the compiled vocoder follows compute.compile."""
    if options.compile == previous.options.compile:
        return replace(previous, options=options)
    return _compiled(previous, options)


# --------------------------------------------------------------------------------------------------
# References


@dataclass(frozen=True)
class Voice:
    """What infer_generator caches of the speaker reference."""

    features: torch.Tensor  # spk_cond_emb (1, T, 1024)
    style: torch.Tensor  # CAM++ (1, 192)
    prompt: torch.Tensor  # the length regulator's prompt condition (1, frames, channels)
    mel: torch.Tensor  # ref_mel (1, 80, frames)


def semantic_features(loaded: IndexTTSLoaded, audio_16k: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """get_emb: SeamlessM4T features -> w2v-BERT hidden_states[17] -> (h - mean) / std; the generator advances as
    upstream's forward draws (one torch.rand([]) per layer of the checkpoint)."""
    features, mask = seamless_features.features(audio_16k, padding_value=loaded.padding_value)
    w2v_bert.draw_layerdrop(generator, loaded.semantic_config)
    hidden = loaded.semantic.hidden_state(features.to(loaded.device), mask.to(loaded.device))
    return loaded.stats.normalise(hidden)


def voice(loaded: IndexTTSLoaded, wave: torch.Tensor, rate: int, generator: torch.Generator) -> Voice:
    clips = reference.speaker_audio(wave, rate)
    device = loaded.device
    features = semantic_features(loaded, clips.audio_16k, generator)
    _, s_ref = loaded.codec.quantize(features)
    mel = loaded.mel.mel(clips.audio_22k.to(device))
    style = reference.style(loaded.campplus, clips.audio_16k.to(device))
    prompt = loaded.s2mel.prompt(s_ref, mel)
    return Voice(features, style, prompt, mel)


# --------------------------------------------------------------------------------------------------
# Speaking


def emotion_vector(loaded: IndexTTSLoaded, params: dict, text: str, generator: torch.Generator) -> list[float] | None:
    """infer_generator's emo_vector: the sliders (emotion=vector) or QwenEmotion's reading (emotion=text), scaled
    by emo_alpha as upstream scales them; None for the other modes."""
    mode = params.get("emotion", "speaker")
    if mode == "vector":
        vector = [float(params.get(name, 0.0)) for name in EMOTIONS]
    elif mode == "text":
        if loaded.emotion_model is None:
            raise InputError("emotion=text needs QwenEmotion, which this version does not run yet: choose the "
                             "emotion with the sliders (emotion=vector) or a second recording (emotion=audio)")
        vector = loaded.emotion_model.vector((params.get("emotion_text") or "").strip() or text, generator)
    else:
        return None
    return emotions.scale_strengths(vector, float(params.get("emo_alpha", 1.0)))


def speak(loaded: IndexTTSLoaded, text: str, ctx: RequestContext, params: dict,
          reference: tuple[torch.Tensor, int] | None = None,
          extra_references: list[tuple[torch.Tensor, int]] | None = None) -> tuple[torch.Tensor, int]:
    """Text -> (waveform (1, samples) float32 on the CPU, 22050)."""
    pcm = [segment.pcm for segment in segments(loaded, text, ctx, params, reference, extra_references)]
    joined, rate = join(pcm, int(params.get("interval_silence", 200)))
    return joined / PCM16_MAX, rate


def join(pcm: list[torch.Tensor], interval_silence: int) -> tuple[torch.Tensor, int]:
    """insert_interval_silence and the cat: the segments' PCM-scale waves with interval_silence ms of zeros
    between them -> ((1, samples), 22050)."""
    silence = int(SAMPLE_RATE * interval_silence / 1000.0)
    joined = []
    for i, wave in enumerate(pcm):
        joined.append(wave)
        if i < len(pcm) - 1 and silence > 0:
            joined.append(torch.zeros(1, silence))
    return torch.cat(joined, dim=1), SAMPLE_RATE


@dataclass(frozen=True)
class Segment:
    codes: torch.Tensor  # (1, n) the GPT's mel codes, up to the stop token
    mel: torch.Tensor  # (1, 80, frames): the CFM's solve past the prompt's frames
    vocoded: torch.Tensor  # BigVGAN's output for the frames past the prompt
    pcm: torch.Tensor  # (1, samples) float32 on the CPU: clamp(32767 * wave)


def segments(loaded: IndexTTSLoaded, text: str, ctx: RequestContext, params: dict,
             reference: tuple[torch.Tensor, int] | None = None,
             extra_references: list[tuple[torch.Tensor, int]] | None = None):
    """infer_generator's segments, one by one (Segment), with upstream's draws in upstream's order."""
    if reference is None:
        raise InputError("IndexTTS clones a voice: connect a reference recording")
    if not text or not text.strip():
        raise InputError("the text is empty; give some words to speak")
    mode = params.get("emotion", "speaker")
    if mode == "audio" and not extra_references:
        raise InputError("emotion=audio takes its emotion from a second recording: connect extra_reference_1, or "
                         "choose another emotion mode")
    device = loaded.device
    generator = ctx.generator_for(device)
    cpu = ctx.generator_for(torch.device("cpu"))  # upstream's LayerDrop coins come from the CPU generator
    vector = emotion_vector(loaded, params, text, generator)
    alpha = float(params.get("emo_alpha", 1.0)) if mode == "audio" else 1.0
    with torch.inference_mode():
        speaker = voice(loaded, reference[0], reference[1], cpu)
        if vector is not None:
            weights, mixed = emotions.emotion_mix(vector, loaded.emotions, speaker.style,
                                                  bool(params.get("use_random", False)), random.Random(ctx.seed),
                                                  device)
        if mode == "audio":
            wave, rate = extra_references[0]
            emotion_features = semantic_features(loaded, reference_emotion(wave, rate), cpu)
        else:
            emotion_features = semantic_features(loaded, reference_emotion(reference[0], reference[1]), cpu)
        tokens = loaded.text.tokens(text)
        pieces = loaded.text.segments(tokens, int(params.get("max_text_tokens_per_segment", 120)))
        if not pieces:
            raise InputError("the text has nothing to speak once normalised (only punctuation?); give some words")
        # upstream recomputes these two for every segment; they draw nothing, so once gives the same values
        latents = loaded.gpt.speaker(speaker.features)
        emovec = loaded.gpt.merge_emovec(speaker.features, emotion_features, alpha=alpha)
        if vector is not None:
            emovec = emotions.mix_emotion_vector(emovec, weights, mixed)
        for done, piece in enumerate(pieces):
            with ctx.step():
                ids = torch.tensor([loaded.text.ids(piece)], dtype=torch.int32, device=device)
                segment = _segment(loaded, speaker, latents, emovec, ids, params, generator, ctx)
            ctx.progress(done + 1, len(pieces))
            yield segment


def reference_emotion(wave: torch.Tensor, rate: int) -> torch.Tensor:
    return reference.emotion_audio(wave, rate)


def _segment(loaded: IndexTTSLoaded, speaker: Voice, latents: torch.Tensor, emovec: torch.Tensor, ids: torch.Tensor,
             params: dict, generator: torch.Generator, ctx: RequestContext) -> Segment:
    gpt, config = loaded.gpt, loaded.config
    conds = gpt.prefix(latents, emovec)
    embeds, mask = gpt.prompt(conds, ids)
    beams = int(params.get("num_beams", 3))
    steps = int(params.get("max_mel_tokens", 1500))
    graphs = loaded.handle.graphs_for(loaded.options.cuda_graphs)
    decode = gpt.decode(embeds, mask, beams, steps, graphs)
    # generate's input_ids: placeholder ones and the start mel token (the repetition penalty sees them)
    prompt_ids = torch.ones(1, embeds.shape[1] + 1, dtype=torch.long, device=embeds.device)
    prompt_ids[:, -1] = config.start_mel_token

    def step(tokens, rows):
        ctx.raise_if_cancelled()
        return decode.step(tokens, rows).clone()

    codes = beam_sample(step, decode.prefill(), prompt_ids, eos=config.stop_mel_token, pad=config.stop_mel_token,
                        max_new_tokens=steps, num_beams=beams, top_k=int(params.get("top_k", 30)),
                        top_p=float(params.get("top_p", 0.8)), temperature=float(params.get("temperature", 0.8)),
                        repetition_penalty=float(params.get("repetition_penalty", 10.0)),
                        length_penalty=float(params.get("length_penalty", 0.0)), generator=generator)
    stops = (codes[0] == config.stop_mel_token).nonzero()
    length = int(stops[0, 0]) if stops.numel() else codes.shape[1]
    codes = codes[:, :length]
    if length == 0:
        raise InputError("IndexTTS's GPT ended this segment before any audio; try another seed or text")
    latent = gpt.latents(latents, emovec, ids, codes)
    lengths = torch.tensor([length], dtype=torch.long, device=codes.device)
    mel = loaded.s2mel.mel(latent, codes, lengths, speaker.prompt, speaker.mel, speaker.style, loaded.codec,
                           generator=generator, graphs=graphs)
    vocoded = (loaded.compiled_vocoder or loaded.vocoder)(mel.float())
    pcm = torch.clamp(PCM16_MAX * vocoded.reshape(1, -1), -PCM16_MAX, PCM16_MAX)
    return Segment(codes, mel, vocoded, pcm.float().cpu())


__all__ = ["IndexTTSLoaded", "Segment", "join", "load", "rebind", "segments", "speak", "voice"]
