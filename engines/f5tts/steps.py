"""The solver step as graph segments: the DiT between its attention calls replays as CUDA graphs.

Every step of one generation has the same shapes (the packed batch over all frames), so the graphs
captured at its first step serve the other steps; the next generation has another length and
captures again. The Euler update runs after the graphs, eagerly, on their output. On the CPU (or
with graphs off) the same segments run eagerly: the same operations as `DiT.forward`, so the same
bits either way.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mizuoto.runtime.graphs import Graphs, LayerSteps

from .dit import DiT
from .flow import flow, guided


def solver_step(model: DiT, cfg_strength: float, graphs: Graphs | None) -> Callable:
    """`step(y, cond, texts, t, dt) -> next y` for one generation (its graphs are dropped with it)."""
    is_guided = guided(cfg_strength)

    def embed(y, cond, text, null_text, t):
        return model.embed(y, cond, (text, null_text), t, is_guided)

    layers = LayerSteps(model.segments(), embed, model.finish, graphs)
    tables: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def step(y, cond, texts, t, dt):
        frames = y.shape[1]
        if frames not in tables:
            tables[frames] = model.rope(frames)
        pred = layers((y, cond, *texts, t), tables[frames], None)
        return y + dt * flow(pred, cfg_strength)

    return step
