"""VoxCPM's two small bidirectional stacks on MiniCPM: the local encoder and the local DiT.

The local encoder (upstream `modules/locenc/local_encoder.py`, checkpoint prefix `feat_encoder.`) turns
each patch of audio latents into one vector for the LMs: the patch's frames are projected, a learnt
special token goes in front, a bidirectional MiniCPM runs over the (patch + 1) positions, and the
special token's output is the patch's embedding.

The local DiT (`modules/locdit/local_dit.py` for VoxCPM 0.5B / 1.5, `local_dit_v2.py` for VoxCPM2;
prefix `feat_decoder.estimator.`) predicts the flow velocity of one patch for the CFM solver. Its
sequence is [conditioning, previous patch (prefix), noisy patch]; the output is read at the noisy
patch's positions. The versions differ only in the conditioning:
  - v1: one position, mu + the time embedding (mu is one vector of the DiT's width);
  - v2: mu's vectors as positions of their own (VoxCPM2's mu is two: the base LM's and the residual
    LM's projections, concatenated), then the time embedding as one more.
The time embedding is always time_mlp(sinusoids(t)) + delta_time_mlp(sinusoids(dt)); upstream's
solver passes dt = 0 unless the config's mean mode is on, and the sum is computed either way.

Both run on LOCAL_SITE (bidirectional, no mask). Both forwards have static shapes and read nothing
back, so a whole call can be captured as one CUDA graph.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.nn.ops import Linear

from .minicpm import LOCAL_SITE, MiniCPM, MiniCPMConfig

DIT_VERSIONS = (1, 2)


def _local_stack(config: MiniCPMConfig, what: str, rope_positions: int | None) -> MiniCPM:
    if config.vocab_size != 0:
        raise ValueError(f"the local {what} takes no tokens: derive its config with vocab_size 0 "
                         f"(MiniCPMConfig.local)")
    return MiniCPM(config, LOCAL_SITE, rope_positions)


class LocalEncoder(nn.Module):
    """upstream's VoxCPMLocEnc: `special_token`, `in_proj`, `encoder.*`."""

    def __init__(self, config: MiniCPMConfig, input_dim: int, rope_positions: int | None = None):
        super().__init__()
        self.config = config
        # loaded from the checkpoint (upstream draws it from the global generator; this draws nothing)
        self.special_token = nn.Parameter(torch.zeros(1, 1, 1, config.hidden_size))
        self.in_proj = Linear(input_dim, config.hidden_size, bias=True)
        self.encoder = _local_stack(config, "encoder", rope_positions)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Patches x (B, T, P, feat_dim) -> one vector per patch (B, T, hidden)."""
        b, t, p, _ = x.shape
        x = self.in_proj(x)
        x = torch.cat([self.special_token.expand(b, t, 1, -1), x], dim=2).reshape(b * t, p + 1, -1)
        hidden, _ = self.encoder(x, causal=False)
        return hidden[:, 0, :].reshape(b, t, -1)


def timestep_embedding(t: torch.Tensor, dim: int, scale: float = 1000) -> torch.Tensor:
    """upstream's SinusoidalPosEmb: sin then cos of scale * t * exp(-i ln(10000) / (dim/2 - 1)), in
    t's dtype, (N, dim) for t (N,) (a 0-d t is one row)."""
    if t.dim() < 1:
        t = t.unsqueeze(0)
    half = dim // 2
    step = math.log(10000) / (half - 1)
    freqs = torch.exp(torch.arange(half, dtype=t.dtype, device=t.device) * -step)
    angles = scale * t.unsqueeze(1) * freqs.unsqueeze(0)
    return torch.cat((angles.sin(), angles.cos()), dim=-1)


