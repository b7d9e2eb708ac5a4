"""The seeded weights of the GPT-SoVITS SoVITS reference set (gpt_sovits_sovits), defined once: the writer (in the
upstream venv) fills upstream's SynthesizerTrn with them and writes its weights file; the test rebuilds the
same file from the names and shapes the set records, so the multi-megabyte files are never stored. Pure torch,
no upstream import.
"""

from __future__ import annotations

import io
import math

import torch

VERSION_TAGS = {"v2Pro": b"05", "v2ProPlus": b"06"}  # process_ckpt.my_save2's tags (plain v2 files keep "PK")


def sovits_fill(name: str, shape: tuple, seed: int) -> torch.Tensor:
    """One entry of a SoVITS state dict: nothing left at upstream's init (the coupling layers' zeroed `post`
    included). Magnitudes, norm scales in [0.5, 1.5); biases and norm shifts small; relative-position tables
    at upstream's scale; PReLU slopes in [0, 0.3); every other weight at 1/sqrt(fan-in)."""
    g = torch.Generator().manual_seed(seed)
    if name.endswith(("weight_g", "gamma")) or ("norm" in name and name.endswith("weight")):
        return torch.rand(shape, generator=g) + 0.5
    if name.endswith(("bias", "beta")):
        return torch.randn(shape, generator=g) * 0.1
    if name.endswith(("emb_rel_k", "emb_rel_v")):
        return torch.randn(shape, generator=g) * shape[-1] ** -0.5
    if name.endswith("prelu.weight"):
        return torch.rand(shape, generator=g) * 0.3
    if name.endswith("_codebook.embed"):
        return torch.randn(shape, generator=g)
    if len(shape) <= 1:
        return torch.rand(shape, generator=g)
    return torch.randn(shape, generator=g) / math.sqrt(math.prod(shape[1:]))


def sovits_state(entries: list, seed: int) -> dict:
    """The state for [(name, shape)] in that order, entry i drawn from seed + i."""
    return {name: sovits_fill(name, tuple(shape), seed + i) for i, (name, shape) in enumerate(entries)}


def sovits_file_bytes(state: dict, config, version: str) -> bytes:
    """A weights file as upstream's savee writes it: weights in float16 (enc_q left out), the config, the info
    string, and for v2Pro/ProPlus the version tag over the zip magic."""
    weights = {k: v.half() for k, v in state.items() if "enc_q" not in k}
    buffer = io.BytesIO()
    torch.save({"weight": weights, "config": config, "info": "mizuoto parity: tiny random SoVITS"}, buffer)
    data = buffer.getvalue()
    tag = VERSION_TAGS.get(version)
    return tag + data[2:] if tag else data


def speaker_fill(name: str, shape: tuple, seed: int) -> torch.Tensor:
    """One entry of an ERes2NetV2 state dict: batch-norm scales and running variances in [0.5, 1.5), shifts and
    running means small, convolutions and linears at 1/sqrt(fan-in); the step counter stays 0."""
    g = torch.Generator().manual_seed(seed)
    if name.endswith("num_batches_tracked"):
        return torch.zeros(shape, dtype=torch.long)
    if name.endswith(("running_var",)) or (len(shape) == 1 and name.endswith("weight")):
        return torch.rand(shape, generator=g) + 0.5
    if name.endswith(("bias", "running_mean")):
        return torch.randn(shape, generator=g) * 0.1
    return torch.randn(shape, generator=g) / math.sqrt(math.prod(shape[1:]))


def speaker_state(entries: list, seed: int) -> dict:
    """The ERes2NetV2 state for [(name, shape)] in that order, entry i drawn from seed + i."""
    return {name: speaker_fill(name, tuple(shape), seed + i) for i, (name, shape) in enumerate(entries)}
