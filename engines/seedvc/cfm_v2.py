"""Seed-VC v2's flow-matching sampler around its DiT (engines/seedvc/dit_v2.py), and the loading of `net.cfm`.

Exact to seed-vc 0.4.3 `modules/v2/cfm.py::CFM.inference` / `solve_euler` (GPL-3.0 code, read not copied).

Sampling (`CFMV2.inference`): noise z = randn(B, C, T) · temperature, drawn from the caller's generator (upstream
draws from the global one: the same numbers for the same seed); the time grid is `linspace(0, 1, steps + 1)` bent by
upstream's cosine schedule `t + (-1)·(cos(π/2·t) - 1 + t)` (that is 1 - cos(π/2·t), in upstream's operation order);
Euler steps with t accumulated (`t += dt`) and the next dt taken as `grid[step + 1] - t`, as upstream does; the
prompt mel (B, C, P) fills the first P frames of prompt_x, and those frames of x are zeroed at the start and after
every step (the output's too).

Guidance, with rates (a, b) = (intelligibility, similarity) = upstream's inference_cfg_rate, one estimator call per
step on a batch of up to three stacked conditions (x repeated; each row's x_lens and t):
    random_voice    [prompt 0, style 0, mu] and [0, 0, 0]              (1 + a)·v0 - a·v1
    a = b = 0       [prompt, style, mu] alone                          v0
    a = 0           [prompt, style, mu] and [0, 0, mu]                 (1 + b)·v0 - b·v1
    b = 0           [prompt, style, mu] and [0, 0, 0]                  (1 + a)·v0 - a·v1
    otherwise       [prompt, style, mu], [0, 0, mu] and [0, 0, 0]      (1 + a + b)·v0 - a·v2 - b·v1
Upstream runs these with a batch of one (its `[0:1]` slices and its (k,) times assume it; only its unguided call
without a time token runs a larger batch, its one time broadcast over the rows); a batch of B here stacks B rows
per condition, so upstream's calls are reproduced exactly where they run, and generalised where they fail.

The conditions are stacked once; each step then calls the estimator with tensors of fixed shapes and reads nothing
back to the host, so a CUDA-graph wrapper (mizuoto.runtime.graphs.GraphedCall) can capture a whole solve.
Precision: whatever the caller's autocast says, as upstream (its timbre path runs this under float32 autocast, its
style path under float16 autocast); the noise and the Euler state stay float32.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn.s2mel_cfm import check_condition

from .dit_v2 import UNUSED_KEYS, DiTV2, DiTV2Config
from .regulator_v2 import load_strictly

# ---------------------------------------------------------------------------------------------------
# The schedule and the guidance batch


def time_steps(steps: int, device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(t, dt) of each Euler step as 0-dim float32 tensors on `device`, computed as upstream's solve_euler does:
    the cosine-bent grid, t the running sum of the dts, each next dt the grid's next point minus that sum."""
    grid = torch.linspace(0, 1, steps + 1, device=device)
    grid = grid + (-1) * (torch.cos(torch.pi / 2 * grid) - 1 + grid)
    t, dt = grid[0], grid[1] - grid[0]
    out = []
    for step in range(1, steps + 1):
        out.append((t, dt))
        t = t + dt
        if step < steps:
            dt = grid[step + 1] - t
    return out


def guidance_rows(prompt_x, style, mu, rates: tuple[float, float], random_voice: bool) -> tuple:
    """(prompt_x, style, mu) of every condition stacked (see the module docstring), and how many conditions."""
    no_prompt, no_style, no_mu = torch.zeros_like(prompt_x), torch.zeros_like(style), torch.zeros_like(mu)
    if random_voice:
        rows = ((no_prompt, no_style, mu), (no_prompt, no_style, no_mu))
    elif rates[0] == 0 and rates[1] == 0:
        rows = ((prompt_x, style, mu),)
    elif rates[0] == 0:
        rows = ((prompt_x, style, mu), (no_prompt, no_style, mu))
    elif rates[1] == 0:
        rows = ((prompt_x, style, mu), (no_prompt, no_style, no_mu))
    else:
        rows = ((prompt_x, style, mu), (no_prompt, no_style, mu), (no_prompt, no_style, no_mu))
    if len(rows) == 1:
        return prompt_x, style, mu, 1
    return (*(torch.cat(column, dim=0) for column in zip(*rows, strict=True)), len(rows))


