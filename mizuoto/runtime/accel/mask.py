"""MaskInfo: a mask's structure, for kernels that take structure instead of a dense tensor.

A site that builds its mask from key lengths, padding, bottom-right causality or a window passes
`mask_info=MaskInfo(...)` beside the dense mask. The reference ignores it; fused kernels (flash-attn's
`cache_seqlens`/`cache_leftpad`/`window_size`, xFormers' bottom-right biases) use it. With
`dispatch.DEBUG` on, every call checks that the MaskInfo describes its dense mask exactly.

Conventions (the acceleration page's): `keys` (batch, k_len) is True for real keys; `padding` is
"right" or "left" when every row's real keys are one contiguous run at that end; `causal` is
bottom-right: query i sees key j when j <= i + n_k - n_q; `window` keeps j > i + n_k - n_q - window.
"""

from __future__ import annotations

from dataclasses import dataclass

PADDINGS = ("right", "left")


@dataclass(frozen=True, eq=False)
class MaskInfo:
    keys: object  # torch.Tensor (batch, k_len) bool
    causal: bool = False
    window: int | None = None
    padding: str | None = None

    def __post_init__(self):
        if self.padding is not None and self.padding not in PADDINGS:
            raise ValueError(f"MaskInfo padding must be 'right', 'left' or None, got {self.padding!r}")
        if self.window is not None and self.window < 1:
            raise ValueError(f"MaskInfo window must be at least 1, got {self.window}")

    def structure(self) -> tuple:
        """What backend selection depends on (hashable, no tensor data)."""
        return (self.padding, self.causal, self.window is not None)

    # -- construction ------------------------------------------------------------------------------

    @classmethod
    def from_lengths(cls, lengths, k_len: int, padding: str = "right", causal: bool = False,
                     window: int | None = None) -> "MaskInfo":
        """Keys from per-row lengths: the first (right padding) or last (left padding) `lengths[b]`."""
        import torch

        lengths = torch.as_tensor(lengths)
        positions = torch.arange(k_len, device=lengths.device)
        if padding == "right":
            keys = positions[None, :] < lengths[:, None]
        elif padding == "left":
            keys = positions[None, :] >= (k_len - lengths)[:, None]
        else:
            raise ValueError(f"padding must be 'right' or 'left', got {padding!r}")
        return cls(keys, causal=causal, window=window, padding=padding)

    @classmethod
    def full(cls, batch: int, k_len: int, device=None, causal: bool = False,
             window: int | None = None) -> "MaskInfo":
        """Every key real (no padding): pure bottom-right causality and/or a window.

        Declared as left padding of zero keys: kernels align causality and windows with the last key
        for left padding, which is exactly right when nothing is padded."""
        import torch

        return cls(torch.ones(batch, k_len, dtype=torch.bool, device=device), causal=causal,
                   window=window, padding="left")

    # -- what kernels read -------------------------------------------------------------------------

    def seqlens(self):
        """Real keys per row, int32 (batch,): flash-attn's cache_seqlens for right padding."""
        import torch

        return self.keys.sum(dim=1, dtype=torch.int32)

    def leftpad(self):
        """Padding keys before the real ones, int32 (batch,): flash-attn's cache_leftpad."""
        import torch

        return (self.keys.shape[1] - self.keys.sum(dim=1)).to(torch.int32)

    def dense(self, n_q: int):
        """The boolean mask this structure stands for: (batch, 1, n_q, k_len), True = attend."""
        import torch

        batch, n_k = self.keys.shape
        allowed = self.keys[:, None, None, :].expand(batch, 1, n_q, n_k)
        if self.causal or self.window is not None:
            i = torch.arange(n_q, device=self.keys.device)[:, None] + (n_k - n_q)
            j = torch.arange(n_k, device=self.keys.device)[None, :]
            band = torch.ones(n_q, n_k, dtype=torch.bool, device=self.keys.device)
            if self.causal:
                band &= j <= i
            if self.window is not None:
                band &= j > i - self.window
            allowed = allowed & band
        return allowed


def attended(mask, causal: bool, n_q: int, n_k: int, device):
    """The boolean (.., n_q, n_k) pattern a call's dense arguments attend to (True = attend)."""
    import torch

    pattern = None
    if mask is not None:
        # Additive masks hide a key with -inf or a very negative finite value (finfo.min).
        pattern = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    if causal:  # SDPA's is_causal: top-left
        tril = torch.ones(n_q, n_k, dtype=torch.bool, device=device).tril()
        pattern = tril if pattern is None else pattern & tril
    if pattern is None:
        pattern = torch.ones(1, 1, n_q, n_k, dtype=torch.bool, device=device)
    return pattern


def check(info: MaskInfo, mask, causal: bool, q, k) -> None:
    """Raise if `info` does not describe exactly what the dense arguments attend to (DEBUG mode)."""
    import torch

    n_q, n_k = q.shape[-2], k.shape[-2]
    if info.keys.shape != (q.shape[0], n_k):
        raise AssertionError(f"mask_info keys have shape {tuple(info.keys.shape)}, "
                             f"expected (batch, k_len) = {(q.shape[0], n_k)}")
    if info.padding is not None:
        lengths = info.keys.sum(dim=1)
        expected = MaskInfo.from_lengths(lengths, n_k, info.padding).keys
        if not torch.equal(expected, info.keys):
            raise AssertionError(f"mask_info says {info.padding} padding but its keys are not one "
                                 f"contiguous run at that end")
    want = info.dense(n_q)
    got = attended(mask, causal, n_q, n_k, q.device)
    shape = torch.broadcast_shapes(want.shape, got.shape)
    if not torch.equal(want.expand(shape), got.expand(shape)):
        raise AssertionError("mask_info does not describe the dense mask of this call "
                             f"(structure {info.structure()}, mask {None if mask is None else tuple(mask.shape)}, "
                             f"causal={causal})")
