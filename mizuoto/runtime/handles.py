"""ModelHandle: a loaded model's weights on their device, and the CUDA graphs that hang off them.

It lives in the runtime, below the engines, beside the graphs it owns: an engine's loaded state holds
one, the host hands its modules to ComfyUI's model management. A request running on a model is a
RequestContext (runtime/context.py): its seed and generators, its policy bound around each step, its
cancel flag; there is no other request object.
"""

from __future__ import annotations

import torch
from torch import nn


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
