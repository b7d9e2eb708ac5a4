"""xFormers' `memory_efficient_attention`, called directly (PLATFORM.md §3).

Layout (B, M, H, K); GQA through the 5-D [B, M, G, H, K] form with K/V expanded over H (forward
only). Masks:
- a dense mask becomes a tensor bias: additive in q's dtype, rows starting on 8-element boundaries,
  expanded to (B, H, Mq, Mk). With a MaskInfo beside it the dense mask is still what is passed:
  xFormers has no per-row padding bias for this layout, and the dense mask is exactly what the
  MaskInfo describes.
- a causal MaskInfo alone (no dense mask, so no padding to describe) becomes
  `LowerTriangularFromBottomRightMask`, with `.make_local_attention(window)` for a window.
  xFormers' local mask keeps keys j in [i' - window + 1, i'] (its `materialize`:
  triu(diagonal = shift - window + 1); its flash op passes window_left = window - 1), i.e.
  j > i' - window: MaskInfo's definition.
- SDPA's top-left `is_causal` alone is `LowerTriangularMask()`.
"""

from __future__ import annotations

from ..call import Args, Call
from .base import Backend, version_tuple
from .layout import nhd, on_device, pad_head_dim, softmax_scale

# The xFormers release built for each torch (its C++ extension loads only against that torch);
# 0.0.34+ use torch's stable ABI, so one build serves torch 2.10 and later (0.0.35 needs >= 2.10).
_BUILT_FOR_TORCH = {
    (2, 9): "0.0.33.post1",
    (2, 8): "0.0.32.post2",
    (2, 7, 1): "0.0.31",
    (2, 7, 0): "0.0.30",
    (2, 6): "0.0.29.post3",
    (2, 5, 1): "0.0.28.post3",
}


def xformers_for_torch(torch_version: str) -> str | None:
    """The xFormers version to install beside `torch_version` ('2.7.1+cu128' -> '0.0.31'), None if unknown."""
    release = (version_tuple(torch_version) + (0, 0, 0))[:3]
    if release >= (2, 10, 0):
        return "0.0.35"
    return _BUILT_FOR_TORCH.get(release) or _BUILT_FOR_TORCH.get(release[:2])


def padded_bias(mask, causal: bool, q, n_k: int):
    """A dense mask as xFormers' tensor bias, expanded to (B, H, Mq, Mk).

    xFormers wants every stride but the last a multiple of 8 (fp16) or 4 (fp32): allocate rows of
    a multiple of 8, fill, and hand over the [..., :Mk] view. Broadcast dims stay broadcast (stride
    0), so a (B, 1, Mq, Mk) mask costs B x Mq x Mk8, not B x H x Mq x Mk8.
    """
    import torch

    batch, heads, n_q = q.shape[0], q.shape[1], q.shape[2]
    mask = mask[(None,) * (4 - mask.dim())]  # right-aligned, as SDPA broadcasts it
    rows = torch.zeros(mask.shape[0], mask.shape[1], n_q, n_k + (-n_k % 8), dtype=q.dtype, device=q.device)
    bias = rows[..., :n_k]
    if mask.dtype == torch.bool:
        bias.masked_fill_(~mask, float("-inf"))
    else:
        bias.copy_(mask.expand_as(bias))  # in q's dtype: kernels read the bias as q's dtype
    if causal:  # SDPA's top-left is_causal, folded in: xFormers takes one bias
        keep = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).tril()
        bias.masked_fill_(~keep, float("-inf"))
    return bias.expand(batch, heads, n_q, n_k)


class Xformers(Backend):
    name = "xformers"
    package = "xformers"
    dropout = True
    install = "pip install xformers=={xformers} --no-deps"  # doctor fills {xformers}: xformers_for_torch()

    # Set by load(); tests put fakes here.
    _memory_efficient_attention = None
    _attn_bias = None  # the xformers.ops.fmha.attn_bias module

    def version_problem(self, version: str | None) -> str | None:
        # facebookresearch/xformers#845: batch x heads above 65535 fails from 0.0.21 on (confirmed by
        # ComfyUI on 0.0.21-0.0.26, never fixed). Those are refused; later ones get the wide_grid check.
        if version is not None and (0, 0, 21) <= version_tuple(version) <= (0, 0, 26):
            return f"xformers {version} breaks above 65535 batch x heads (xformers#845)"
        return None

    def load(self) -> None:
        import xformers

        if not getattr(xformers, "_has_cpp_library", False):
            raise ImportError("xformers' C++/CUDA extension did not load (built for another torch?); "
                              "reinstall the build for this torch")
        import xformers.ops as xops

        self._memory_efficient_attention = xops.memory_efficient_attention
        self._attn_bias = xops.fmha.attn_bias

    def constraints(self, call: Call) -> str | None:
        if call.dtype not in ("float16", "bfloat16", "float32"):
            return f"dtype {call.dtype}"
        if call.wide_grid:
            return "batch x heads above 65535"  # still broken after 0.0.26 (xformers#845)
        if call.gqa and call.grad:
            return "GQA under autograd"  # the 5-D form has no backward
        if call.mask == "none" and call.mask_info is not None:
            _, causal, has_window = call.mask_info
            if has_window and not causal:
                return "window without causal"
            # Only xFormers' flash op (fp16/bf16, sm80+) has a backward for the local mask.
            if has_window and call.grad and (call.dtype == "float32" or (call.capability or (0, 0)) < (8, 0)):
                return "local window under autograd"
        return None

    def eligible(self, q, k, v, args: Args) -> str | None:
        if args.mask is not None and args.mask.requires_grad:
            return "mask requires grad"
        return None

    def run(self, q, k, v, args: Args):
        d, dv = q.shape[-1], v.shape[-1]
        scale = softmax_scale(args, d)
        bias = self._bias(q, k, args)
        # Kernels want head dims (and row strides) in multiples of 8 on fp16 tensor cores.
        q2, k2, v2 = (nhd(pad_head_dim(x)) for x in (q, k, v))
        groups, heads = k.shape[1], q.shape[1]
        if groups != heads:  # GQA: [B, M, G, H, K] with K/V expanded (stride 0) over the H per group
            per_group = heads // groups
            q2 = q2.unflatten(2, (groups, per_group))
            k2, v2 = (x.unsqueeze(3).expand(-1, -1, -1, per_group, -1) for x in (k2, v2))
            if args.mask is not None:  # a tensor bias: (B, H, Mq, Mk) -> (B, G, H/G, Mq, Mk)
                bias = bias.unflatten(1, (groups, per_group))
        with on_device(q.device):
            out = self._memory_efficient_attention(q2, k2, v2, attn_bias=bias, p=args.dropout_p, scale=scale)
        if out.dim() == 5:
            out = out.flatten(2, 3)
        return out[..., :dv].transpose(1, 2)

    def _bias(self, q, k, args: Args):
        if args.mask is not None:
            return padded_bias(args.mask, args.causal, q, k.shape[-2])
        info = args.mask_info
        if info is not None and info.causal:
            bias = self._attn_bias.LowerTriangularFromBottomRightMask()
            return bias if info.window is None else bias.make_local_attention(info.window)
        return self._attn_bias.LowerTriangularMask() if args.causal else None

