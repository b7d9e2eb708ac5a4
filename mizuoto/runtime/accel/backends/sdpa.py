"""torch's own attention kernels, each called through its aten operator.

`F.scaled_dot_product_attention` picks a kernel from process-wide flags; calling the kernel's aten
operator directly runs exactly that kernel with no global state. Each backend first asks torch's own
eligibility check (`can_use_*_attention`) where torch has one, then keeps its own table for what the
check does not cover (PLATFORM.md §1.4).
"""

from __future__ import annotations

from ..call import Args, Call
from . import register
from .base import Backend
from .layout import HALF, additive, capability, expand_kv, pad_head_dim, softmax_scale


def torch_check(can_use, q, k, v, args: Args, what: str) -> str | None:
    """torch's eligibility check for a kernel that gets GQA heads expanded: asked with as many query
    heads as key heads (a view), since the kernel itself will see equal head counts."""
    q_view = q if k.shape[1] == q.shape[1] else q[:, : k.shape[1]]
    params = sdpa_params(q_view, k, v, None, args.dropout_p, args.causal, False)
    return None if can_use(params) else f"torch's {what} check refused it"


class _Kernels:
    """aten's kernels by name, each as its torch.<name> binding where torch has one: the same operator,
    called without torch.ops' Python-side overload resolution, which costs a CPU decode call 3.5 us of
    its 11. Looked up once per name, then an ordinary attribute."""

    def __getattr__(self, name: str):
        import torch

        kernel = getattr(torch, name, None) or getattr(torch.ops.aten, name)
        setattr(self, name, kernel)
        return kernel


_KERNELS = _Kernels()


def _aten() -> _Kernels:
    return _KERNELS


def sdpa_params(q, k, v, mask, dropout_p: float, causal: bool, gqa: bool):
    """torch's SDPAParams: 7 arguments since 2.5, 6 before (no enable_gqa)."""
    import torch

    try:
        return torch.backends.cuda.SDPAParams(q, k, v, mask, dropout_p, causal, gqa)
    except TypeError:
        return torch.backends.cuda.SDPAParams(q, k, v, mask, dropout_p, causal)


class Math(Backend):
    """SDPA's math kernel: plain matmul-softmax-matmul, on any device, with autograd and dropout."""

    name = "math"
    devices = ("cpu", "cuda", "mps", "xpu")
    dropout = True

    def run(self, q, k, v, args: Args):
        return _aten()._scaled_dot_product_attention_math(
            q, k, v, additive(args.mask, q.dtype), args.dropout_p, args.causal, None,
            scale=args.scale, enable_gqa=args.enable_gqa)[0]


class CpuFlash(Backend):
    """The CPU flash kernel (what SDPA itself picks on the CPU when it is eligible)."""

    name = "cpu_flash"
    devices = ("cpu",)
    dtypes = ("float32", "float64", "bfloat16", "float16")

    def constraints(self, call: Call) -> str | None:
        if call.dropout:
            return "dropout"
        if call.dtype not in self.dtypes:
            return f"dtype {call.dtype}"
        if call.mask != "none" and call.causal:
            return "mask with causal"  # the kernel would AND them; SDPA refuses the pair
        return None

    def eligible(self, q, k, v, args: Args) -> str | None:
        mask = args.mask
        if q.dim() != 4:
            return f"{q.dim()}-D inputs"
        if mask is not None:
            # 2-D (L|1, S|1) or 4-D (B|1, H|1, L|1, S|1) masks only; a 3-D one makes SDPA use math.
            if mask.dim() not in (2, 4):
                return f"{mask.dim()}-D mask"
            if mask.requires_grad:
                return "mask requires grad"
        return None

    def run(self, q, k, v, args: Args):
        return _aten()._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, args.causal, attn_mask=additive(args.mask, q.dtype), scale=args.scale)[0]


class _CudaSdpa(Backend):
    """Shared checks of torch's CUDA kernels."""

    min_capability = (8, 0)

    def device_problem(self, device) -> str | None:
        major, minor = capability(device)
        if (major, minor) < self.min_capability:
            return f"needs compute capability {self.min_capability[0]}.{self.min_capability[1]}+, has {major}.{minor}"
        return None

    def _capability_problem(self, call: Call) -> str | None:
        if call.capability is not None and call.capability < self.min_capability:
            return f"compute capability {call.capability[0]}.{call.capability[1]}"
        return None