class TimeMLP(nn.Module):
    """upstream's TimestepEmbedding: linear_1, SiLU, linear_2 (both with bias)."""

    def __init__(self, dim: int):
        super().__init__()
        self.linear_1 = Linear(dim, dim, bias=True)
        self.linear_2 = Linear(dim, dim, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_2(F.silu(self.linear_1(x)))


class LocalDiT(nn.Module):
    """upstream's VoxCPMLocDiT (`version` 1) or its VoxCPM2 variant (`version` 2): `in_proj`,
    `cond_proj`, `out_proj`, `time_mlp`, `delta_time_mlp`, `decoder.*`."""

    def __init__(self, config: MiniCPMConfig, in_channels: int, version: int, rope_positions: int | None = None):
        super().__init__()
        if version not in DIT_VERSIONS:
            raise ValueError(f"the local DiT comes in versions 1 (VoxCPM 0.5B, 1.5) and 2 (VoxCPM2), got {version!r}")
        hidden = config.hidden_size
        if hidden % 2 or hidden < 4:
            raise ValueError(f"the local DiT's width must be even and at least 4 (its time sinusoids), got {hidden}")
        self.config, self.version, self.in_channels = config, version, in_channels
        self.in_proj = Linear(in_channels, hidden, bias=True)
        self.cond_proj = Linear(in_channels, hidden, bias=True)
        self.out_proj = Linear(hidden, in_channels, bias=True)
        self.time_mlp = TimeMLP(hidden)
        self.delta_time_mlp = TimeMLP(hidden)
        self.decoder = _local_stack(config, "DiT", rope_positions)

    def forward(self, x: torch.Tensor, mu: torch.Tensor, t: torch.Tensor, cond: torch.Tensor,
                dt: torch.Tensor) -> torch.Tensor:
        """upstream's estimator call, argument for argument: the velocity (N, C, P) of the noisy patch
        x (N, C, P) at flow times t (N,) with steps dt (N,), given mu (N, hidden) in v1 or
        (N, k * hidden) in v2, and the previous patch cond (N, C, P'). The CFM solver's guided batch
        is N = 2b: the conditional rows, then the same rows with mu zeroed."""
        return self.velocity(x, self.prepare(mu, cond), self.time_token(t, dt))

    # The same call in three stages, for the sampler: within one patch mu and cond are the same at every
    # Euler step, and each step's t and dt are the same for every patch, so their parts are computed once
    # (the same ops on the same values: the same bits as calling forward every time).

    def prepare(self, mu: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The patch's conditioning: (mu as the DiT's leading vectors, the projected previous patch)."""
        cond = self.cond_proj(cond.transpose(1, 2).contiguous())
        if self.version == 2:
            hidden = self.config.hidden_size
            if mu.shape[-1] % hidden:
                raise ValueError(f"the v2 DiT's mu must hold whole vectors of {hidden}, got width {mu.shape[-1]}")
            mu = mu.view(mu.shape[0], -1, hidden)
        return mu, cond

    def time_token(self, t: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        """time_mlp(sinusoids(t)) + delta_time_mlp(sinusoids(dt)), (N, hidden) in the model's dtype."""
        hidden, dtype = self.config.hidden_size, self.in_proj.weight.dtype
        time = self.time_mlp(timestep_embedding(t, hidden).to(dtype))
        return time + self.delta_time_mlp(timestep_embedding(dt, hidden).to(dtype))

    def velocity(self, x: torch.Tensor, context: tuple[torch.Tensor, torch.Tensor], time: torch.Tensor) -> torch.Tensor:
        """The velocity of the noisy patch x (N, C, P) from `prepare`'s context and a `time_token`."""
        mu, cond = context
        x = self.in_proj(x.transpose(1, 2).contiguous())
        if self.version == 1:
            front = 1
            x = torch.cat([(mu + time).unsqueeze(1), cond, x], dim=1)
        else:
            front = mu.size(1) + 1
            x = torch.cat([mu, time.unsqueeze(1), cond, x], dim=1)
        out, _ = self.decoder(x, causal=False)
        out = self.out_proj(out[:, cond.size(1) + front:, :])
        return out.transpose(1, 2).contiguous()
