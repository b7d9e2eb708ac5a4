"""What the GPT and SoVITS weights readers share: filling a module from a state dict that must hold every one of
its entries at its shape (extra entries, such as SoVITS' training-only posterior encoder, are ignored)."""

from __future__ import annotations

import torch
from torch import nn

from mizuoto.core.errors import CheckpointError


def mismatch(expected: dict, state: dict) -> str | None:
    """None when `state` has every key of `expected` at its shape, else what is wrong (the first few keys)."""
    missing = sorted(set(expected) - set(state))
    wrong = sorted(k for k in expected if k in state and state[k].shape != expected[k].shape)
    if missing:
        return f"missing {missing[:3]}"
    return f"shapes differ for {wrong[:3]}" if wrong else None


def load_exactly(model: nn.Module, state: dict[str, torch.Tensor], what: str, hint: str) -> nn.Module:
    """`model` with `state` loaded; a mismatch raises CheckpointError("<what> (<the problem>); <hint>")."""
    expected = model.state_dict()
    problem = mismatch(expected, state)
    if problem:
        raise CheckpointError(f"{what} ({problem}); {hint}")
    model.load_state_dict({k: state[k] for k in expected})
    return model
