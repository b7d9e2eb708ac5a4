"""Optional attention kernels: flash-attn 2, xFormers, SageAttention 2 (or 1.x) and SageAttention 3.

Nothing is imported here: each backend imports its package in `load()`, which the probe calls the
first time a policy wants the backend on a device.
"""

from __future__ import annotations

from . import register
from .flash_attn import FlashAttn
from .sage import Sage, Sage3
from .xformers import Xformers

for _backend in (FlashAttn(), Xformers(), Sage(), Sage3()):
    register(_backend)