def mix(velocities: torch.Tensor, batch: int, rates: tuple[float, float], random_voice: bool) -> torch.Tensor:
    """The guided velocity from the stacked conditions' velocities, in upstream's branch order and expressions
    (the Python-float coefficient (1 + a + b) computed first, as there)."""
    a, b = rates
    parts = [velocities[i * batch:(i + 1) * batch] for i in range(velocities.shape[0] // batch)]
    if random_voice:
        return (1.0 + a) * parts[0] - a * parts[1]
    if a == 0 and b == 0:
        return velocities
    if a == 0:
        return (1.0 + b) * parts[0] - b * parts[1]
    if b == 0:
        return (1.0 + a) * parts[0] - a * parts[1]
    return (1.0 + a + b) * parts[0] - a * parts[2] - b * parts[1]


def check_inputs(mu, x_lens, prompt, style, channels: int, steps, temperature, cfg_rates, generator) -> None:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise InputError(f"Seed-VC v2 diffusion steps must be a whole number of at least 1, got {steps!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature):
        raise InputError(f"Seed-VC v2 temperature must be a finite number, got {temperature!r}")
    if not isinstance(cfg_rates, (tuple, list)) or len(cfg_rates) != 2 or any(
            isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) for r in cfg_rates):
        raise InputError(f"Seed-VC v2 cfg_rates must be two finite numbers (intelligibility, similarity), got "
                         f"{cfg_rates!r}")
    check_condition(mu, x_lens, prompt, style, generator, channels, "Seed-VC v2 CFM")


# ---------------------------------------------------------------------------------------------------
# The model


class CFMV2(nn.Module):
    """upstream's v2 `CFM` at inference: the DiT as `estimator` (keys `estimator.*`) and the sampler."""

    def __init__(self, config: DiTV2Config):
        super().__init__()
        self.estimator = DiTV2(config)
        self.in_channels = config.in_channels

    def velocity(self, x: torch.Tensor, t: torch.Tensor, conditions: tuple, rates: tuple[float, float],
                 random_voice: bool) -> torch.Tensor:
        """One estimator call at time t (0-dim) on the stacked conditions (prompt_x, x_lens, style, mu, count):
        the guided velocity of x (B, C, T)."""
        prompt_x, x_lens, style, mu, count = conditions
        batch = x.shape[0]
        xs = x if count == 1 else torch.cat([x] * count, dim=0)
        if batch == 1 or (count == 1 and not self.estimator.config.time_as_token):
            # upstream's cat of t.unsqueeze(0), k times: its (k,) times broadcast over a batch's rows where its call
            # runs (the adaptive norms' projections then see one row, not B: a GEMM of another shape rounds apart)
            times = t.unsqueeze(0).expand(count).contiguous()
        else:  # where upstream's call fails (its time token cannot broadcast): one time per row
            times = t.unsqueeze(0).expand(count * batch).contiguous()
        return mix(self.estimator(xs, prompt_x, x_lens, times, style, mu), batch, rates, random_voice)

    def inference(self, mu: torch.Tensor, x_lens: torch.Tensor, prompt: torch.Tensor, style: torch.Tensor,
                  steps: int, generator: torch.Generator, temperature: float = 1.0,
                  cfg_rates: tuple[float, float] = (0.7, 0.7), random_voice: bool = False) -> torch.Tensor:
        """The mel (B, C, T) for content mu (B, T, content_dim), lengths x_lens (B,), a prompt mel (B, C, P) (P may
        be 0) and a style (B, S): upstream's `CFM.inference(mu, x_lens, prompt, style, steps, temperature,
        [intelligibility, similarity], random_voice)`, the noise from `generator` (on mu's device). The first P
        frames of the result are zero."""
        check_inputs(mu, x_lens, prompt, style, self.in_channels, steps, temperature, cfg_rates, generator)
        rates = (cfg_rates[0], cfg_rates[1])
        random_voice = bool(random_voice)
        batch, frames, prompt_len = mu.shape[0], mu.shape[1], prompt.shape[-1]
        with torch.inference_mode():  # as upstream's decorator
            x = torch.randn([batch, self.in_channels, frames], device=mu.device, generator=generator) * temperature
            schedule = time_steps(steps, mu.device)
            prompt_x = torch.zeros_like(x)
            prompt_x[..., :prompt_len] = prompt
            x[..., :prompt_len] = 0
            prompt_rows, style_rows, mu_rows, count = guidance_rows(prompt_x, style, mu, rates, random_voice)
            lens = x_lens if count == 1 else torch.cat([x_lens] * count, dim=0)
            conditions = (prompt_rows, lens, style_rows, mu_rows, count)
            for t, dt in schedule:
                x = x + dt * self.velocity(x, t, conditions, rates, random_voice)
                x[:, :, :prompt_len] = 0
            return x


def load_cfm(state: dict, config: DiTV2Config, device) -> CFMV2:
    """A CFM for `config` with upstream's `net.cfm` state dict (its `module.` prefix stripped or not), in eval mode
    on `device`. Every weight inference reads must be there with its shape (one line naming what is not); the
    rotary table `estimator.transformer.freqs_cis` is taken from the file when it holds it (cast to bfloat16 as
    upstream's load copies it into its buffer) and computed otherwise; the unused x_embedder, the causal table and
    any other key upstream's strict=False load leaves unused are ignored."""
    if not isinstance(config, DiTV2Config):
        raise CheckpointError("load_cfm needs a DiTV2Config (DiTV2Config.from_section of cfm.estimator)")
    model = CFMV2(config)
    optional = ("estimator.transformer.freqs_cis", "estimator.t_embedder.freqs")
    load_strictly(model, state, tuple("estimator." + k for k in UNUSED_KEYS), "CFM", optional=optional)
    return model.to(device).eval()
