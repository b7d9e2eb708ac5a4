"""mizuoto.nn's linear layer (upstream's arithmetic with frozen weights) and its .safetensors reader."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mizuoto.core.errors import CheckpointError
from mizuoto.nn.ops import Linear
from mizuoto.nn.tensor_files import read_safetensors


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape,view", [
    ((2, 5, 32), lambda x: x[:, 3:, :]),  # a slice of positions: not foldable as a view
    ((3, 4, 6, 32), lambda x: x[:, :, 1:, :]),
    ((2, 7, 32), lambda x: x.transpose(0, 1)),
    ((2, 5, 32), lambda x: x),  # contiguous: F.linear's own fused path on both sides
])
def test_frozen_linear_computes_what_an_upstream_module_computes(shape, view, bias):
    """An upstream module's parameters require gradients, which makes matmul fold a non-contiguous input
    into one matrix; Mizuoto's frozen Linear takes the same route and gives the same bits."""
    torch.manual_seed(0)
    upstream = nn.Linear(32, 16, bias=bias)  # requires_grad, as upstream's modules are at inference
    ours = Linear(32, 16, bias=bias).requires_grad_(False)
    ours.load_state_dict(upstream.state_dict())
    x = view(torch.randn(*shape))
    with torch.inference_mode():
        want, got = upstream(x), ours(x)
    assert got.shape == want.shape and torch.equal(got, want)


def test_read_safetensors_gives_fresh_aligned_tensors(tmp_path):
    from safetensors.torch import load_file, save_file

    tensors = {"a": torch.randn(3, 5), "b": torch.arange(7, dtype=torch.int64), "c": torch.randn(2, 3).bfloat16(),
               "d": torch.tensor([True, False, True]), "e": torch.zeros(0, 4), "f": torch.tensor(2.5)}
    save_file(tensors, str(tmp_path / "w.safetensors"), metadata={"format": "pt"})
    read = read_safetensors(tmp_path / "w.safetensors")
    mapped = load_file(str(tmp_path / "w.safetensors"))
    assert read.keys() == tensors.keys()
    for name, tensor in tensors.items():
        assert read[name].dtype == tensor.dtype and torch.equal(read[name], tensor)
        assert torch.equal(mapped[name], tensor)
        assert read[name].numel() == 0 or read[name].data_ptr() % 64 == 0


def test_read_safetensors_refuses_damaged_files(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "w.safetensors"
    save_file({"a": torch.randn(64, 64)}, str(path))
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    with pytest.raises(CheckpointError, match="ends inside a; the download is incomplete"):
        read_safetensors(path)
    path.write_bytes(b"\x05")
    with pytest.raises(CheckpointError, match="too short to be a .safetensors file"):
        read_safetensors(path)
    path.write_bytes((10).to_bytes(8, "little") + b"not json!!")
    with pytest.raises(CheckpointError, match="damaged header"):
        read_safetensors(path)
    with pytest.raises(CheckpointError, match="cannot read"):
        read_safetensors(tmp_path / "missing.safetensors")
