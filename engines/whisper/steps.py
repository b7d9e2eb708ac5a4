"""The text decoder's one-token step as LayerSteps segments: CUDA graphs of everything between two
attention calls, where the batch shape is fixed (greedy, best_of sampling, beam search).

Each decoder block is two LayerSteps layers, one per attention call:
  - self:  attn_ln and the q/k/v projections | cache write + self-attention (eager) | out projection
           and residual;
  - cross: cross_attn_ln and the query        | cross-attention over the audio (eager) | out
           projection, residual and the MLP.
The embedding (token + position) opens segment 0; the final LayerNorm and the logits against the tied
embedding close the last one. The operations are those of `TextDecoder.forward` for one token, in the
same order, so the logits are the same bits with graphs, without them (CPU) and through `forward`.
The position is a tensor (`index_select` of one row gives the same values as upstream's slice), so
one graph serves every position.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from mizuoto.runtime.accel import MaskInfo
from mizuoto.runtime.graphs import Graphs, LayerSteps

from .model import DECODER_CROSS, DECODER_SELF, DecoderCache, TextDecoder


class StepIndex(NamedTuple):
    """What the eager attention calls of one step read: the cache and the self-attention mask."""

    cache: DecoderCache
    mask_info: MaskInfo


class _SelfAttention:
    def __init__(self, block, layer: int):
        self.block, self.layer = block, layer

    def before(self, x, position):
        h = self.block.attn_ln(x)
        attn = self.block.attn
        return attn.query(h), attn.key(h), attn.value(h), x

    def attend(self, q, k, v, index: StepIndex):
        k, v = index.cache.write(self.layer, k, v)
        return self.block.attn.attend_heads(q, k, v, DECODER_SELF, mask_info=index.mask_info)

    def after(self, a, residual):
        return residual + self.block.attn.out(a)


class _CrossAttention:
    def __init__(self, block, layer: int):
        self.block, self.layer = block, layer

    def before(self, x, position):
        return self.block.cross_attn.query(self.block.cross_attn_ln(x)), None, None, x

    def attend(self, q, k, v, index: StepIndex):
        ck, cv = index.cache.cross[self.layer]
        return self.block.cross_attn.attend_heads(q, ck, cv, DECODER_CROSS)

    def after(self, a, residual):
        x = residual + self.block.cross_attn.out(a)
        return x + self.block.mlp(self.block.mlp_ln(x))


class DecoderSteps:
    """`steps(tokens, cache)`: logits (rows, 1, vocab) in float32 of one token per row after the
    cache's tokens, as `decoder(tokens, audio, cache)` gives them; advances the cache. The cache's
    audio keys must be set (a first, multi-token call through `forward` sets them).

    Keep one per loaded model with its Graphs (or None: eager segments, e.g. on the CPU)."""

    def __init__(self, decoder: TextDecoder, graphs: Graphs | None = None):
        self.decoder = decoder
        self.graphs = graphs
        layers = []
        for i, block in enumerate(decoder.blocks):
            layers += [_SelfAttention(block, i), _CrossAttention(block, i)]
        self.layers = LayerSteps(layers, self._embed, self._logits, graphs)
        # Positions as a device tensor sliced per step: a fresh host tensor would be a transfer (and
        # with it a wait on the device) at every step.
        self.positions = torch.arange(decoder.positional_embedding.shape[0],
                                      device=decoder.positional_embedding.device)

    def _embed(self, tokens, position):
        decoder = self.decoder
        x = decoder.token_embedding(tokens) + decoder.positional_embedding.index_select(0, position)
        return x.to(decoder.token_embedding.weight.dtype)

    def _logits(self, x):
        decoder = self.decoder
        x = decoder.ln(x)
        return (x @ torch.transpose(decoder.token_embedding.weight.to(x.dtype), 0, 1)).float()

    def __call__(self, tokens: torch.Tensor, cache: DecoderCache) -> torch.Tensor:
        if cache.cross is None:
            raise RuntimeError("the decoder step needs the audio's keys: run the first tokens through forward")
        rows, offset = tokens.shape[0], cache.length
        position = self.positions[offset: offset + 1]
        info = MaskInfo.full(rows, offset + 1, device=tokens.device, causal=True)
        logits = self.layers((tokens, position), (), StepIndex(cache, info))
        cache.length += 1
        return logits
