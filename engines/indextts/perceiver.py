"""IndexTTS 2's PerceiverResampler (upstream's indextts/gpt/perceiver.py, after naturalspeech2-pytorch): a fixed set
of learned latents reads the Conformer's frames through cross-attention.

    context (B, T', C) -> proj_context (C -> dim, or nothing when C == dim)
    latents (n, dim) repeated over the batch
    depth x [latents += Attention(latents, cat(latents, context)); latents += FeedForward(latents)]
    -> RMSNorm: normalize(x) * sqrt(dim) * gamma                                    -> (B, n, dim)

Attention: heads of 64, q from the latents, k and v from cat(latents, context) (bias-free projections). It goes
through the accel site `indextts.perceiver`, whose reference is upstream's Attend with use_flash=False:
einsum(q, k) * d^-1/2, masked_fill(~key_padding, -finfo.max), softmax, einsum with v. The key mask is (B, n + T')
(UnifiedVoice pads the Conformer's frame mask with n leading Trues); no row is ever fully masked (the latents are
keys), so SDPA's -inf fill and upstream's -finfo.max agree there. FeedForward: Linear(dim -> 2 * inner), GEGLU
(gelu(gate) * x, erf GELU), Linear(inner -> dim), inner = int(dim * mult * 2 / 3).

Parameter names are upstream's (gpt.pth's keys under `perceiver_encoder.` and `emo_perceiver_encoder.`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.core.errors import InputError
from mizuoto.runtime import accel


def perceiver_attention(q, k, v, mask, causal, scale, enable_gqa, dropout_p):
    """Attend.forward with use_flash=False as the site's reference: q (B, H, I, D), k and v (B, H, J, D), `mask`
    boolean broadcastable to (B, 1, 1, J) (True: a real key) or None."""
    if causal or enable_gqa or dropout_p:
        raise ValueError("the perceiver's attention is neither causal, grouped nor dropped out")
    sim = torch.einsum("b h i d, b h j d -> b h i j", q, k) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if mask is not None:
        sim = sim.masked_fill(~mask, -torch.finfo(sim.dtype).max)
    return torch.einsum("b h i j, b h j d -> b h i d", sim.softmax(dim=-1), v)


ATTENTION = accel.Site("indextts.perceiver", reference=perceiver_attention)


@dataclass(frozen=True)
class PerceiverConfig:
    dim: int
    dim_context: int
    num_latents: int = 32
    heads: int = 8
    ff_mult: float = 4
    depth: int = 2
    dim_head: int = 64


class Attention(nn.Module):
    """Cross-attention with cross_attn_include_queries: the latents attend to themselves and the context."""

    def __init__(self, dim: int, dim_head: int, heads: int):
        super().__init__()
        self.heads = heads
        inner = dim_head * heads
        self.to_q = nn.Linear(dim, inner, bias=False)
        self.to_kv = nn.Linear(dim, inner * 2, bias=False)
        self.to_out = nn.Linear(inner, dim, bias=False)

    def forward(self, x: torch.Tensor, context: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """x (B, n, dim) latents, context (B, T, dim), mask (B, n + T) or None."""
        context = torch.cat((x, context), dim=-2)
        q, k, v = (self.to_q(x), *self.to_kv(context).chunk(2, dim=-1))
        b, h = x.shape[0], self.heads
        q, k, v = (t.reshape(b, t.shape[1], h, -1).permute(0, 2, 1, 3) for t in (q, k, v))
        info = None
        if mask is not None:
            info = accel.MaskInfo(mask)
            mask = mask[:, None, None, :]
        out = accel.attention(q, k, v, site=ATTENTION, mask=mask, mask_info=info)
        return self.to_out(out.permute(0, 2, 1, 3).reshape(b, -1, out.shape[1] * out.shape[3]))


class GEGLU(nn.Module):
    def forward(self, x):
        x, gate = x.chunk(2, dim=-1)
        return F.gelu(gate) * x


def feed_forward(dim: int, mult: float) -> nn.Sequential:
    inner = int(dim * mult * 2 / 3)
    return nn.Sequential(nn.Linear(dim, inner * 2), GEGLU(), nn.Linear(inner, dim))


class RMSNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.scale = dim ** 0.5
        self.gamma = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return F.normalize(x, dim=-1) * self.scale * self.gamma


class PerceiverResampler(nn.Module):
    def __init__(self, config: PerceiverConfig):
        super().__init__()
        self.config = config
        dim = config.dim
        self.proj_context = nn.Linear(config.dim_context, dim) if config.dim_context != dim else nn.Identity()
        self.latents = nn.Parameter(torch.zeros(config.num_latents, dim))
        self.layers = nn.ModuleList(
            nn.ModuleList([Attention(dim, config.dim_head, config.heads), feed_forward(dim, config.ff_mult)])
            for _ in range(config.depth))
        self.norm = RMSNorm(dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, dim_context), mask (B, num_latents + T) True = a real key, or None -> (B, num_latents, dim)."""
        config = self.config
        if x.dim() != 3 or x.size(-1) != config.dim_context:
            raise InputError(f"the perceiver takes frames (batch, frames, {config.dim_context}), got {tuple(x.shape)}")
        if mask is not None and (mask.dtype != torch.bool or mask.shape != (x.size(0), config.num_latents + x.size(1))):
            raise InputError(f"the perceiver's key mask must be boolean ({x.size(0)}, {config.num_latents} latents + "
                             f"{x.size(1)} frames), got {mask.dtype} {tuple(mask.shape)}")
        x = self.proj_context(x)
        # Upstream repeats the latents as an expanded view and its weights require grad, so torch's matmul folds the
        # first to_q into one mm on a copy; with frozen weights it would take bmm (other floats). A contiguous copy
        # takes the mm path either way.
        latents = self.latents.unsqueeze(0).expand(x.shape[0], -1, -1).contiguous()
        for attn, ff in self.layers:
            latents = attn(latents, x, mask) + latents
            latents = ff(latents) + latents
        return self.norm(latents)
