"""The building blocks of F5-TTS's DiT (f5-tts 1.1.22, MIT), shared with the copy GPT-SoVITS v3/v4 vendors in
`GPT_SoVITS/f5_tts/model/modules.py` (48b1a01): the two compute the same operations in the same order for these
blocks, so one implementation serves both engines (engines/f5tts/dit.py, engines/gpt_sovits/cfm.py).

    ConvNeXtV2Block (GRN) ... the text encoder's blocks; `sinusoidal_table` its fixed positions
    InputEmbedding (ConvPositionEmbedding) ... (noisy mel, condition mel, text) -> the transformer's input
    TimestepEmbedding ... a flow time (or GPT-SoVITS's step size d) -> (B, dim)
    RotaryEmbedding, rotate_pairs ... x-transformers' interleaved-pair RoPE
    AdaLayerNorm, AdaLayerNormFinal, Attention, FeedForward, DiTBlock ... the AdaLN-zero transformer block

Module and parameter names are upstream's (both copies use the same), so checkpoints load as they are.
A `DiTBlock` is split at its attention call (before -> attend -> after) for runtime.graphs.LayerSteps; the
attention goes through the accel site its engine declares and passes in.

MaskedDiTBlock is the block under a mask that GPT-SoVITS and CosyVoice 3 both run. What differs between the
upstreams stays with the engines: F5-TTS's text encoder embeds character ids and masks its filler, rotates every
head or the first N after the head split (pe_attn_head); GPT-SoVITS's encodes continuous features, rotates before
the split (head 0 only: rotated_heads=1 here), masks padded keys and zeroes the attention output of padded frames,
and adds a step-size embedding to the time embedding; CosyVoice 3's embeds mu and the speaker with causal position
convolutions.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.runtime import accel

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


class ConvPositionEmbedding(nn.Module):
    def __init__(self, dim: int, kernel_size: int = 31, groups: int = 16):
        super().__init__()
        self.conv1d = nn.Sequential(
            nn.Conv1d(dim, dim, kernel_size, groups=groups, padding=kernel_size // 2), nn.Mish(),
            nn.Conv1d(dim, dim, kernel_size, groups=groups, padding=kernel_size // 2), nn.Mish())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv1d(x.permute(0, 2, 1)).permute(0, 2, 1)


class InputEmbedding(nn.Module):
    """(noisy mel, condition mel, text embedding), each (B, frames, C) -> the transformer's input."""

    def __init__(self, mel_dim: int, text_dim: int, out_dim: int):
        super().__init__()
        self.proj = nn.Linear(mel_dim * 2 + text_dim, out_dim)
        self.conv_pos_embed = ConvPositionEmbedding(out_dim)

    def forward(self, x, cond, text_embed):
        x = self.proj(torch.cat((x, cond, text_embed), dim=-1))
        return self.conv_pos_embed(x) + x


class TimestepEmbedding(nn.Module):
    """A time in [0, 1] -> (B, dim): 256 sinusoids of 1000 t, then an MLP."""

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
    """F5-TTS's qk RMSNorm (no released model enables it; GPT-SoVITS's copy has none)."""

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
    """Projections, qk norms, RoPE and non-causal attention at the engine's accel `site`."""

    def __init__(self, dim: int, heads: int, dim_head: int, qk_norm: str | None, site: accel.Site):
        super().__init__()
        self.heads = heads
        self.site = site
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
        or on the first `rotated_heads` (F5-TTS's pe_attn_head; GPT-SoVITS's rotation of the first
        dim_head channels before the head split is head 0's: the same element-wise operations)."""
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

    def attend(self, q, k, v, mask=None, mask_info=None):
        """Non-causal attention (over every frame, or the keys `mask` allows), heads merged back:
        (B, N, heads * dim_head)."""
        a = accel.attention(q, k, v, site=self.site, mask=mask, mask_info=mask_info)
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

    def __init__(self, dim: int, heads: int, dim_head: int, ff_mult: float, site: accel.Site,
                 qk_norm: str | None = None, rotated_heads: int | None = None):
        super().__init__()
        self.attn_norm = AdaLayerNorm(dim)
        self.attn = Attention(dim, heads, dim_head, qk_norm, site)
        self.ff_norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.ff = FeedForward(dim, ff_mult)
        self.rotated_heads = rotated_heads

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
        return self.feed_forward(self.attn.to_out[0](a), residual)

    def feed_forward(self, attended, residual):
        """The projected attention output -> the block's output state (x, t)."""
        x, t, gate, shift_ff, scale_ff, gate_ff = residual
        x = x + gate.unsqueeze(1) * attended
        h = self.ff_norm(x) * (1 + scale_ff[:, None]) + shift_ff[:, None]
        return x + gate_ff.unsqueeze(1) * self.ff(h), t


class MaskedDiTBlock(DiTBlock):
    """A DiTBlock under a mask, as GPT-SoVITS' and CosyVoice 3's copies run it: `pos` is (cos, sin, hidden frames
    (B, T, 1) True where the output is zeroed), `index` is (the mask attention takes, its MaskInfo); the projected
    attention output is zeroed on the hidden frames before the gated residual."""

    def before(self, state, pos):
        cos, sin, hidden = pos
        q, k, v, residual = super().before(state, (cos, sin))
        return q, k, v, (residual, hidden)

    def attend(self, q, k, v, index):
        mask, mask_info = index
        return self.attn.attend(q, k, v, mask, mask_info)

    def after(self, a, residual):
        residual, hidden = residual
        return self.feed_forward(self.attn.to_out[0](a).masked_fill(hidden, 0.0), residual)
