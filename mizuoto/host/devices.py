"""Device and dtype names as users type them, checked with one-line errors."""

from __future__ import annotations

from mizuoto.core.errors import InputError

DTYPES = ("float32", "bfloat16", "float16")
DEVICES = ("auto", "cpu", "cuda", "mps")


def resolve_device(name: str):
    import torch

    name = (name or "auto").strip().lower()
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise InputError(f"unknown device '{name}'; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError("CUDA is not available in this torch build or on this machine; use device cpu")
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise InputError(f"there is no {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
        return torch.device("cuda", index)
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise InputError("MPS is not available on this machine; use device cpu")
    if device.type not in ("cpu", "cuda", "mps"):
        raise InputError(f"device type '{device.type}' is not supported; use cpu, cuda or mps")
    return device


def resolve_dtype(name: str):
    import torch

    if name not in DTYPES:
        raise InputError(f"unknown dtype '{name}'; use one of {', '.join(DTYPES)}")
    return getattr(torch, name)
