"""The `host` policy: ComfyUI's own attention choice, first in our chain.

ComfyUI picks one attention function at start from its launch flags (`--use-sage-attention`,
`--use-flash-attention`, xFormers when installed, PyTorch otherwise). The `host` policy puts the
matching backend first; the call still goes through our dispatcher with its probes and fallbacks.
Outside ComfyUI there is no host choice and `host` behaves like `fast`.
"""

from __future__ import annotations

import sys

# ComfyUI's attention functions (comfy/ldm/modules/attention.py) -> our backend.
HOST_FUNCTIONS = {
    "attention_sage": "sage",
    "attention3_sage": "sage3",
    "attention_flash": "flash",
    "attention_xformers": "xformers",
    # ComfyUI's "pytorch attention" runs SDPA cuDNN-first on CUDA (comfy/ops.py).
    "attention_pytorch": "sdpa_cudnn",
}


def backend() -> str | None:
    """The backend matching the host's attention choice, or None (no host, or no match)."""
    attention = sys.modules.get("comfy.ldm.modules.attention")  # read, never imported from here
    chosen = getattr(attention, "optimized_attention", None)
    return HOST_FUNCTIONS.get(getattr(chosen, "__name__", ""))