class SdpaFlash(_CudaSdpa):
    """torch's FlashAttention-2 kernel (`_scaled_dot_product_flash_attention`)."""

    name = "sdpa_flash"
    dropout = True

    def constraints(self, call: Call) -> str | None:
        if call.dtype not in HALF:
            return f"dtype {call.dtype}"
        if call.mask != "none":
            return "dense mask"
        if call.causal and not call.equal_lengths:
            # The kernel's causal is bottom-right; SDPA's is_causal is top-left. They agree only when
            # there are as many queries as keys (torch's own check refuses the rest too).
            return "causal with unequal lengths"
        if call.head_dim != call.value_dim:
            return "value dim differs"
        if call.head_dim > 256:
            return f"head dim {call.head_dim}"
        return self._capability_problem(call)

    def eligible(self, q, k, v, args: Args) -> str | None:
        import torch

        params = sdpa_params(q, k, v, None, args.dropout_p, args.causal, args.enable_gqa)
        return None if torch.backends.cuda.can_use_flash_attention(params) else "torch's flash check refused it"

    def run(self, q, k, v, args: Args):
        d = q.shape[-1]
        out = _aten()._scaled_dot_product_flash_attention(
            pad_head_dim(q), pad_head_dim(k), pad_head_dim(v), args.dropout_p, args.causal, False,
            scale=softmax_scale(args, d))[0]
        return out[..., :d]


class SdpaEfficient(_CudaSdpa):
    """torch's memory-efficient (cutlass) kernel; takes masks, top-left causal, fp32."""

    name = "sdpa_efficient"
    dropout = True
    min_capability = (5, 0)

    def constraints(self, call: Call) -> str | None:
        if call.dtype not in HALF + ("float32",):
            return f"dtype {call.dtype}"
        if call.wide_grid:
            return "batch x heads above 65535"
        if call.mask != "none" and call.causal:
            return "mask with causal"
        return self._capability_problem(call)

    def eligible(self, q, k, v, args: Args) -> str | None:
        import torch

        return torch_check(torch.backends.cuda.can_use_efficient_attention, q, k, v, args, "efficient")

    def run(self, q, k, v, args: Args):
        import torch

        d = q.shape[-1]
        k, v = expand_kv(q, k, v)
        bias = additive(args.mask, q.dtype)
        n_q, n_k = q.shape[-2], k.shape[-2]
        if bias is not None:
            # The kernel wants a 4-D bias whose rows start at 16-element boundaries: allocate padded,
            # copy in, and hand over the [:n_k] view.
            full = torch.empty(q.shape[0], q.shape[1], n_q, n_k + (-n_k % 16), dtype=q.dtype, device=q.device)
            bias = full[..., :n_k].copy_(bias.expand(q.shape[0], q.shape[1], n_q, n_k))
        out = _aten()._scaled_dot_product_efficient_attention(
            pad_head_dim(q), pad_head_dim(k), pad_head_dim(v), bias, torch.is_grad_enabled(),
            args.dropout_p, args.causal, scale=softmax_scale(args, d))[0]
        return out[..., :d]


class SdpaCudnn(_CudaSdpa):
    """cuDNN's fused attention (`_scaled_dot_product_cudnn_attention`)."""

    name = "sdpa_cudnn"

    def constraints(self, call: Call) -> str | None:
        if call.dtype not in HALF:
            return f"dtype {call.dtype}"
        if call.head_dim != call.value_dim or call.head_dim > 128:
            return f"head dim {call.head_dim}"
        if call.wide_grid:
            return "batch x heads above 65535"
        if call.mask != "none" and call.causal:
            return "mask with causal"
        if call.mask != "none" and call.grad:
            # NaN gradients for masked calls on Hopper (pytorch#196678, torch 2.11+).
            return "mask under autograd"
        return self._capability_problem(call)

    def eligible(self, q, k, v, args: Args) -> str | None:
        import torch

        if k.shape[-2] == 1:
            return "a single key"
        if not hasattr(torch.backends.cuda, "can_use_cudnn_attention"):
            return "torch has no cuDNN attention check"
        return torch_check(torch.backends.cuda.can_use_cudnn_attention, q, k, v, args, "cuDNN")

    def run(self, q, k, v, args: Args):
        import torch

        d = q.shape[-1]
        k, v = expand_kv(q, k, v)
        bias = additive(args.mask, q.dtype)  # in q's dtype: an fp32 bias with half q is misread
        if bias is not None:
            bias = bias.expand(q.shape[0], q.shape[1], q.shape[-2], k.shape[-2])
        out = _aten()._scaled_dot_product_cudnn_attention(
            pad_head_dim(q), pad_head_dim(k), pad_head_dim(v), bias, torch.is_grad_enabled(),
            0.0, args.causal, False, scale=softmax_scale(args, d))[0]
        return out[..., :d]


for _backend in (Math(), CpuFlash(), SdpaFlash(), SdpaEfficient(), SdpaCudnn()):
    register(_backend)
