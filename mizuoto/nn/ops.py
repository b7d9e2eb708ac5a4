"""ops.Linear: nn.Linear that follows its input to the input's device.

Weights that live elsewhere (a streamed model keeps them in pinned CPU memory) are copied to the
input's device for the call; weights already there are used as they are, so a resident model runs
exactly nn.Linear's arithmetic.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Linear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        if weight.device != x.device:
            weight = weight.to(x.device, non_blocking=True)
            bias = None if bias is None else bias.to(x.device, non_blocking=True)
        return F.linear(x, weight, bias)
