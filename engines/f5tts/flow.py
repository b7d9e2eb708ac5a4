"""Flow-matching sampling: upstream's `CFM.sample` for one item, exact to f5-tts 1.1.22.

The reference mel is the condition on its frames; the rest is drawn as noise and carried to t = 1 by
Euler steps over upstream's time grid (Empirically Pruned Step Sampling for 5, 6, 7, 10, 12 and 16
steps, else uniform), bent by sway sampling. Each step evaluates the DiT once on the packed batch
(with and without reference audio and text) and applies classifier-free guidance:
`flow = pred + (pred - null) * cfg_strength`. The reference frames are put back at the end.

The noise comes from the request's generator: seeded with N it draws what upstream draws after
`torch.manual_seed(N)` (upstream's API seeds the global generator once per call; we never touch it).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from mizuoto.core.errors import InputError

from .dit import DiT

# upstream's EPSS grids, in 1/32 units of time
EPSS = {
    5: (0, 2, 4, 8, 16, 32),
    6: (0, 2, 4, 6, 8, 16, 32),
    7: (0, 2, 4, 6, 8, 16, 24, 32),
    10: (0, 2, 4, 6, 8, 12, 16, 20, 24, 28, 32),
    12: (0, 2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32),
    16: (0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32),
}
MAX_FRAMES = 65536  # upstream's max_duration


def time_grid(steps: int, sway_sampling_coef: float | None, device, dtype, use_epss: bool = True) -> torch.Tensor:
    """The steps + 1 times from 0 to 1, in the model's dtype, as upstream computes them."""
    if steps < 1:
        raise InputError(f"nfe_step must be at least 1, got {steps}")
    grid = EPSS.get(steps) if use_epss else None
    if grid is None:
        t = torch.linspace(0, 1, steps + 1, device=device, dtype=dtype)
    else:
        t = (1 / 32) * torch.tensor(grid, device=device, dtype=dtype)
    if sway_sampling_coef is not None:
        t = t + sway_sampling_coef * (torch.cos(torch.pi / 2 * t) - 1 + t)
    return t


def total_frames(text_ids: torch.Tensor, reference_frames: int, duration: int) -> int:
    """At least the text or the reference plus one frame, so something is generated; at most upstream's
    65536."""
    n_text = int((text_ids != -1).sum())
    return min(max(max(n_text, reference_frames) + 1, duration), MAX_FRAMES)


@torch.no_grad()
def sample(model: DiT, cond: torch.Tensor, text_ids: torch.Tensor, duration: int, generator: torch.Generator | None,
           steps: int = 32, cfg_strength: float = 2.0, sway_sampling_coef: float | None = -1.0,
           step_fn: Callable | None = None, on_step: Callable[[int, int], None] | None = None) -> torch.Tensor:
    """Reference mel `cond` (frames, mel_dim) and text ids (n,) -> the whole mel (frames', mel_dim),
    reference frames included (callers cut them off).

    `step_fn(y, cond, texts, t, dt) -> next y` replaces the eager Euler step (the graphed solver step);
    `on_step(done, total)` runs before every step (progress, cancellation)."""
    dtype = model.proj_out.weight.dtype
    device = model.proj_out.weight.device
    cond = cond.to(dtype)
    reference_frames = cond.shape[0]
    frames = total_frames(text_ids, reference_frames, duration)
    cond = F.pad(cond, (0, 0, 0, frames - reference_frames), value=0.0)[None]
    is_reference = (torch.arange(frames, device=device) < reference_frames)[None, :, None]
    step_cond = torch.where(is_reference, cond, torch.zeros_like(cond))
    texts = model.text_embeddings(text_ids[None].to(device), frames)

    y = torch.randn(frames, cond.shape[-1], device=device, dtype=dtype, generator=generator)[None]
    t = time_grid(steps, sway_sampling_coef, device, dtype)
    step = step_fn or euler_step(model, cfg_strength)
    for i in range(steps):
        if on_step is not None:
            on_step(i, steps)
        y = step(y, step_cond, texts, t[i], t[i + 1] - t[i])
    return torch.where(is_reference, cond, y)[0]


def guided(cfg_strength: float) -> bool:
    """Upstream skips the rows without audio and text below this strength."""
    return cfg_strength >= 1e-5


def flow(pred: torch.Tensor, cfg_strength: float) -> torch.Tensor:
    """The flow from the DiT's prediction: guided (packed rows), or the prediction itself."""
    if not guided(cfg_strength):
        return pred
    pred, null = torch.chunk(pred, 2, dim=0)
    return pred + (pred - null) * cfg_strength


def euler_step(model: DiT, cfg_strength: float) -> Callable:
    """One Euler step, eagerly: torchdiffeq's `y + dt * f(t, y)` with upstream's guidance."""

    def step(y, cond, texts, t, dt):
        return y + dt * flow(model(y, cond, texts, t, guided(cfg_strength)), cfg_strength)

    return step
