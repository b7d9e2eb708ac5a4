"""F5-TTS's DiT: the flow-matching transformer over mel frames, exact to f5-tts 1.1.22 (MIT).

    text ids ─ TextEmbedding (embedding, sinusoidal positions, ConvNeXt-V2 blocks) ─┐
    noisy mel, reference mel ─────────────────────────────── InputEmbedding ────────┴─ x
    x ─ DiTBlock × depth (AdaLN-modulated attention with RoPE, AdaLN-modulated GELU-tanh FFN)
      ─ AdaLayerNorm_Final ─ proj_out ─ predicted flow (mel_dim per frame)

Module and parameter names are upstream's, so its checkpoints load as they are. The forward is split
into segments between attention calls (`segment`, for LayerSteps: the solver step replays as CUDA
graphs where they are usable); `forward` runs the same segments eagerly. The text embedding depends
only on the text, so it is computed once per generation (upstream caches it across solver steps too).

Batches are packed the way upstream's classifier-free guidance packs them (conditional rows, then the
rows without audio and text); every row has the full length, so nothing is masked (upstream runs its
single-item inference without masks, and `attn_mask_enabled` is off in every released config).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

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


# ---------------------------------------------------------------------------------------------------
# Embeddings


def sinusoidal_table(dim: int, length: int, theta: float = 10000.0) -> torch.Tensor:
    """The text encoder's fixed positions: cos of every (position, frequency) then sin (upstream's
    precompute_freqs_cis, same float ops)."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    angles = torch.outer(torch.arange(length), freqs).float()
    return torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)


