"""Reading the two voice-clone encoders' tensors (`speaker_encoder.*`, the codec's `encoder.*`) and
making them a module's parameters, the way transformers' from_pretrained leaves them.

Each tensor is taken from the memory-mapped safetensors file and, when it is already in the requested
dtype on the CPU, assigned as the parameter itself (a view of the file); otherwise the cast or move
copies it, as it does upstream. Where a weight sits matters: CPU conv and matrix kernels round some
small products differently for data that is not 64-byte aligned (seen on one- or two-frame inputs of
the codec encoder, ~1e-7), and upstream's weights sit at the file's offsets. The module is built on
the meta device, so nothing is drawn from the global random generator.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from mizuoto.core.errors import CheckpointError


def read_prefixed(paths, prefix: str, device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """The tensors named `prefix...` in the safetensors files `paths`, without the prefix; floating
    tensors in `dtype`, all on `device`."""
    from safetensors import SafetensorError, safe_open

    state: dict[str, torch.Tensor] = {}
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise CheckpointError(f"{path} does not exist; the encoder's weights are missing")
        try:
            with safe_open(str(path), framework="pt", device="cpu") as file:
                for key in file.keys():
                    if key.startswith(prefix):
                        tensor = file.get_tensor(key)
                        state[key[len(prefix):]] = tensor.to(
                            device=device, dtype=dtype if tensor.is_floating_point() else None)
        except (SafetensorError, OSError, RuntimeError) as exc:
            raise CheckpointError(f"{path} is not a readable safetensors file "
                                  f"({' '.join(str(exc).split())[:120]})") from None
    return state


def assign(model: nn.Module, state: dict[str, torch.Tensor], prefix: str, where) -> nn.Module:
    """`state` (names without `prefix`) as the parameters and buffers of `model` (built on the meta
    device); a missing, surplus or wrongly shaped tensor is a one-line CheckpointError."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    wrong = [f"{k} {tuple(state[k].shape)} vs {tuple(v.shape)}" for k, v in expected.items()
             if k in state and state[k].shape != v.shape]
    if missing or unexpected or wrong:
        first = (f"missing {prefix}{missing[0]}" if missing else f"unexpected {prefix}{unexpected[0]}" if unexpected
                 else f"{prefix}{wrong[0]} expected")
        raise CheckpointError(f"{where} does not fit its config ({first}; {len(missing)} missing, "
                              f"{len(unexpected)} unexpected, {len(wrong)} wrongly shaped tensors)")
    model.load_state_dict(state, assign=True)
    return model.eval().requires_grad_(False)
