"""F5-TTS's DiT: the flow-matching transformer over mel frames, exact to f5-tts 1.1.22 (MIT).

    text ids ─ TextEmbedding (embedding, sinusoidal positions, ConvNeXt-V2 blocks) ─┐
    noisy mel, reference mel ─────────────────────────────── InputEmbedding ────────┴─ x
    x ─ DiTBlock × depth (AdaLN-modulated attention with RoPE, AdaLN-modulated GELU-tanh FFN)
      ─ AdaLayerNorm_Final ─ proj_out ─ predicted flow (mel_dim per frame)

The blocks (ConvNeXt-V2, input and time embeddings, RoPE, AdaLN, attention, FFN, DiTBlock) are
mizuoto/nn/f5_dit.py's, shared with GPT-SoVITS v3/v4's copy of this DiT (engines/gpt_sovits/cfm.py); the
text encoder over character ids and the packed guided batch are F5-TTS's own and stay here.

Module and parameter names are upstream's, so its checkpoints load as they are. The forward is split
into segments between attention calls (`segment`, for LayerSteps: the solver step replays as CUDA
graphs where they are usable); `forward` runs the same segments eagerly. The text embedding depends
only on the text, so it is computed once per generation (upstream caches it across solver steps too).

Batches are packed the way upstream's classifier-free guidance packs them (conditional rows, then the
rows without audio and text); every row has the full length, so nothing is masked (upstream runs its
single-item inference without masks, and `attn_mask_enabled` is off in every released config).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.nn import f5_dit
from mizuoto.nn.f5_dit import (  # noqa: F401  (the blocks unett.py builds from too)
    AdaLayerNormFinal,
    ConvNeXtV2Block,
    DiTBlock,
    FeedForward,
    InputEmbedding,
    RotaryEmbedding,
    TimestepEmbedding,
    sinusoidal_table,
)
from mizuoto.runtime import accel

ATTENTION = accel.Site("f5tts.dit")  # non-causal over every frame: approximate kernels are acceptable


@dataclass(frozen=True)
class DiTConfig:
    """upstream's `model.arch` of the DiT backbone (its YAMLs), plus the sizes the loader fills in."""

    dim: int = 1024
    depth: int = 22
    heads: int = 16
    dim_head: int = 64
    ff_mult: float = 2
    text_dim: int = 512
    text_mask_padding: bool = True
    qk_norm: str | None = None
    conv_layers: int = 4
    pe_attn_head: int | None = None  # rotate only the first N heads (F5TTS_Base: 1); None: all
    long_skip_connection: bool = False
    mel_dim: int = 100
    text_num_embeds: int = 2545

    def to_dict(self) -> dict:
        return asdict(self)


class TextEmbedding(nn.Module):
    """Character/pinyin ids (-1 padded) -> (B, frames, text_dim): ids shifted by one (0 is the filler
    past the text), cut or zero-padded to the mel length, embedded, plus fixed positions, then the
    ConvNeXt blocks; with `mask_padding` the filler positions are zeroed around every block.

    The DiT's table covers 8192 positions (about 87 s of 24 kHz audio); E2-TTS's 4096, and it repeats
    its last position beyond (`clamp_positions`)."""

    def __init__(self, num_embeds: int, dim: int, mask_padding: bool, conv_layers: int, conv_mult: int = 2,
                 max_positions: int = 8192, clamp_positions: bool = False):
        super().__init__()
        self.text_embed = nn.Embedding(num_embeds + 1, dim)
        self.mask_padding = mask_padding
        self.max_positions, self.clamp_positions = max_positions, clamp_positions
        self.text_blocks = nn.Sequential(*[ConvNeXtV2Block(dim, dim * conv_mult) for _ in range(conv_layers)])
        if conv_layers:
            self.register_buffer("freqs_cis", sinusoidal_table(dim, max_positions), persistent=False)

    def reset_buffers(self) -> None:
        """Recompute the position table (not in checkpoints) after building on the meta device."""
        if len(self.text_blocks):
            self.freqs_cis = sinusoidal_table(self.text_embed.weight.shape[1], self.max_positions).to(
                self.text_embed.weight.device)

    def positions(self, length: int) -> torch.Tensor:
        if self.clamp_positions:
            return self.freqs_cis[torch.arange(length, device=self.freqs_cis.device).clamp(max=self.max_positions - 1)]
        return self.freqs_cis[:length, :]

    def forward(self, text: torch.Tensor, length: int, drop_text: bool = False) -> torch.Tensor:
        text = text + 1
        text = text[:, :length]
        text = F.pad(text, (0, length - text.shape[1]), value=0)
        filler = text == 0
        if drop_text:
            text = torch.zeros_like(text)
        x = self.text_embed(text)
        if len(self.text_blocks):
            x = x + self.positions(length)
            if self.mask_padding:
                fill = filler.unsqueeze(-1).expand(-1, -1, x.size(-1))
                x = x.masked_fill(fill, 0.0)
                for block in self.text_blocks:
                    x = block(x).masked_fill(fill, 0.0)
            else:
                x = self.text_blocks(x)
        return x


