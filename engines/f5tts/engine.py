"""Loading and speaking for the F5-TTS engine: upstream's default inference (`infer_process`).

    reference audio ─ mono, loudness up to 0.1 RMS, 24 kHz ─ log-mel ─┐
    reference text + text ─ chunks ─ per chunk: pinyin/characters ─ ids ┴─ flow sampling (DiT)
        ─ generated frames ─ Vocos ─ loudness back ─ cross-fade the chunks ─ 24 kHz audio

The reference first goes through upstream's `preprocess_ref_audio_text` audio steps (silence.py:
clipped to about 12 s at a silence, silent edges trimmed, padded, as 16-bit samples), unless the
`trim_reference` parameter is off. Upstream runs the chunks on a thread pool that draws their noise
from the global generator in the order the threads get to it (in practice the chunk order); here they
run one after the other, drawing from the request's generator in chunk order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.core.options import RuntimeOptions
from mizuoto.runtime.compile import compile_module
from mizuoto.runtime.context import RequestContext
from mizuoto.runtime.handles import ModelHandle

from . import audio, checkpoint, flow, silence, text
from .dit import DiT
from .mel import log_mel
from .steps import solver_step
from .unett import UNetT
from .vocos import Vocos, load_vocos

SAMPLE_RATE = audio.SAMPLE_RATE
VOCODER_FOLDERS = ("vocos", "../vocos-mel-24khz", "../charactr--vocos-mel-24khz", "../vocos")


@dataclass
class F5Loaded:
    model: DiT | UNetT  # F5-TTS or E2-TTS
    vocoder: Vocos
    vocab: dict[str, int]
    source: str
    handle: ModelHandle
    options: RuntimeOptions
    compiled_model: object = None  # compute.compile: the DiT and the vocoder compiled
    compiled_vocoder: object = None

    @property
    def device(self) -> torch.device:
        return self.model.proj_out.weight.device


def find_vocoder(folder: Path, option: str) -> Path:
    if option:
        path = Path(option).expanduser()
        if not path.is_dir():
            raise CheckpointError(f"vocoder folder {path} does not exist; set engines.f5tts.load_options.vocoder to "
                                  f"the folder of charactr/vocos-mel-24khz")
        return path
    for name in VOCODER_FOLDERS:
        if (folder / name / "config.yaml").is_file():
            return (folder / name).resolve()
    raise CheckpointError(f"F5-TTS needs the Vocos vocoder: put charactr/vocos-mel-24khz (config.yaml + "
                          f"pytorch_model.bin) in {folder / 'vocos'}, or set engines.f5tts.load_options.vocoder")


def load(source: str | Path | None, device: torch.device, dtype: torch.dtype, options: RuntimeOptions) -> F5Loaded:
    if source is None:
        raise InputError("F5-TTS needs a model: a folder with an F5-TTS checkpoint (or the checkpoint file)")
    source = Path(source)
    model = checkpoint.load(source, device, dtype, options.load_options.get("architecture", "auto"))
    folder = source if source.is_dir() else source.parent
    vocab_file = folder / "vocab.txt"
    vocab = text.load_vocab(vocab_file) if vocab_file.is_file() else text.load_vocab()
    if len(vocab) != model.config.text_num_embeds:
        raise CheckpointError(f"the vocabulary has {len(vocab)} entries but the model embeds "
                              f"{model.config.text_num_embeds}; put the model's own vocab.txt beside it")
    # upstream keeps the vocoder in float32 whatever the model's dtype
    vocoder = load_vocos(find_vocoder(folder, options.load_options.get("vocoder", "")), device, torch.float32)
    loaded = F5Loaded(model, vocoder, vocab, str(source), ModelHandle(nn.ModuleList([model, vocoder]), device),
                      options)
    return _compiled(loaded, options)


def _compiled(loaded: F5Loaded, options: RuntimeOptions) -> F5Loaded:
    device = loaded.device
    return replace(loaded, options=options,
                   compiled_model=compile_module(loaded.model, options.compile, "f5tts.dit", device=device),
                   compiled_vocoder=compile_module(loaded.vocoder, options.compile, "f5tts.vocos", device=device))


def rebind(previous: F5Loaded, options: RuntimeOptions) -> F5Loaded:
    """The same weights under other runtime options: nothing reloads; the handle (and its CUDA graphs)
    is shared; compiled modules follow compute.compile."""
    if options.compile == previous.options.compile:
        return replace(previous, options=options)
    return _compiled(previous, options)


def _step_fn(loaded: F5Loaded, cfg_strength: float):
    """The solver step: compiled DiT when compile is on, else the DiT's segments with CUDA graphs
    where usable (eager segments otherwise)."""
    if loaded.compiled_model is not None:
        compiled = loaded.compiled_model

        def step(y, cond, texts, t, dt):
            return y + dt * flow.flow(compiled(y, cond, texts, t, flow.guided(cfg_strength)), cfg_strength)

        return step
    return solver_step(loaded.model, cfg_strength, loaded.handle.graphs_for(loaded.options.cuda_graphs))


def speak(loaded: F5Loaded, gen_text: str, ctx: RequestContext, params: dict,
          reference: tuple[torch.Tensor, int] | None = None, reference_text: str | None = None
          ) -> tuple[torch.Tensor, int]:
    """Text -> (waveform (1, samples) float32 on the CPU, 24000), in the reference's voice."""
    if reference is None:
        raise InputError("F5-TTS clones a voice: give reference audio and its transcript")
    if not gen_text.strip():
        raise InputError("the text is empty; give some words to speak")
    wave, rate = reference
    wave = wave.cpu()
    if params["trim_reference"]:
        wave, rate = silence.trim_reference(wave, rate), silence.output_rate(rate)
    ref_24k, rms = audio.prepare_reference(wave, rate)  # on the CPU, as upstream
    chunks = text.plan_chunks(reference_text or "", gen_text, ref_samples=wave.shape[-1], sample_rate=rate,
                              ref_samples_24k=ref_24k.shape[-1], speed=params["speed"],
                              fix_duration=params["fix_duration"] or None,
                              cross_fade_duration=params["cross_fade_duration"])
    check_lengths(loaded, chunks, text.reference_frames(ref_24k.shape[-1]), bool(params["fix_duration"]))
    waves = generate(loaded, ref_24k, rms, chunks, ctx, params)
    joined = audio.cross_fade(waves, SAMPLE_RATE, params["cross_fade_duration"])
    return torch.from_numpy(joined).to(torch.float32)[None], SAMPLE_RATE


