"""The code predictor: codebooks 1..G-1 of a frame, drawn one after the other from the talker's state.

Upstream (`Qwen3TTSTalkerCodePredictorModelForConditionalGeneration`) runs a nested transformers
`generate()` for every frame: a fresh cache, a two-position prefill [talker's last hidden state,
embedding of the frame's codebook-0 code] read by head 0, then one step per further codebook, step j
embedding code j with table j-1 and reading head j. Each draw is top-k / top-p / temperature sampling
of its own (no repetition penalty, no EOS) over float32 (B, vocab) scores. The tables hold codes in the
talker's width; `small_to_mtp_projection` brings them to the predictor's width when the two differ.

Here the cache is allocated once per request and rewound every frame (a rewound cache is a fresh one:
a step only ever reads the positions written since), and each of the G-1 steps is its own
`DecoderSteps`, so that CUDA graphs capture its table and head as constants.

This module also holds `sited_decoder`, the QwenDecoder whose attention goes through an engine's own
site (the talker uses it too).
"""

from __future__ import annotations

import torch
from torch import nn

from mizuoto.nn.ops import Linear
from mizuoto.nn.qwen import (
    AttentionStep,
    QwenConfig,
    QwenDecoder,
    transformers_sdpa,
)
from mizuoto.runtime import accel, sampling
from mizuoto.runtime.graphs import DecoderSteps, Graphs

from .config import PredictorConfig

ATTN = accel.Site("qwen3tts.predictor", reference=transformers_sdpa, approx_ok=False)


def sited_decoder(config: QwenConfig, site: accel.Site) -> QwenDecoder:
    """A QwenDecoder whose attention calls go through `site` (the talker uses it too)."""
    return QwenDecoder(config, site)


# --------------------------------------------------------------------------------------------------
# The module


class CodePredictor(nn.Module):
    """Parameter names follow upstream's `talker.code_predictor.*` (checkpoint.py maps `model.` to
    `decoder.` and `model.codec_embedding` to `codec_embedding`)."""

    def __init__(self, config: PredictorConfig, talker_hidden: int):
        super().__init__()
        self.config = config
        width = config.decoder.hidden_size
        tables = config.num_code_groups - 1
        self.decoder = sited_decoder(config.decoder.qwen(), ATTN)
        self.codec_embedding = nn.ModuleList(nn.Embedding(config.vocab_size, talker_hidden) for _ in range(tables))
        self.lm_head = nn.ModuleList(Linear(width, config.vocab_size, bias=False) for _ in range(tables))
        # upstream: nn.Identity when the widths agree (0.6B), a Linear with bias otherwise (1.7B)
        self.small_to_mtp_projection = Linear(talker_hidden, width, bias=True) if width != talker_hidden else None

    def project(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.small_to_mtp_projection is None else self.small_to_mtp_projection(x)

    def start_inputs(self, past_hidden: torch.Tensor, code0_embedding: torch.Tensor) -> torch.Tensor:
        """The prefill: [talker's last state, embedding of codebook 0] (B, 2, talker width), projected."""
        return self.project(torch.cat((past_hidden, code0_embedding), dim=1))

    def step_inputs(self, j: int, ids: torch.Tensor) -> torch.Tensor:
        """Step j (1..G-2) feeds code j (B, 1), drawn by the previous step, through table j-1."""
        return self.project(self.codec_embedding[j - 1](ids))

    def logits(self, j: int, hidden: torch.Tensor) -> torch.Tensor:
        """Head j over every position (as upstream computes it), the last one's scores in float32."""
        return self.lm_head[j](hidden)[:, -1].float()


# --------------------------------------------------------------------------------------------------
# Drawing a frame's codes


def predictor_steps(predictor: CodePredictor, code0_table: nn.Embedding, graphs: Graphs | None) -> list[DecoderSteps]:
    """One DecoderSteps per draw: step 0 is the prefill (talker state and codebook-0 code), step j
    feeds code j. `code0_table` is the talker's codec embedding (codebook 0 lives in the talker)."""
    decoder = predictor.decoder
    steps = [DecoderSteps(decoder, graphs, head=lambda h: predictor.logits(0, h),
                          embed=lambda past, code0: predictor.start_inputs(past, code0_table(code0)))]
    for j in range(1, predictor.config.num_code_groups - 1):
        steps.append(DecoderSteps(decoder, graphs, head=lambda h, j=j: predictor.logits(j, h),
                                  embed=lambda ids, j=j: predictor.step_inputs(j, ids)))
    return steps


class FrameDrafter:
    """Draws codebooks 1..G-1 of each frame for a batch of B rows: one cache, its masks and positions
    prepared once per request and reused every frame."""

    def __init__(self, predictor: CodePredictor, steps: list[DecoderSteps], sampler: sampling.Sampler, batch: int):
        self.predictor, self.steps, self.sampler = predictor, steps, sampler
        # greedy with no processor: sample() takes the plain argmax (lean.py skips the call)
        self.greedy = not sampler.params.do_sample and sampler.penalty is None and not sampler.min_new_tokens \
            and sampler.suppress_mask is None
        decoder = predictor.decoder
        groups = predictor.config.num_code_groups
        self.cache = decoder.new_cache(batch, groups)
        dtype = predictor.lm_head[0].weight.dtype
        positions = torch.arange(groups, device=self.cache.k[0].device)[None]
        # the prefill's two positions, then one position per step
        self.ropes = [decoder.rope(positions[:, :2], dtype)] + [decoder.rope(positions[:, j + 1: j + 2], dtype)
                                                                for j in range(1, groups - 1)]
        # nothing is padded: causal prefill (SDPA's is_causal), then one query over every key so far
        self.masks = [decoder.mask_for(None, 2, 2, padded=False, batch=batch)] + [
            decoder.mask_for(None, 1, j + 2, padded=False, batch=batch) for j in range(1, groups - 1)]

    def draw(self, past_hidden: torch.Tensor, code0: torch.Tensor, generator: torch.Generator | None):
        """`(codes (B, G-1) long, invalid (B,) bool)` for the frame whose codebook-0 ids are `code0`
        (B, 1), after the talker state `past_hidden` (B, 1, talker width). Reads nothing back."""
        cache = self.cache
        cache.length = 0  # a fresh cache for this frame
        logits = self.steps[0]((past_hidden, code0), self.ropes[0], AttentionStep(cache, self.masks[0]))
        cache.advance(2)
        ids, invalid = sampling.sample(logits, self.sampler, 0, generator)
        drawn = [ids]
        for j in range(1, len(self.steps)):
            logits = self.steps[j](ids[:, None], self.ropes[j], AttentionStep(cache, self.masks[j]))
            cache.advance(1)
            ids, bad = sampling.sample(logits, self.sampler, j, generator)
            drawn.append(ids)
            invalid = invalid | bad
        return torch.stack(drawn, dim=1), invalid


def predictor_sampler(do_sample: bool, top_k: int | None, top_p: float, temperature: float, vocab_size: int,
                      device) -> sampling.Sampler:
    """What upstream's nested generate() applies: temperature, top-k, top-p when sampling; nothing else."""
    return sampling.Sampler(sampling.SamplingParams(do_sample=do_sample, temperature=temperature,
                                                    top_k=top_k, top_p=top_p), vocab_size, device)
