"""The attention dispatcher.

    from mizuoto.runtime import accel
    SITE = accel.Site("dummy.attn")
    out = accel.attention(q, k, v, site=SITE, mask=mask)

Importing this package does not import torch; the default reference imports it on first call.
"""

from .dispatch import attention
from .policies import AccelPolicy, policy_for
from .site import REGISTRY, Site, sdpa_reference

__all__ = ["AccelPolicy", "REGISTRY", "Site", "attention", "policy_for", "sdpa_reference"]
