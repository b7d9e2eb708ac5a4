"""The Whisper network: a conv + transformer audio encoder and a text decoder with a KV cache.

Computes what openai-whisper's `Whisper` computes, operation for operation (LayerNorm in float32,
weights cast to the input dtype, SDPA attention with upstream's arguments, logits against the tied
token embedding in float32). Parameter names are openai's, so its `.pt` state dicts load as they are.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.runtime import accel
from mizuoto.runtime.accel import MaskInfo

ENCODER = accel.Site("whisper.encoder")
DECODER_SELF = accel.Site("whisper.decoder.self", approx_ok=False)
DECODER_CROSS = accel.Site("whisper.decoder.cross", approx_ok=False)


@dataclass(frozen=True)
class Dims:
    """openai-whisper's ModelDimensions, field for field."""

    n_mels: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_vocab: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int

    def to_dict(self) -> dict:
        return asdict(self)


class LayerNorm(nn.LayerNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.float()).type(x.dtype)


class Linear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight.to(x.dtype), None if self.bias is None else self.bias.to(x.dtype))


class Conv1d(nn.Conv1d):
    def _conv_forward(self, x, weight, bias):
        return super()._conv_forward(x, weight.to(x.dtype), None if bias is None else bias.to(x.dtype))


def sinusoids(length: int, channels: int, max_timescale: float = 10000) -> torch.Tensor:
    """The encoder's fixed positions, by upstream's formula (its step is computed in float64 by numpy)."""
    increment = math.log(max_timescale) / (channels // 2 - 1)
    inv = torch.exp(-increment * torch.arange(channels // 2))
    scaled = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat([torch.sin(scaled), torch.cos(scaled)], dim=1)


def heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """(B, T, state) -> (B, H, T, state / H), as a view; already split tensors pass through."""
    return x if x.dim() == 4 else x.view(*x.shape[:2], n_head, -1).permute(0, 2, 1, 3)


class Attention(nn.Module):
    """openai-whisper's MultiHeadAttention: the key projection has no bias."""

    def __init__(self, n_state: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.query = Linear(n_state, n_state)
        self.key = Linear(n_state, n_state, bias=False)
        self.value = Linear(n_state, n_state)
        self.out = Linear(n_state, n_state)

    def attend(self, q, k, v, site: accel.Site, causal: bool = False, mask_info=None) -> torch.Tensor:
        """(B, T, state) projections -> output (B, T, state) through the dispatcher."""
        return self.out(self.attend_heads(q, k, v, site, causal, mask_info))

    def attend_heads(self, q, k, v, site: accel.Site, causal: bool = False, mask_info=None) -> torch.Tensor:
        """The attention alone, heads merged back: (B, T, state) before the output projection."""
        a = accel.attention(heads(q, self.n_head), heads(k, self.n_head), heads(v, self.n_head), site=site,
                            causal=causal, mask_info=mask_info)
        return a.permute(0, 2, 1, 3).flatten(start_dim=2)

    def scores(self, q, k, v, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The handwritten path that also returns the pre-softmax scores (word timestamps read the
        cross-attention weights): q and k each scaled by d^-1/4, an additive causal mask, float32
        softmax. Not an attention site: no fused kernel returns the score matrix."""
        n_ctx, n_state = q.shape[1], q.shape[2]
        scale = (n_state // self.n_head) ** -0.25
        q, k, v = heads(q, self.n_head), heads(k, self.n_head), heads(v, self.n_head)
        qk = (q * scale) @ (k * scale).transpose(-1, -2)
        if mask is not None:
            qk = qk + mask[:n_ctx, :n_ctx]
        qk = qk.float()
        w = F.softmax(qk, dim=-1).to(q.dtype)
        return self.out((w @ v).permute(0, 2, 1, 3).flatten(start_dim=2)), qk.detach()


class Block(nn.Module):
    def __init__(self, n_state: int, n_head: int, cross_attention: bool = False):
        super().__init__()
        self.attn = Attention(n_state, n_head)
        self.attn_ln = LayerNorm(n_state)
        self.cross_attn = Attention(n_state, n_head) if cross_attention else None
        self.cross_attn_ln = LayerNorm(n_state) if cross_attention else None
        self.mlp = nn.Sequential(Linear(n_state, n_state * 4), nn.GELU(), Linear(n_state * 4, n_state))
        self.mlp_ln = LayerNorm(n_state)


class AudioEncoder(nn.Module):
    def __init__(self, dims: Dims):
        super().__init__()
        self.conv1 = Conv1d(dims.n_mels, dims.n_audio_state, kernel_size=3, padding=1)
        self.conv2 = Conv1d(dims.n_audio_state, dims.n_audio_state, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positional_embedding", sinusoids(dims.n_audio_ctx, dims.n_audio_state))
        self.blocks = nn.ModuleList(Block(dims.n_audio_state, dims.n_audio_head) for _ in range(dims.n_audio_layer))
        self.ln_post = LayerNorm(dims.n_audio_state)

    def forward(self, mel: torch.Tensor, handwritten: bool = False) -> torch.Tensor:
        """mel (B, n_mels, 3000) -> audio features (B, 1500, state).

        `handwritten` runs every attention on the handwritten path (`Attention.scores`), as upstream's
        encoder runs under `disable_sdpa()` when word timestamps re-encode a window: its features
        differ from the SDPA ones in the last bits."""
        x = F.gelu(self.conv1(mel))
        x = F.gelu(self.conv2(x)).permute(0, 2, 1)
        if x.shape[1:] != self.positional_embedding.shape:
            raise ValueError(f"audio features of shape {tuple(x.shape[1:])}; the encoder expects "
                             f"{tuple(self.positional_embedding.shape)} (30 s of 16 kHz audio)")
        x = (x + self.positional_embedding).to(x.dtype)
        for block in self.blocks:
            h = block.attn_ln(x)
            q, k, v = block.attn.query(h), block.attn.key(h), block.attn.value(h)
            x = x + (block.attn.scores(q, k, v)[0] if handwritten else block.attn.attend(q, k, v, ENCODER))
            x = x + block.mlp(block.mlp_ln(x))
        return self.ln_post(x)


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
