"""Reading a .safetensors file into fresh, aligned CPU tensors, one tensor at a time.

`safetensors.torch.load_file` returns views into a memory map of the file. Their addresses are the
file offsets plus the header, so most are not aligned to a cache line, and on the CPU a matmul on an
unaligned weight can round differently (the kernels peel a different head off each row): weights that
upstream copies into its own parameters (`load_state_dict`) must be read into fresh allocations too, or
the last bits differ. Reading with `readinto` into `torch.empty` gives exactly that, with the process
holding the tensors once (no memory map counted in its RSS, no second copy), and the file's pages only
in the page cache.

The format: an 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}
(and "__metadata__"), then the raw little-endian bytes.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import torch

from mizuoto.core.errors import CheckpointError

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}
MAX_HEADER = 100 * 1024 * 1024  # the format's own limit


def read_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of the file, each in its own new CPU allocation, in the file's dtype."""
    path = Path(path)
    if sys.byteorder != "little":
        from safetensors.torch import load_file

        return {k: v.clone() for k, v in load_file(str(path)).items()}
    try:
        with open(path, "rb") as file:
            header, start = _header(file, path)
            tensors = {}
            for name, entry in header.items():
                if name == "__metadata__":
                    continue
                tensors[name] = _read_tensor(file, start, name, entry, path)
            return tensors
    except OSError as error:
        raise CheckpointError(f"cannot read {path} ({error.strerror or error}); check the file") from None


def _header(file, path: Path) -> tuple[dict, int]:
    raw = file.read(8)
    if len(raw) != 8:
        raise CheckpointError(f"{path} is too short to be a .safetensors file; download it again")
    (size,) = struct.unpack("<Q", raw)
    if size > MAX_HEADER:
        raise CheckpointError(f"{path} is not a .safetensors file (header of {size} bytes); download it again")
    try:
        header = json.loads(file.read(size))
    except ValueError:
        raise CheckpointError(f"{path} has a damaged header; download it again") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path} has a damaged header; download it again")
    return header, 8 + size


def _read_tensor(file, start: int, name: str, entry, path: Path) -> torch.Tensor:
    try:
        dtype = DTYPES[entry["dtype"]]
        shape = [int(n) for n in entry["shape"]]
        begin, end = (int(n) for n in entry["data_offsets"])
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"{path}: the entry of {name} is not a tensor description (dtype "
                              f"{entry.get('dtype') if isinstance(entry, dict) else entry!r}); download it again") \
            from None
    tensor = torch.empty(shape, dtype=dtype)
    nbytes = tensor.numel() * tensor.element_size()
    if end - begin != nbytes or begin < 0:
        raise CheckpointError(f"{path}: {name} should take {nbytes} bytes, the header gives {end - begin}; "
                              f"download it again")
    if nbytes:
        file.seek(start + begin)
        view = memoryview(tensor.view(-1).view(torch.uint8).numpy())
        if file.readinto(view) != nbytes:
            raise CheckpointError(f"{path} ends inside {name}; the download is incomplete, download it again")
    return tensor


def read_checkpoint(path: str | Path) -> dict[str, torch.Tensor]:
    """A state dict from a .safetensors file (`read_safetensors`) or a PyTorch pickle (.pt, .pth, .bin;
    weights only, unwrapped from a "state_dict" entry), on the CPU; a bad file is a one-line error."""
    path = Path(path)
    if path.suffix == ".safetensors":
        return read_safetensors(path)
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as error:  # any reader failure is a bad file, said in one line
        raise CheckpointError(f"{path} is not a readable checkpoint ({' '.join(str(error).split())[:160]}); "
                              f"download it again") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path} does not hold a state dict of tensors; download it again")
    return state