class GRN(nn.Module):
    """Global response normalisation (ConvNeXt-V2): the L2 norm over the *frames* of each channel,
    relative to its mean over channels."""

    def __init__(self, dim: int):
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(1, 1, dim))
        self.beta = nn.Parameter(torch.zeros(1, 1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gx = torch.norm(x, p=2, dim=1, keepdim=True)
        nx = gx / (gx.mean(dim=-1, keepdim=True) + 1e-6)
        return self.gamma * (x * nx) + self.beta + x


class ConvNeXtV2Block(nn.Module):
    def __init__(self, dim: int, intermediate_dim: int):
        super().__init__()
        self.dwconv = nn.Conv1d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, intermediate_dim)
        self.act = nn.GELU()
        self.grn = GRN(intermediate_dim)
        self.pwconv2 = nn.Linear(intermediate_dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dwconv(x.transpose(1, 2)).transpose(1, 2)
        h = self.pwconv2(self.grn(self.act(self.pwconv1(self.norm(h)))))
        return x + h


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


class ConvPositionEmbedding(nn.Module):
    def __init__(self, dim: int, kernel_size: int = 31, groups: int = 16):
        super().__init__()
        self.conv1d = nn.Sequential(
            nn.Conv1d(dim, dim, kernel_size, groups=groups, padding=kernel_size // 2), nn.Mish(),
            nn.Conv1d(dim, dim, kernel_size, groups=groups, padding=kernel_size // 2), nn.Mish())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv1d(x.permute(0, 2, 1)).permute(0, 2, 1)


class InputEmbedding(nn.Module):
    """(noisy mel, reference mel, text embedding) -> the transformer's input."""

    def __init__(self, mel_dim: int, text_dim: int, out_dim: int):
        super().__init__()
        self.proj = nn.Linear(mel_dim * 2 + text_dim, out_dim)
        self.conv_pos_embed = ConvPositionEmbedding(out_dim)

    def forward(self, x, cond, text_embed):
        x = self.proj(torch.cat((x, cond, text_embed), dim=-1))
        return self.conv_pos_embed(x) + x


class TimestepEmbedding(nn.Module):
    """The flow time t in [0, 1] -> (B, dim): 256 sinusoids of 1000 t, then an MLP."""

    def __init__(self, dim: int, freq_dim: int = 256):
        super().__init__()
        self.freq_dim = freq_dim
        self.time_mlp = nn.Sequential(nn.Linear(freq_dim, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, time: torch.Tensor) -> torch.Tensor:
        half = self.freq_dim // 2
        step = math.log(10000) / (half - 1)
        freqs = torch.exp(torch.arange(half, device=time.device).float() * -step)
        angles = 1000 * time.unsqueeze(1) * freqs.unsqueeze(0)
        hidden = torch.cat((angles.sin(), angles.cos()), dim=-1).to(time.dtype)
        return self.time_mlp(hidden)


class RotaryEmbedding(nn.Module):
    """x-transformers' RotaryEmbedding (no xpos): angles position * inv_freq, each repeated for the
    two members of an interleaved pair. `inv_freq` is a persistent buffer: checkpoints carry it."""

    def __init__(self, dim: int, base: float = 10000):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)))

    def tables(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) of shape (1, 1, length, dim), computed once per sequence length: upstream
        recomputes the same values in every block."""
        t = torch.arange(length, device=self.inv_freq.device).type_as(self.inv_freq)
        angles = torch.einsum("i,j->ij", t, self.inv_freq)
        angles = torch.stack((angles, angles), dim=-1).flatten(-2)
        return angles.cos()[None, None], angles.sin()[None, None]


def rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs (x0, x1) -> (x0 cos - x1 sin, x1 cos + x0 sin), as x-transformers'
    apply_rotary_pos_emb with scale 1 (a multiplication by 1.0 changes no bits, so it is left out)."""
    pairs = x.unflatten(-1, (-1, 2))
    rotated = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    return (x * cos) + (rotated * sin)


# ---------------------------------------------------------------------------------------------------
# Transformer


# upstream picks its RMSNorm by float(torch.__version__[:3]) >= 2.4, which reads torch 2.10+ as "2.1":
# it takes the handwritten path there; the same rule here keeps the same arithmetic on every torch
NATIVE_RMS_NORM = float(torch.__version__[:3]) >= 2.4


class RMSNorm(nn.Module):
    """upstream's qk RMSNorm (no released model enables it)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        half = self.weight.dtype in (torch.float16, torch.bfloat16)
        if NATIVE_RMS_NORM:
            if half:
                x = x.to(self.weight.dtype)
            return F.rms_norm(x, normalized_shape=(x.shape[-1],), weight=self.weight, eps=self.eps)
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        if half:
            x = x.to(self.weight.dtype)
        return x * self.weight


class AdaLayerNorm(nn.Module):
    """Six modulations from the time embedding: shift, scale, gate for attention and for the FFN."""

    def __init__(self, dim: int):
        super().__init__()
        self.linear = nn.Linear(dim, dim * 6)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)


class AdaLayerNormFinal(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.linear = nn.Linear(dim, dim * 2)
        self.norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)

    def forward(self, x, t):
        scale, shift = torch.chunk(self.linear(F.silu(t)), 2, dim=1)
        return self.norm(x) * (1 + scale)[:, None, :] + shift[:, None, :]


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, dim_head: int, qk_norm: str | None):
        super().__init__()
        self.heads = heads
        inner = heads * dim_head
        self.to_q = nn.Linear(dim, inner)
        self.to_k = nn.Linear(dim, inner)
        self.to_v = nn.Linear(dim, inner)
        if qk_norm is None:
            self.q_norm = self.k_norm = None
        elif qk_norm == "rms_norm":
            self.q_norm, self.k_norm = RMSNorm(dim_head), RMSNorm(dim_head)
        else:
            raise ValueError(f"qk_norm {qk_norm!r} is not supported; use null or rms_norm")
        self.to_out = nn.ModuleList([nn.Linear(inner, dim), nn.Dropout(0.0)])

    def project(self, h, rope, rotated_heads: int | None):
        """(B, N, dim) -> q, k, v (B, heads, N, dim_head): projections, qk norms, RoPE on every head
        or on the first `rotated_heads` (upstream's pe_attn_head)."""
        batch, dim_head = h.shape[0], rope[0].shape[-1]
        q = self.to_q(h).view(batch, -1, self.heads, dim_head).transpose(1, 2)
        k = self.to_k(h).view(batch, -1, self.heads, dim_head).transpose(1, 2)
        v = self.to_v(h).view(batch, -1, self.heads, dim_head).transpose(1, 2)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        cos, sin = rope
        if rotated_heads is None:
            return rotate_pairs(q, cos, sin), rotate_pairs(k, cos, sin), v
        n = rotated_heads
        q, k = q.clone(), k.clone()  # upstream writes the rotated heads into its q, k in place
        q[:, :n] = rotate_pairs(q[:, :n], cos, sin)
        k[:, :n] = rotate_pairs(k[:, :n], cos, sin)
        return q, k, v

    @staticmethod
    def attend(q, k, v, index=None):
        """Non-causal attention over every frame, heads merged back: (B, N, heads * dim_head)
        (LayerSteps passes an `index` this does not need)."""
        a = accel.attention(q, k, v, site=ATTENTION)
        return a.transpose(1, 2).reshape(a.shape[0], -1, a.shape[1] * a.shape[3]).to(q.dtype)


class FeedForward(nn.Module):
    def __init__(self, dim: int, mult: float):
        super().__init__()
        inner = int(dim * mult)
        self.ff = nn.Sequential(nn.Sequential(nn.Linear(dim, inner), nn.GELU(approximate="tanh")), nn.Dropout(0.0),
                                nn.Linear(inner, dim))

    def forward(self, x):
        return self.ff(x)


class DiTBlock(nn.Module):
    """Split at its attention call: `before` (modulated norm, projections, RoPE) -> attention ->
    `after` (output projection, gated residual, modulated FFN, gated residual)."""

    def __init__(self, config: DiTConfig):
        super().__init__()
        self.attn_norm = AdaLayerNorm(config.dim)
        self.attn = Attention(config.dim, config.heads, config.dim_head, config.qk_norm)
        self.ff_norm = nn.LayerNorm(config.dim, elementwise_affine=False, eps=1e-6)
        self.ff = FeedForward(config.dim, config.ff_mult)
        self.rotated_heads = config.pe_attn_head

    def before(self, state, rope):
        """state (x, t) -> (q, k, v, residual); residual carries x, t and the FFN's modulations."""
        x, t = state
        shift, scale, gate, shift_ff, scale_ff, gate_ff = torch.chunk(self.attn_norm.linear(F.silu(t)), 6, dim=1)
        h = self.attn_norm.norm(x) * (1 + scale[:, None]) + shift[:, None]
        q, k, v = self.attn.project(h, rope, self.rotated_heads)
        return q, k, v, (x, t, gate, shift_ff, scale_ff, gate_ff)

    def attend(self, q, k, v, index=None):
        return self.attn.attend(q, k, v)

    def after(self, a, residual):
        x, t, gate, shift_ff, scale_ff, gate_ff = residual
        x = x + gate.unsqueeze(1) * self.attn.to_out[0](a)
        h = self.ff_norm(x) * (1 + scale_ff[:, None]) + shift_ff[:, None]
        return x + gate_ff.unsqueeze(1) * self.ff(h), t


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
        self.transformer_blocks = nn.ModuleList(DiTBlock(config) for _ in range(config.depth))
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
