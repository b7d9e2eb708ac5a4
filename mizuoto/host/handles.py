"""Handles: a loaded model's weights (ModelHandle) and one request running on it (LocalHandle)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn

from mizuoto.runtime.context import RequestContext


class ModelHandle:
    """A model's modules and the device it runs on; CUDA graphs hang off it.

    `loaded` is true when every parameter and buffer is on the run device (a resident model). Graphs
    hold weight addresses, so they are only captured for a resident model (`graphable()`), kept for as
    long as the handle lives (across requests and ComfyUI queue runs), and dropped when the weights'
    addresses change (`signature()`), e.g. after ComfyUI offloaded and reloaded the model.
    """

    def __init__(self, modules: nn.Module, device: torch.device):
        self.modules = modules
        self.device = torch.device(device)
        self.graphs = None  # runtime.graphs.Graphs, created on first use
        self._signature = None

    @property
    def loaded(self) -> bool:
        tensors = list(self.modules.parameters()) + list(self.modules.buffers())
        return all(_same_device(t.device, self.device) for t in tensors)

    def graphable(self) -> bool:
        return self.loaded

    def graphs_for(self, option: bool):
        """The model's Graphs when CUDA graphs are usable for it now, else None (run eager)."""
        from mizuoto.runtime import graphs

        if not graphs.usable(self.device, option) or not self.graphable():
            return None
        current = graphs.signature([self.modules])
        if self.graphs is None or current != self._signature:
            self.graphs, self._signature = graphs.Graphs(self.device), current
        return self.graphs


def _same_device(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


class LocalHandle:
    """One request on one model in this process: binds the model's policy around every step and owns
    the request's generators (RequestContext)."""

    def __init__(self, model: ModelHandle, ctx: RequestContext):
        self.model = model
        self.ctx = ctx

    @contextmanager
    def step(self) -> Iterator[None]:
        with self.ctx.step():
            yield

    def generator(self, device=None) -> torch.Generator:
        return self.ctx.generator_for(device if device is not None else self.model.device)
