"""Accel Policy: how a loader's model runs attention, and whether it compiles and uses CUDA graphs."""

from __future__ import annotations

from dataclasses import dataclass

from mizuoto.runtime.accel import policy_names

from .types import CATEGORY, POLICY


@dataclass(frozen=True)
class PolicyChoice:
    """What the Accel Policy node hands to loaders (an immutable value: ComfyUI fans outputs out)."""

    name: str = "auto"
    strict: bool = False
    compile: bool = False
    cuda_graphs: bool = True

    def overrides(self) -> dict:
        return {"compute.compile": self.compile, "compute.cuda_graphs": self.cuda_graphs}


class MizuotoAccelPolicy:
    DESCRIPTION = ("How models loaded with this policy compute attention: auto runs each engine's exact "
                   "upstream computation; host follows ComfyUI's own choice; fast takes the fastest backend "
                   "per call; or name one backend. Anything but auto changes results slightly, and every "
                   "run report lists what actually ran.")

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "policy": (list(policy_names()), {"default": "auto"}),
            "strict": ("BOOLEAN", {"default": False,
                                   "tooltip": "refuse to load when the named backend cannot run on the device"}),
            "compile": ("BOOLEAN", {"default": False,
                                    "tooltip": "torch.compile hot modules (slower first run; results change a bit)"}),
            "cuda_graphs": ("BOOLEAN", {"default": True,
                                        "tooltip": "replay decode steps as CUDA graphs (same results, faster)"}),
        }}

    RETURN_TYPES = (POLICY,)
    RETURN_NAMES = ("policy",)
    FUNCTION = "choose"
    CATEGORY = CATEGORY

    def choose(self, policy, strict, compile, cuda_graphs):
        from mizuoto.runtime.accel import policy_for

        policy_for(policy, strict)  # an unknown name fails here, with the list of known ones
        return (PolicyChoice(policy, bool(strict), bool(compile), bool(cuda_graphs)),)
