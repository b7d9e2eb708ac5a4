"""Site: one named attention call site and the exact computation upstream does there."""

from __future__ import annotations

import sys
from typing import Callable

# Every declared site by name. `mizuoto doctor` lists them, and count mode checks that each site of
# a small engine went through the dispatcher.
REGISTRY: dict[str, "Site"] = {}


def sdpa_reference(q, k, v, mask, causal, scale, enable_gqa, dropout_p):
    """torch's SDPA with exactly the caller's arguments: the reference of most sites."""
    import torch.nn.functional as F

    if enable_gqa:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                              is_causal=causal, scale=scale, enable_gqa=True)
    # enable_gqa is left out when unused so that torch versions before 2.5 accept the call.
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                          is_causal=causal, scale=scale)


Reference = Callable[..., "object"]


class Site:
    """An attention call site, declared once at module level.

    `reference(q, k, v, mask, causal, scale, enable_gqa, dropout_p)` is what upstream computes at
    this site; `auto` runs it, and every other backend is measured against it. `swappable=False`
    pins the site to its reference under any policy; `approx_ok=False` refuses approximate
    backends (every autoregressive site).
    """

    __slots__ = ("name", "reference", "swappable", "approx_ok", "declared_in", "reference_label")

    def __init__(self, name: str, reference: Reference = sdpa_reference, swappable: bool = True,
                 approx_ok: bool = True):
        if not name or not isinstance(name, str):
            raise ValueError("an attention site needs a non-empty name such as 'engine.block'")
        self.name = name
        self.reference = reference
        self.swappable = swappable
        self.approx_ok = approx_ok
        self.declared_in = sys._getframe(1).f_globals.get("__name__", "?")
        # How run reports name the reference when it runs: "sdpa" when it is torch's SDPA.
        self.reference_label = "sdpa" if reference is sdpa_reference else "reference"
        previous = REGISTRY.get(name)
        # Re-running the same module (a reload) redeclares its sites; two modules sharing a name
        # would merge their statistics and hide one of them.
        if previous is not None and previous.declared_in != self.declared_in:
            raise ValueError(f"attention site '{name}' is declared both in {previous.declared_in} "
                             f"and in {self.declared_in}; give each call site its own name")
        REGISTRY[name] = self

    def __repr__(self) -> str:
        return f"Site({self.name!r})"
