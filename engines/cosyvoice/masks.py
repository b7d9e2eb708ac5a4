"""The masks of CosyVoice's flow (upstream's cosyvoice/utils/mask.py and common.mask_to_bias).

True means "may attend" throughout. `chunk_mask` is wenet's add_optional_chunk_mask for inference (no dynamic
chunks): without a chunk size it is the padding mask itself, with one it is the static block-causal mask of
streaming (every frame sees its own chunk and all before it) and-ed with the padding mask. Upstream repairs a row
that sees nothing by letting it see everything, after a host read (`.item()`) asking whether one exists; here the
same repair is one `torch.where`, so no mask costs a device wait or breaks a compiled graph.
"""

from __future__ import annotations

import torch

BIAS = -1.0e10  # mask_to_bias: what a forbidden key adds to its score in the U-Net's attention


def valid_frames(lengths: torch.Tensor, frames: int | None = None) -> torch.Tensor:
    """(B,) lengths -> (B, frames) True on real frames (~make_pad_mask). `frames` None: the longest length,
    which costs a host read; callers that know it pass it."""
    if frames is None:
        frames = int(lengths.max())
    return torch.arange(frames, device=lengths.device)[None, :] < lengths[:, None]


def block_causal(frames: int, chunk: int, device=None) -> torch.Tensor:
    """(frames, frames): query i sees key j when j < (i // chunk + 1) * chunk (subsequent_chunk_mask, every left
    chunk)."""
    positions = torch.arange(frames, device=device)
    ends = (torch.div(positions, chunk, rounding_mode="trunc") + 1) * chunk
    return positions[None, :] < ends[:, None]


def chunk_mask(keys: torch.Tensor, chunk: int = 0) -> torch.Tensor:
    """keys (B, 1, T) bool -> (B, 1, T) when chunk is 0, else (B, T, T) with the block-causal chunks of `chunk`
    frames; a row that would see no key sees every key, as upstream forces it."""
    if chunk <= 0:
        masks = keys
    else:
        masks = keys & block_causal(keys.shape[-1], chunk, keys.device)[None]
    blind = masks.sum(dim=-1, keepdim=True) == 0
    return torch.where(blind, True, masks)


def to_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """mask_to_bias: True -> 0, False -> -1e10, computed as upstream does ((1 - m) * -1e10)."""
    return (1.0 - mask.to(dtype)) * BIAS
