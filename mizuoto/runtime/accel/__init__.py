"""The attention dispatcher.

    from mizuoto.runtime import accel
    SITE = accel.Site("dummy.attn")
    out = accel.attention(q, k, v, site=SITE, mask=mask)

Importing this package does not import torch or any optional kernel package.
"""

from .backends import REGISTRY as BACKENDS
from .call import Args, Call
from .dispatch import attention
from .mask import MaskInfo
from .policies import AccelPolicy, AccelRun, policy_for, policy_names
from .site import REGISTRY, Site, sdpa_reference

__all__ = ["BACKENDS", "REGISTRY", "AccelPolicy", "AccelRun", "Args", "Call", "MaskInfo", "Site", "attention",
           "policy_for", "policy_names", "sdpa_reference"]
