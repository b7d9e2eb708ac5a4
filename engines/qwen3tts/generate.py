"""The frame loop: a batch of prefills -> the codes of every frame (all G codebooks).

Upstream runs transformers' `generate()` on the talker with a nested `generate()` of the code
predictor inside each talker forward. In the order the random generator sees them, each frame is

    talker draw t          codebook 0, from the logits of the previous talker forward (or the prefill)
    stop?                  every row has drawn EOS, or t is the last allowed draw: no frame t
    15 predictor draws     codebooks 1..15 of frame t (predictor.py)
    talker forward         input = the 16 codes' embeddings summed + the text embedding t (or tts_pad)

The talker's draw applies transformers' processors in order: repetition penalty over the codes drawn
so far (never the prompt: upstream generates from embeddings, so its input_ids start empty), EOS
masked for the first two draws (min_new_tokens 2), the top 1024 ids except EOS suppressed, then
temperature, top-k, top-p; softmax in float32; one multinomial draw per row. Rows that finished
continue with EOS as their code 0 (transformers' padding, here EOS), their frames are cut at the first
frame whose code 0 is EOS, exactly as upstream cuts them.

The loop reads the device once per frame: "is any draw invalid, or is every row finished?".
Positions: the prefill's count real positions only (padding gets 1), and frame t of a row sits at
(its largest prefill position) + 1 + t, which is what upstream's rope_deltas work out to.

The steps are DecoderSteps (CUDA graphs where usable); on the CPU, lean.py runs the same kernels
without the modules and segments around them, which is where a small model's time went.
"""

from __future__ import annotations

from typing import Iterator

import torch

from mizuoto.nn.qwen import AttentionStep, Masked, QwenDecoder
from mizuoto.runtime import sampling
from mizuoto.runtime.accel import MaskInfo
from mizuoto.runtime.context import RequestContext
from mizuoto.runtime.graphs import DecoderSteps, Graphs

from . import lean
from .config import GenerationSettings, TalkerConfig
from .predictor import FrameDrafter, predictor_sampler, predictor_steps
from .prompt import Batch
from .talker import Talker

MIN_NEW_TOKENS = 2  # upstream's fixed talker setting
CACHE_GROWTH = 256  # talker cache positions allocated beyond the prefill at first, then doubled as needed


class Steps:
    """The talker's frame step and the predictor's G-1 steps, each a DecoderSteps (CUDA graphs of
    everything but attention when `graphs` is given). Keep one per loaded model and graphs object.
    Without graphs, a model on the CPU runs lean.py's steps instead (the same kernels), unless `lean`
    is False."""

    def __init__(self, talker: Talker, graphs: Graphs | None = None, lean: bool = True):
        self.graphs = graphs
        self.lean = lean and graphs is None
        self.talker = DecoderSteps(talker.decoder, graphs, head=lambda h: (talker.logits(h), h[:, -1:]),
                                   embed=talker.frame_input)
        self.predictor = predictor_steps(talker.code_predictor, talker.codec_embedding, graphs)


def talker_sampler(config: TalkerConfig, settings: GenerationSettings, device) -> sampling.Sampler:
    return sampling.Sampler(sampling.SamplingParams(
        do_sample=settings.do_sample, temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p,
        repetition_penalty=settings.repetition_penalty, min_new_tokens=MIN_NEW_TOKENS,
        suppress_tokens=config.suppressed, eos_token_ids=(config.codec_eos_token_id,)), config.vocab_size, device)


class _TalkerCache:
    """The talker's KV cache, the keys mask and the positions of a batch; the cache grows (doubling,
    up to the prefill + max_new_tokens) instead of reserving the longest possible utterance up front."""

    def __init__(self, decoder: QwenDecoder, batch: Batch, max_new_tokens: int):
        self.decoder = decoder
        b, length = batch.attention.shape
        self.batch, self.prefill, self.limit = b, length, length + max_new_tokens
        self.padded = batch.padded
        self.cache = decoder.new_cache(b, min(self.limit, length + CACHE_GROWTH))
        attention = batch.attention
        self.keys = self._keys(attention.bool(), self.cache.capacity)
        positions = (attention.cumsum(-1) - 1).masked_fill(attention == 0, 1)
        self.prefill_positions = positions
        start = positions.max(dim=-1, keepdim=True).values + 1
        self.frame_positions = start + torch.arange(max_new_tokens, device=attention.device)[None]

    def _keys(self, real: torch.Tensor, capacity: int) -> torch.Tensor:
        keys = torch.ones(self.batch, capacity, dtype=torch.bool, device=real.device)
        keys[:, : real.shape[1]] = real
        return keys

    def prefill_mask(self):
        n = self.prefill
        return self.decoder.mask_for(self.keys[:, :n], n, n, padded=self.padded)

    def step(self, t: int) -> AttentionStep:
        """The cache and mask for frame t's forward (one new position), growing the cache first if full."""
        kv = self.prefill + t + 1
        if kv > self.cache.capacity:
            self._grow(min(self.limit, max(kv, 2 * self.cache.capacity)))
        if self.padded:
            mask = self.decoder.mask_for(self.keys[:, :kv], 1, kv, padded=True)
        else:  # mask_for(None, 1, kv, padded=False)'s MaskInfo.full, on a view of the (all real) keys
            mask = Masked(None, False, MaskInfo(self.keys[:, :kv], causal=True, padding="left"))
        return AttentionStep(self.cache, mask)

    def _grow(self, capacity: int) -> None:
        old = self.cache
        new = self.decoder.new_cache(self.batch, capacity)
        n = old.length
        for layer in range(len(old.k)):
            new.k[layer][:, :, :n].copy_(old.k[layer][:, :, :n])
            new.v[layer][:, :, :n].copy_(old.v[layer][:, :, :n])
        new.length = n
        self.cache = new
        self.keys = self._keys(self.keys, capacity)