def frame_limit(model) -> int | None:
    """The most mel frames (reference included) the model's text positions cover, or None: the DiT adds a
    fixed table of 8192 positions to its text features and upstream fails beyond it (a shape mismatch);
    E2-TTS repeats its last position, and a model without ConvNeXt text blocks has no table."""
    embeddings = model.text_embed
    if not len(embeddings.text_blocks) or embeddings.clamp_positions:
        return None
    return embeddings.max_positions


def _excerpt(words: str, n: int = 40) -> str:
    words = " ".join(words.split())
    return words if len(words) <= n else words[:n - 1] + "…"


def check_lengths(loaded: F5Loaded, chunks: list[text.Chunk], ref_frames: int, fixed: bool = False) -> None:
    """A one-line InputError, before anything is generated, for a chunk longer than the model's positions
    (a sentence with no break, or a long fixed duration); every other length runs as upstream's."""
    limit = frame_limit(loaded.model)
    if limit is None:
        return
    for i, chunk in enumerate(chunks):
        ids = text.tokens_to_ids(text.convert_char_to_pinyin([chunk.text]), loaded.vocab)[0]
        frames = flow.total_frames(ids, ref_frames, chunk.frames)
        if frames > limit:
            where = f"chunk {i + 1} of {len(chunks)}" if len(chunks) > 1 else "the text"
            raise InputError(
                f"{where} ({_excerpt(chunk.gen_text)!r}, {len(chunk.gen_text.encode('utf-8')):,} bytes) would take "
                f"{frames:,} mel frames with the reference; this F5-TTS model covers at most {limit:,} "
                f"({limit * text.HOP_LENGTH / SAMPLE_RATE:.1f} s, reference included): break it into sentences "
                f"(. , ; : ! ? followed by a space, or their full-width forms)"
                + (", or lower fix_duration" if fixed else ""))


def generate(loaded: F5Loaded, ref_24k: torch.Tensor, rms: torch.Tensor, chunks: list[text.Chunk],
             ctx: RequestContext, params: dict) -> list[torch.Tensor]:
    """Each planned chunk's waveform (samples,) float32 on the CPU, at the reference's loudness."""
    device = loaded.device
    steps, cfg, sway = params["nfe_step"], params["cfg_strength"], params["sway_sampling_coef"]
    generator = ctx.generator_for(device)
    ref_frames = text.reference_frames(ref_24k.shape[-1])
    total = steps * len(chunks)
    waves = []
    with torch.inference_mode(), ctx.step():
        cond = log_mel(ref_24k.to(device))[0].transpose(0, 1)  # (frames, n_mels)
        for i, chunk in enumerate(chunks):
            ids = text.tokens_to_ids(text.convert_char_to_pinyin([chunk.text]), loaded.vocab)[0]
            mel = flow.sample(loaded.model, cond, ids, chunk.frames, generator, steps=steps, cfg_strength=cfg,
                              sway_sampling_coef=sway, step_fn=_step_fn(loaded, cfg),
                              on_step=lambda done, _, base=i * steps: ctx.progress(base + done, total))
            generated = mel.to(torch.float32)[ref_frames:].transpose(0, 1)[None]
            if loaded.compiled_vocoder is None:
                out = loaded.vocoder.decode(generated)
            else:
                out = loaded.compiled_vocoder(generated).float()
            waves.append(audio.restore_loudness(out, rms).squeeze().cpu())
        ctx.progress(total, total)
    return waves


__all__ = ["SAMPLE_RATE", "F5Loaded", "generate", "load", "rebind", "speak"]
