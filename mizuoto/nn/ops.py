"""ops.Linear: nn.Linear that follows its input to the input's device.

Weights that live elsewhere (a streamed model keeps them in pinned CPU memory) are copied to the
input's device for the call; weights already there are used as they are, so a resident model runs
exactly nn.Linear's arithmetic.

Exactly the arithmetic of an upstream module, that is, whose parameters require gradients (upstreams
never turn that off for inference): on an input of 3 or more dimensions that is not contiguous (a slice
of positions, say), F.linear goes through matmul, and matmul folds the input into one matrix (a copy,
then mm, then the bias added) when a parameter requires gradients, but multiplies batch by batch (bmm)
when none does, as in Mizuoto's frozen models: the two round differently on the CPU. `Linear` takes
the folded route itself.
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
        # Under autocast nn.Linear is autocast's F.linear: the weight and bias cast first, one fused addmm (and a
        # contiguous copy of x where x is cast too). The folded route below (an mm in autocast's dtype, then the
        # float32 bias added into it) would round differently, so it is taken only outside autocast.
        if x.dim() >= 3 and not x.is_contiguous() and not torch.is_autocast_enabled(x.device.type):
            out = torch.mm(x.reshape(-1, x.shape[-1]), weight.t()).view(*x.shape[:-1], weight.shape[0])
            return out if bias is None else out.add_(bias)
        return F.linear(x, weight, bias)
