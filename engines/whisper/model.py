"""The Whisper network: the audio encoder (mizuoto/nn/whisper_encoder.py, shared) and a text decoder with a KV cache.

Computes what openai-whisper's `Whisper` computes, operation for operation (LayerNorm in float32,
weights cast to the input dtype, SDPA attention with upstream's arguments, logits against the tied
token embedding in float32). Parameter names are openai's, so its `.pt` state dicts load as they are.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from mizuoto.nn.whisper_encoder import ENCODER, AudioEncoder, Block, Dims, LayerNorm, heads, sinusoids
from mizuoto.runtime import accel
from mizuoto.runtime.accel import MaskInfo

__all__ = ["ENCODER", "DECODER_SELF", "DECODER_CROSS", "AudioEncoder", "Block", "DecoderCache", "Dims", "LayerNorm",
           "TextDecoder", "Whisper", "heads", "sinusoids"]

DECODER_SELF = accel.Site("whisper.decoder.self", approx_ok=False)
DECODER_CROSS = accel.Site("whisper.decoder.cross", approx_ok=False)


class DecoderCache:
    """Per layer: self-attention keys/values in openai's (B, T, state) layout, preallocated, and the
    cross-attention keys/values of the audio, computed once."""

    def __init__(self, batch: int, capacity: int, n_layer: int, n_state: int, device, dtype):
        self.k = [torch.zeros(batch, capacity, n_state, device=device, dtype=dtype) for _ in range(n_layer)]
        self.v = [torch.zeros(batch, capacity, n_state, device=device, dtype=dtype) for _ in range(n_layer)]
        self.cross: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.length = 0

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        start, end = self.length, self.length + k.shape[1]
        if end > self.k[layer].shape[1]:
            raise RuntimeError(f"Whisper's decoder holds {self.k[layer].shape[1]} tokens; this needs {end}")
        self.k[layer][:, start:end] = k
        self.v[layer][:, start:end] = v
        return self.k[layer][:, :end], self.v[layer][:, :end]

    def reorder(self, order: torch.Tensor) -> None:
        """Keep the rows `order` picks (beam search), as upstream's rearrange_kv_cache does for the
        self-attention keys; only the filled positions are copied, into the same buffers. The audio's
        cross-attention keys are the same for every beam of an audio and are left as they are."""
        n = self.length
        for buffer in (*self.k, *self.v):
            buffer[:, :n] = buffer[order, :n]


class TextDecoder(nn.Module):
    def __init__(self, dims: Dims):
        super().__init__()
        self.token_embedding = nn.Embedding(dims.n_vocab, dims.n_text_state)
        self.positional_embedding = nn.Parameter(torch.empty(dims.n_text_ctx, dims.n_text_state))
        self.blocks = nn.ModuleList(Block(dims.n_text_state, dims.n_text_head, cross_attention=True)
                                    for _ in range(dims.n_text_layer))
        self.ln = LayerNorm(dims.n_text_state)
        self.register_buffer("mask", torch.empty(dims.n_text_ctx, dims.n_text_ctx).fill_(-math.inf).triu_(1),
                             persistent=False)

    def new_cache(self, batch: int, capacity: int | None = None) -> DecoderCache:
        weight = self.token_embedding.weight
        return DecoderCache(batch, capacity or self.positional_embedding.shape[0], len(self.blocks),
                            weight.shape[1], weight.device, weight.dtype)

    def forward(self, tokens: torch.Tensor, audio: torch.Tensor, cache: DecoderCache,
                alignment: list | None = None) -> torch.Tensor:
        """tokens (B, T) after the cache's tokens -> logits (B, T, vocab) in float32.

        With `alignment` a list, the cross-attention runs the handwritten path and appends each
        layer's scores (word timestamps); otherwise every attention goes through the dispatcher.
        """
        offset, n = cache.length, tokens.shape[-1]
        x = (self.token_embedding(tokens) + self.positional_embedding[offset: offset + n]).to(audio.dtype)
        if cache.cross is None:
            # The audio's keys and values, split into heads once and laid out per head: read at every
            # step, a strided view would be gathered by the kernel every time (same values, same sums).
            cache.cross = [(heads(b.cross_attn.key(audio), b.cross_attn.n_head).contiguous(),
                            heads(b.cross_attn.value(audio), b.cross_attn.n_head).contiguous()) for b in self.blocks]
        # upstream: is_causal for a multi-token call (always on an empty cache), none for a one-token step
        causal = n > 1
        info = MaskInfo.full(tokens.shape[0], offset + n, device=tokens.device, causal=True)
        for index, block in enumerate(self.blocks):
            h = block.attn_ln(x)
            k, v = cache.write(index, block.attn.key(h), block.attn.value(h))
            if alignment is None:
                x = x + block.attn.attend(block.attn.query(h), k, v, DECODER_SELF, causal=causal, mask_info=info)
            else:
                x = x + block.attn.scores(block.attn.query(h), k, v, self.mask)[0]
            h = block.cross_attn_ln(x)
            ck, cv = cache.cross[index]
            if alignment is None:
                x = x + block.cross_attn.attend(block.cross_attn.query(h), ck, cv, DECODER_CROSS)
            else:
                out, qk = block.cross_attn.scores(block.cross_attn.query(h), ck, cv)
                x = x + out
                alignment.append(qk)
            x = x + block.mlp(block.mlp_ln(x))
        cache.length += n
        x = self.ln(x)
        return (x @ torch.transpose(self.token_embedding.weight.to(x.dtype), 0, 1)).float()


class Whisper(nn.Module):
    def __init__(self, dims: Dims):
        super().__init__()
        self.dims = dims
        self.encoder = AudioEncoder(dims)
        self.decoder = TextDecoder(dims)

    @property
    def is_multilingual(self) -> bool:
        return self.dims.n_vocab >= 51865

    @property
    def num_languages(self) -> int:
        return self.dims.n_vocab - 51765 - int(self.is_multilingual)