# ---------------------------------------------------------------------------------------------------
# Transformer


class Attention(f5_dit.Attention):
    """The shared attention at F5-TTS's site (the DiT's and E2-TTS's UNetT's)."""

    def __init__(self, dim: int, heads: int, dim_head: int, qk_norm: str | None):
        super().__init__(dim, heads, dim_head, qk_norm, ATTENTION)


class DiT(nn.Module):
    def __init__(self, config: DiTConfig):
        super().__init__()
        self.config = config
        self.dim = config.dim
        self.time_embed = TimestepEmbedding(config.dim)
        self.text_embed = TextEmbedding(config.text_num_embeds, config.text_dim, config.text_mask_padding,
                                        config.conv_layers)
        self.input_embed = InputEmbedding(config.mel_dim, config.text_dim, config.dim)
        self.rotary_embed = RotaryEmbedding(config.dim_head)
        self.transformer_blocks = nn.ModuleList(
            DiTBlock(config.dim, config.heads, config.dim_head, config.ff_mult, ATTENTION, config.qk_norm,
                     config.pe_attn_head) for _ in range(config.depth))
        self.long_skip_connection = nn.Linear(config.dim * 2, config.dim, bias=False) \
            if config.long_skip_connection else None
        self.norm_out = AdaLayerNormFinal(config.dim)
        self.proj_out = nn.Linear(config.dim, config.mel_dim)

    def segments(self) -> list:
        """The layers as LayerSteps sees them (before / attend / after)."""
        return list(self.transformer_blocks)

    def rope(self, frames: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.rotary_embed.tables(frames)

    def text_embeddings(self, text: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(with text, without text) embeddings of `text` over `length` frames: fixed for a whole
        generation, so computed once."""
        return self.text_embed(text, length), self.text_embed(text, length, drop_text=True)

    # -- the packed forward, as segments between attention calls --------------------------------------

    def embed(self, x, cond, texts, time, guided: bool = True):
        """Segment 0's head: the input and the time embedding of every row. Guided, the batch is
        packed: the conditional rows, then the rows with neither reference audio nor text."""
        text, null_text = texts
        t = self.time_embed(time.repeat(x.shape[0]))
        if not guided:
            return self.input_embed(x, cond, text), t
        packed = torch.cat((self.input_embed(x, cond, text), self.input_embed(x, torch.zeros_like(cond), null_text)))
        return packed, torch.cat((t, t))

    def finish(self, state):
        x, t = state
        if self.long_skip_connection is not None:
            raise NotImplementedError("long_skip_connection")  # no released checkpoint uses it
        return self.proj_out(self.norm_out(x, t))

    def forward(self, x, cond, texts, time, guided: bool = True) -> torch.Tensor:
        """The predicted flow, eagerly: (2B, frames, mel_dim) packed when guided, else (B, ...)."""
        rope = self.rope(x.shape[1])
        state = self.embed(x, cond, texts, time, guided)
        for layer in self.segments():
            q, k, v, residual = layer.before(state, rope)
            state = layer.after(layer.attend(q, k, v), residual)
        return self.finish(state)
