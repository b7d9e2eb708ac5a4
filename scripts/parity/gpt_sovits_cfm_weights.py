"""The seeded weights of the GPT-SoVITS CFM reference set (gpt_sovits_cfm), defined once: the writer (in the upstream
venv) fills upstream's DiT with them, the test fills ours from the names and shapes the set records. Pure torch, no
upstream import.
"""

from __future__ import annotations

import math

import torch


def cfm_fill(name: str, shape: tuple, seed: int) -> torch.Tensor:
    """One parameter of the DiT: nothing left at upstream's init (initialize_weights-style zeros of the AdaLN
    modulations and proj_out, GRN's zero gamma and beta, LayerNorm's ones). LayerNorm scales in [0.5, 1.5), GRN
    gains about 0.5, biases small, every other weight at 1/sqrt(fan-in)."""
    g = torch.Generator().manual_seed(seed)
    if name.endswith("norm.weight"):
        return torch.rand(shape, generator=g) + 0.5
    if name.endswith("grn.gamma"):
        return torch.randn(shape, generator=g) * 0.5
    if name.endswith(("bias", "grn.beta")):
        return torch.randn(shape, generator=g) * 0.1
    return torch.randn(shape, generator=g) / math.sqrt(math.prod(shape[1:]))


def cfm_state(entries: list, seed: int) -> dict:
    """The parameters for [(name, shape)] in that order, entry i drawn from seed + i."""
    return {name: cfm_fill(name, tuple(shape), seed + i) for i, (name, shape) in enumerate(entries)}
