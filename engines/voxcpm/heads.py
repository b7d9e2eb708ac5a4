"""VoxCPM's two small heads on the LM's hidden state, exact to voxcpm 2.0.3.

- The FSQ bottleneck (`fsq_layer`, upstream's `ScalarQuantizationLayer`): project down to the latent
  width, squash with tanh, snap to the grid of `scale` steps per unit (round(h·scale)/scale, round half
  to even, a true division), project back up. At inference it quantizes the LM's hidden states at
  audio positions in the prefill and after every generated patch.
- The stop predictor (`stop_proj`, SiLU, `stop_head` without bias): two logits per position; upstream
  stops when their argmax is 1 (ties go to 0, "continue").

Parameter names are the checkpoint's: `fsq_layer.in_proj.*`, `fsq_layer.out_proj.*` when the quantizer is
held as the model's `fsq_layer`; the stop layers are top-level keys (`stop_proj.weight`, `stop_proj.bias`,
`stop_head.weight`), so the model holds the two Linear layers from `stop_layers` as its own `stop_proj` and
`stop_head` and calls `stop_logits` with them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ScalarQuantizer(nn.Module):
    """upstream's `ScalarQuantizationLayer` in eval mode: (..., in_dim) -> (..., out_dim)."""

    def __init__(self, in_dim: int, out_dim: int, latent_dim: int = 64, scale: int = 9, device=None, dtype=None):
        super().__init__()
        self.scale = scale  # an int in every config: h·9 and /9 with a Python int, as upstream
        self.in_proj = nn.Linear(in_dim, latent_dim, device=device, dtype=dtype)
        self.out_proj = nn.Linear(latent_dim, out_dim, device=device, dtype=dtype)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        latent = torch.tanh(self.in_proj(hidden))
        return self.out_proj(torch.round(latent * self.scale) / self.scale)


def stop_layers(hidden_size: int, device=None, dtype=None) -> tuple[nn.Linear, nn.Linear]:
    """(stop_proj, stop_head) for the model to hold under those names."""
    return (nn.Linear(hidden_size, hidden_size, device=device, dtype=dtype),
            nn.Linear(hidden_size, 2, bias=False, device=device, dtype=dtype))


def stop_logits(stop_proj: nn.Linear, stop_head: nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    """(..., hidden) -> (..., 2): [continue, stop]."""
    return stop_head(F.silu(stop_proj(hidden)))


def stop_flags(stop_proj: nn.Linear, stop_head: nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
    """(..., hidden) -> (...) bool: whether upstream's argmax says stop. Upstream reads batch row 0 only
    (`.argmax(dim=-1)[0]`) and stops only after its `min_len` (`i > min_len`); both are the caller's."""
    return stop_logits(stop_proj, stop_head, hidden).argmax(dim=-1) == 1
