"""ModelHandle (where the weights are, graphs kept per weight signature)."""

import torch
from torch import nn

from mizuoto.runtime import graphs
from mizuoto.runtime.handles import ModelHandle


def test_loaded_means_every_tensor_on_the_run_device():
    module = nn.Linear(2, 2)
    assert ModelHandle(module, "cpu").loaded and ModelHandle(module, "cpu").graphable()
    module.register_buffer("elsewhere", torch.zeros(1, device="meta"))
    assert not ModelHandle(module, "cpu").loaded


def test_graphs_only_where_usable_and_renewed_when_weights_move(monkeypatch):
    module = nn.Linear(2, 2)
    handle = ModelHandle(module, "cpu")
    assert handle.graphs_for(True) is None  # no CUDA here

    class FakeGraphs:
        def __init__(self, device):
            self.device = device

    monkeypatch.setattr(graphs, "usable", lambda device, option: option)
    monkeypatch.setattr(graphs, "Graphs", FakeGraphs)
    first = handle.graphs_for(True)
    assert isinstance(first, FakeGraphs) and handle.graphs_for(True) is first  # kept across requests
    assert handle.graphs_for(False) is None
    with torch.no_grad():
        module.weight = nn.Parameter(module.weight.clone())  # new address: graphs would read stale memory
    assert handle.graphs_for(True) is not first
