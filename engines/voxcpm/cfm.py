"""VoxCPM's flow-matching sampler: one latent patch from the LM's condition, exact to upstream's
`UnifiedCFM.forward` + `solve_euler` (voxcpm 2.0.3, `modules/locdit/unified_cfm.py`) at inference.

Per patch: noise `z` (batch, feat_dim, patch) from the request's generator, then Euler steps from t = 1
to t = 0 over a linspace grid bent by sway sampling. Every step evaluates the local DiT once on a batch
of two halves: the conditional rows (the LM's `mu`) and the unconditional rows (`mu` zeroed; noise,
time, prefix patch and delta time are the same in both halves). Guidance is CFG-Zero*: the unconditional
velocity is first scaled by st* = <v_cond, v_uncond> / (|v_uncond|^2 + 1e-8) per row, then
`v = v_uncond·st* + cfg·(v_cond − v_uncond·st*)`; and the first `max(1, int(0.04·(n + 1)))` steps use a
zero velocity (x stays the noise) without calling the DiT at all.

Upstream's arithmetic is kept op for op, so CPU results are bit-identical: the grid is computed in the
model's dtype on the model's device (`linspace`, `cos`), t and dt are carried as upstream carries them
(t ← t − dt, then dt ← t − next grid point, which need not be the grid values bit for bit; for 7, 10 and
50 steps in float32 and bfloat16 they are), and the guidance and
update expressions are upstream's. Only the bookkeeping differs: the grid, the per-step t and dt and the
guidance batch's fixed halves are built once per patch (once per shape with CUDA graphs) instead of at
every step, and the zero-velocity steps skip `x − dt·0` (x itself, but for a −0.0 under a negative dt).

The noise is the only random draw: `torch.randn((batch, feat_dim, patch), dtype=mu.dtype)` on mu's
device from the generator passed in, once per patch before any step. Upstream draws the same tensor
from the global generator, so a generator seeded with N gives what upstream gives after
`torch.manual_seed(N)`.

`sample` has no host syncs and fixed shapes for given (batch, options), so a whole patch can be one CUDA
graph (`GraphedSampler`) when the estimator is capturable too.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from mizuoto.core.errors import InputError

# estimator(x, mu, t, cond, dt) -> velocity, upstream's DiT call: x (N, feat_dim, patch), mu (N, mu_dim),
# t (N,), cond (N, feat_dim, prefix), dt (N,) -> (N, feat_dim, patch); N = 2·batch. An estimator that also
# has `prepare(mu, cond)`, `time_token(t, dt)` and `velocity(x, context, token)` (local.LocalDiT) is called
# in those stages: its per-patch part once per patch, its per-step time part once per schedule.
Estimator = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

ZERO_STAR_FRACTION = 0.04  # upstream's share of the steps run with zero velocity under CFG-Zero*
ST_STAR_EPS = 1e-8  # upstream's guard in st*'s denominator


@dataclass(frozen=True)
class FlowOptions:
    """The sampler's settings. Defaults are what upstream's generation uses (`inference_timesteps` 10,
    `cfg_value` 2.0; `UnifiedCFM.forward`'s own defaults for the rest, which generation never changes).
    `mean_mode` comes from the checkpoint (`dit_mean_mode`, default False): with it the DiT sees the
    step's dt, without it a zero dt."""

    n_timesteps: int = 10
    cfg_value: float = 2.0
    sway_sampling_coef: float = 1.0
    use_cfg_zero_star: bool = True
    temperature: float = 1.0
    mean_mode: bool = False

    def __post_init__(self):
        if isinstance(self.n_timesteps, bool) or not isinstance(self.n_timesteps, int) or self.n_timesteps < 1:
            raise InputError(f"inference_timesteps must be a whole number of at least 1, got {self.n_timesteps!r}")
        for name in ("cfg_value", "sway_sampling_coef", "temperature"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InputError(f"{name} must be a finite number, got {value!r}")

    @property
    def zero_steps(self) -> int:
        """How many leading steps have zero velocity (upstream: `max(1, int(len(t_span) * 0.04))`)."""
        if not self.use_cfg_zero_star:
            return 0
        return min(self.n_timesteps, max(1, int((self.n_timesteps + 1) * ZERO_STAR_FRACTION)))


@dataclass(frozen=True)
class Schedule:
    """Upstream's t and dt at each Euler step, as 0-d-indexable tensors in the model's dtype/device."""

    times: torch.Tensor  # (n,) t given to the DiT at step k
    deltas: torch.Tensor  # (n,) dt of step k: x ← x − dt·v
    # a staged estimator's time token per step, per (estimator, guided batch): the same for every patch
    time_tokens: dict = field(default_factory=dict, compare=False, repr=False)


def time_grid(n_timesteps: int, sway_sampling_coef: float, device, dtype) -> torch.Tensor:
    """The n + 1 grid points from 1 to 0 with sway sampling, in upstream's ops and dtype."""
    grid = torch.linspace(1, 0, n_timesteps + 1, device=device, dtype=dtype)
    return grid + sway_sampling_coef * (torch.cos(torch.pi / 2 * grid) - 1 + grid)


def make_schedule(options: FlowOptions, device, dtype) -> Schedule:
    """t and dt per step, carried as upstream's solver carries them (t ← t − dt; dt ← t − grid[k + 1]),
    which is not always the grid values bit for bit."""
    grid = time_grid(options.n_timesteps, options.sway_sampling_coef, device, dtype)
    t, dt = grid[0], grid[0] - grid[1]
    times, deltas = [], []
    for step in range(1, options.n_timesteps + 1):
        times.append(t)
        deltas.append(dt)
        t = t - dt
        if step < options.n_timesteps:
            dt = t - grid[step + 1]
    return Schedule(torch.stack(times), torch.stack(deltas))


def optimized_scale(positive: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
    """CFG-Zero*'s st* per row of (batch, features): the projection of the conditional velocity on the
    unconditional one (upstream's expression)."""
    dot = torch.sum(positive * negative, dim=1, keepdim=True)
    squared_norm = torch.sum(negative**2, dim=1, keepdim=True) + ST_STAR_EPS
    return dot / squared_norm


def guided_velocity(velocity: torch.Tensor, batch: int, cfg_value: float, use_cfg_zero_star: bool) -> torch.Tensor:
    """The DiT's (2·batch, ...) output -> the guided velocity (batch, ...): conditional rows first."""
    conditional, unconditional = velocity[:batch], velocity[batch:]
    if use_cfg_zero_star:
        st_star = optimized_scale(conditional.reshape(batch, -1), unconditional.reshape(batch, -1))
        st_star = st_star.view(batch, *([1] * (conditional.dim() - 1)))
    else:
        st_star = 1.0
    return unconditional * st_star + cfg_value * (conditional - unconditional * st_star)


def sample(estimator: Estimator, mu: torch.Tensor, cond: torch.Tensor, generator: torch.Generator | None,
           patch_size: int, options: FlowOptions = FlowOptions(), schedule: Schedule | None = None) -> torch.Tensor:
    """One patch: mu (batch, mu_dim), the previous patch `cond` (batch, feat_dim, prefix) -> the new
    patch (batch, feat_dim, patch_size), in mu's dtype.

    Draws the noise from `generator` (None: torch's default generator for mu's device). `schedule`
    (from `make_schedule(options, mu.device, mu.dtype)`) may be passed to reuse it across patches;
    it must have been made for the same options, device and dtype.
    """
    if mu.dim() != 2 or cond.dim() != 3 or cond.shape[0] != mu.shape[0]:
        raise ValueError(f"mu must be (batch, dim) and cond (batch, feat_dim, prefix); got {tuple(mu.shape)} "
                         f"and {tuple(cond.shape)}")
    batch, feat_dim, dtype = mu.shape[0], cond.shape[1], mu.dtype
    x = torch.randn((batch, feat_dim, patch_size), generator=generator, device=mu.device, dtype=dtype)
    x = x * options.temperature
    if schedule is None:
        schedule = make_schedule(options, mu.device, dtype)
    start = options.zero_steps  # steps before it leave x as it is (zero velocity)
    if start >= options.n_timesteps:
        return x
    # The guidance batch's parts that do not change between steps (upstream refills them every step).
    mu_in = torch.cat((mu, torch.zeros_like(mu)))
    cond = cond.to(dtype)
    cond_in = torch.cat((cond, cond))
    times = schedule.times[:, None].expand(-1, 2 * batch).contiguous()
    if options.mean_mode:
        deltas = schedule.deltas[:, None].expand(-1, 2 * batch).contiguous()
    else:
        zero_dt = torch.zeros(2 * batch, device=mu.device, dtype=dtype)
    staged = hasattr(estimator, "velocity")  # the DiT's own stages: per-patch and per-step parts kept
    if staged:
        context = estimator.prepare(mu_in, cond_in)
        key = (estimator, 2 * batch)
        if key not in schedule.time_tokens:
            schedule.time_tokens[key] = [
                None if k < start else estimator.time_token(times[k], deltas[k] if options.mean_mode else zero_dt)
                for k in range(options.n_timesteps)]
        tokens = schedule.time_tokens[key]
    for k in range(start, options.n_timesteps):
        if staged:
            velocity = estimator.velocity(torch.cat((x, x)), context, tokens[k])
        else:
            velocity = estimator(torch.cat((x, x)), mu_in, times[k], cond_in,
                                 deltas[k] if options.mean_mode else zero_dt)
        velocity = guided_velocity(velocity, batch, options.cfg_value, options.use_cfg_zero_star)
        x = x - schedule.deltas[k] * velocity
    return x


# ---------------------------------------------------------------------------------------------------
# CUDA graphs


class _Run:
    """Static inputs, schedule and graph of one (shapes, dtype, device)."""

    def __init__(self, mu: torch.Tensor, cond: torch.Tensor, schedule: Schedule, epoch: int):
        self.mu, self.cond, self.schedule, self.epoch = mu.clone(), cond.clone(), schedule, epoch
        self.graph = None


_MISSING = object()


class GraphedSampler:
    """`sample` for one patch as one CUDA graph per input shape; eager where graphs are off or unusable.

        sampler = GraphedSampler(estimator, graphs, patch_size, options)   # graphs: Graphs or None
        patch = sampler(mu, cond, generator)                              # a fresh tensor each call

    The estimator must be capturable (fixed shapes, no host syncs, kernels allowed in a capture); a
    capture that fails is logged once by `Graphs` and that shape runs eagerly from then on. Replays draw
    the noise from `graphs.generator`: pass it while inside `graphs.drawing(request_generator)`, or pass
    the request's generator (None: the device's default one) and each call loads and writes back its state
    around the replay. Either way the draws are eager code's. Keep the sampler with the loaded model and
    drop it when the estimator's weights move (`graphs.signature`).
    """

    def __init__(self, estimator: Estimator, graphs, patch_size: int, options: FlowOptions = FlowOptions()):
        self.estimator, self.graphs, self.patch_size, self.options = estimator, graphs, patch_size, options
        self._runs: dict[tuple, _Run | None] = {}
        self._schedules: dict[tuple, Schedule] = {}
        self._lock = threading.Lock()

    def schedule(self, device, dtype) -> Schedule:
        key = (torch.device(device), dtype)
        with self._lock:
            if key not in self._schedules:
                self._schedules[key] = make_schedule(self.options, device, dtype)
            return self._schedules[key]

    def eager(self, mu, cond, generator) -> torch.Tensor:
        return sample(self.estimator, mu, cond, generator, self.patch_size, self.options,
                      self.schedule(mu.device, mu.dtype))

    def __call__(self, mu: torch.Tensor, cond: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        graphs = self.graphs
        if graphs is None or torch.is_grad_enabled():
            return self.eager(mu, cond, generator)
        if generator is graphs.generator:
            return self._graphed(mu, cond)
        if generator is None:  # eager code would draw from the device's default generator
            generator = torch.cuda.default_generators[graphs.device.index]
        with graphs.drawing(generator):
            return self._graphed(mu, cond)

    def _graphed(self, mu, cond) -> torch.Tensor:
        graphs = self.graphs
        with graphs.lock, graphs.device_context():
            key = (tuple(mu.shape), tuple(cond.shape), mu.dtype, cond.dtype, mu.device)
            run = self._runs.get(key, _MISSING)
            if run is None:  # its capture failed: eager, drawing from the graphs' generator as a replay would
                return self.eager(mu, cond, graphs.generator)
            if run is _MISSING or run.epoch != graphs.epoch:  # new shapes, or its generator was replaced
                run = self._runs[key] = _Run(mu, cond, self.schedule(mu.device, mu.dtype), graphs.epoch)
            run.mu.copy_(mu)
            run.cond.copy_(cond)
            if run.graph is None:
                run.graph = graphs.capture(lambda: sample(self.estimator, run.mu, run.cond, graphs.generator,
                                                          self.patch_size, self.options, run.schedule))
                if run.graph is None:
                    self._runs[key] = None
                    return self.eager(mu, cond, graphs.generator)
            run.graph.graph.replay()  # already under the graphs' device
            return run.graph.outputs.clone()  # the static output is rewritten by the next replay