def prefill(talker: Talker, batch: Batch, state: _TalkerCache | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The talker over the batch's prefill: (float32 scores of the first draw (B, V), the last position's
    final-normed state (B, 1, hidden), the code predictor's first input)."""
    state = state or _TalkerCache(talker.decoder, batch, 1)
    hidden = talker.decoder(batch.embeds, state.prefill_positions, state.cache, state.prefill_mask())
    return talker.logits(hidden), hidden[:, -1:]


def iterate_frames(talker: Talker, batch: Batch, settings: GenerationSettings, ctx: RequestContext,
                   steps: Steps | None = None) -> Iterator[torch.Tensor]:
    """Yield each frame's codes (B, G) long on the model's device, as they are drawn (rows that have
    finished yield EOS codes; `generate_codes` cuts them). Stops when every row has drawn EOS or after
    `settings.max_new_tokens` talker draws. Attention policy and inference mode are bound per frame
    only, never across a yield."""
    config = talker.config
    device, dtype = talker.device, talker.dtype
    decoder = talker.decoder
    steps = steps or Steps(talker)
    max_new = settings.max_new_tokens
    b = batch.embeds.shape[0]
    generator = ctx.generator_for(device)
    eos = config.codec_eos_token_id
    with ctx.step(), torch.inference_mode():
        sampler = talker_sampler(config, settings, device)
        drafter = FrameDrafter(talker.code_predictor, steps.predictor, predictor_sampler(
            settings.subtalker_dosample, settings.subtalker_top_k, settings.subtalker_top_p,
            settings.subtalker_temperature, config.predictor.vocab_size, device), b)
        # on the CPU (nothing to capture) the same kernels run without the modules around them
        fast = lean.LeanFrame(talker, drafter) if steps.lean and lean.usable(talker) else None
        state = _TalkerCache(decoder, batch, max_new)
        logits, past = prefill(talker, batch, state)
        seen = torch.zeros(b, config.vocab_size, dtype=torch.bool, device=device) if sampler.needs_history else None
        finished = torch.zeros(b, dtype=torch.bool, device=device)
        eos_mask = sampling.token_mask((eos,), config.vocab_size, device)
        pending = None  # the predictor's invalid draws of the last frame, read with the next talker draw
    text_steps = batch.trailing.shape[1]
    for t in range(max_new):
        ctx.progress(t, max_new)
        with ctx.step(), torch.inference_mode():
            ids, invalid = sampling.sample(logits, sampler, t, generator, seen=seen)
            ids = ids.masked_fill(finished, eos)
            if seen is not None:
                sampling.mark_seen(seen, ids)
            finished |= eos_mask[ids]
            bad = invalid if pending is None else invalid | pending
            flags = int(bad.any().int() * 2 + finished.all().int())  # the frame's one wait
            if flags or t + 1 == max_new:
                sampling.raise_if_invalid(bool(flags & 2))
                break
            code0 = ids[:, None]
            if fast is None:
                codes, pending = drafter.draw(past, code0, generator)
            else:
                codes, pending, embedded = fast.draw(past, code0, generator)
            frame = torch.cat((code0, codes), dim=1)
            text = batch.trailing[:, t: t + 1] if t < text_steps else batch.pad.expand(b, 1, -1)
            attention = state.step(t)  # first: a growing cache extends the rotary table too
            rope = decoder.rope(state.frame_positions[:, t: t + 1], dtype)
            if fast is None:
                logits, past = steps.talker((frame, text), rope, attention)
            else:
                logits, past = fast.talker_step(embedded, text, rope, attention)
            state.cache.advance(1)
        yield frame
    ctx.progress(max_new, max_new)


def cut_frames(frames: list[torch.Tensor], eos: int) -> list[torch.Tensor]:
    """Frames (each (B, G)) -> per row the frames before its first EOS code 0 (upstream's cut); one read."""
    if not frames:
        return []
    codes = torch.stack(frames, dim=1)  # (B, n, G)
    is_eos = (codes[..., 0] == eos).cpu()
    lengths = [int(row.int().argmax()) if bool(row.any()) else codes.shape[1] for row in is_eos]
    return [codes[row, :n] for row, n in enumerate(lengths)]


def generate_codes(talker: Talker, batch: Batch, settings: GenerationSettings, ctx: RequestContext,
                   steps: Steps | None = None) -> list[torch.Tensor]:
    """Every row's codes (frames, G) long, as upstream's generate() returns them (EOS not included)."""
    frames = list(iterate_frames(talker, batch, settings, ctx, steps))
    if not frames:
        groups = talker.config.num_code_groups
        return [torch.zeros(0, groups, dtype=torch.long, device=talker.device) for _ in range(batch.embeds.shape[0])]
    return cut_frames(frames, talker.config.codec_eos_token_id)
