"""SageAttention 2 (and 1.x) and SageAttention 3 (Blackwell FP4), called directly (PLATFORM.md §4).

Both quantise Q/K (INT8 or FP4), so they are inexact (`exact = False`), forward only, and take no
mask. Both layouts are HND, the dispatcher's own. Hazards handled here:
- SageAttention 1.x (`smooth_k=True`, its default) and 3 (always) subtract K's mean from K *in
  place*: they get a copy of K, never the caller's tensor (a KV cache would be corrupted).
- SageAttention 2 calls torch.cuda.set_device(v.device) on every call: `on_device` restores the
  caller's current device afterwards.
"""

from __future__ import annotations

from importlib import metadata

from ..call import Args, Call
from .base import Backend, version_tuple
from .layout import HALF, capability, on_device

INSTALL = "pip install --no-build-isolation --no-deps "


def unit_stride(x):
    return x if x.stride(-1) == 1 else x.contiguous()  # both assert a contiguous last dim


def _major_version(package: str) -> int:
    # Unknown (no metadata) counts as 1.x: its guards (a copy of K, fixed head dims) are always safe.
    try:
        return (version_tuple(metadata.version(package)) or (1,))[0]
    except metadata.PackageNotFoundError:
        return 1


def _unmasked(call: Call) -> str | None:
    """Shared refusals: Sage takes no mask, and its causal is only documented for Lq == Lk (where
    top-left and bottom-right agree); the CUDA kernels silently compute top-left otherwise."""
    if call.mask != "none":
        return "dense mask"
    if call.mask_info is not None:
        return "mask_info"
    if call.causal and not call.equal_lengths:
        return "causal with unequal lengths"
    return None


class _ArchitectureBound(Backend):
    """SageAttention kernels exist for a fixed list of GPU architectures, not a minimum capability."""

    architectures: tuple[tuple[int, int], ...] = ()

    def device_problem(self, device) -> str | None:
        major, minor = capability(device)
        if (major, minor) not in self.architectures:
            return f"compute capability {major}.{minor} unsupported"
        return None


class Sage(_ArchitectureBound):
    name = "sage"
    package = "sageattention"
    exact = False
    backward = False
    tolerance = 2e-2
    install = INSTALL + "git+https://github.com/thu-ml/SageAttention"
    # sageattn() dispatches on the GPU architecture and raises for any other (sm75, sm87, sm100, ...).
    architectures = ((8, 0), (8, 6), (8, 9), (9, 0), (12, 0), (12, 1))

    _sageattn = None  # set by load(); tests put fakes here
    major = 2  # SageAttention's major version, read by load()

    def load(self) -> None:
        from sageattention import sageattn

        self._sageattn = sageattn
        self.major = _major_version(self.package)

    def constraints(self, call: Call) -> str | None:
        if call.dtype not in HALF:
            return f"dtype {call.dtype}"
        if call.value_dim != call.head_dim:
            return "value dim differs"
        # 2.x pads head dims up to 64 or 128 and raises above; 1.x asserts one of 64, 96, 128.
        if call.head_dim > 128 or (self.major < 2 and call.head_dim not in (64, 96, 128)):
            return f"head dim {call.head_dim}"
        return _unmasked(call)

    def run(self, q, k, v, args: Args):
        if args.mask is not None or args.mask_info is not None:
            raise ValueError("sage takes no mask")
        q, k, v = (unit_stride(x) for x in (q, k, v))
        if self.major < 2:
            k = k.clone()  # 1.x's smooth_k does k -= k.mean(seq) in place
        with on_device(q.device):
            return self._sageattn(q, k, v, tensor_layout="HND", is_causal=args.causal, sm_scale=args.scale)


class Sage3(_ArchitectureBound):
    name = "sage3"
    package = "sageattn3"
    exact = False
    backward = False
    tolerance = 1e-1  # FP4 microscaling; a broken build is off by O(1)
    install = INSTALL + "'git+https://github.com/thu-ml/SageAttention#subdirectory=sageattention3_blackwell'"
    architectures = ((12, 0), (12, 1))  # its kernels check for sm120/121 at run time (B200 fails)

    _sageattn3_blackwell = None  # set by load(); tests put fakes here

    def load(self) -> None:
        from sageattn3 import sageattn3_blackwell

        self._sageattn3_blackwell = sageattn3_blackwell

    def constraints(self, call: Call) -> str | None:
        if call.dtype not in HALF:
            return f"dtype {call.dtype}"
        if call.value_dim != call.head_dim:
            return "value dim differs"
        if call.head_dim not in (64, 128):
            return f"head dim {call.head_dim}"
        if call.gqa:
            return "GQA"
        if call.custom_scale:
            return "custom scale"  # it always uses 1/sqrt(D)
        return _unmasked(call)  # it would silently ignore attn_mask

    def run(self, q, k, v, args: Args):
        if args.mask is not None or args.mask_info is not None:
            raise ValueError("sage3 takes no mask")
        if args.scale is not None:
            raise ValueError("sage3 takes no custom scale")
        with on_device(q.device):
            # k.clone(): its preprocessing does k -= k.mean(seq) in place.
            return self._sageattn3_blackwell(q, k.clone(), v, is_causal=args.causal)
