"""Probes: can a backend run on a device? Asked the first time a policy wants it there.

A probe checks, in order: the device type; the package's version read from its metadata (no import);
the import itself; the device (compute capability); and a self-test, a 1 x 2 x 64 x D fp16
attention compared with fp32 math, which must be finite and within the backend's tolerance. The
self-test is what catches a wheel built for another torch or another GPU. Results are cached per
process and device.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from importlib import metadata

from .backends import REGISTRY, Backend
from .call import Args


@dataclass(frozen=True)
class Probe:
    backend: str
    device: str
    ok: bool
    reason: str | None = None  # why it cannot run, when not ok
    version: str | None = None
    error: float | None = None  # self-test max |error|

    def report(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None and k not in ("backend", "device")}


_cache: dict[tuple[str, str], Probe] = {}
_lock = threading.Lock()


def package_version(package: str | None) -> str | None:
    """The installed version from metadata, without importing the package."""
    if package is None:
        return None
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def probe(backend: Backend | str, device) -> Probe:
    """Whether `backend` runs on `device` (cached per process and device)."""
    import torch

    backend = REGISTRY[backend] if isinstance(backend, str) else backend
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    key = (backend.name, str(device))
    found = _cache.get(key)
    if found is None:
        with _lock:
            found = _cache.get(key)
            if found is None:
                found = _cache[key] = _run_probe(backend, device)
    return found


def forget() -> None:
    """Drop cached probes (tests, and after installing a package into a running host)."""
    with _lock:
        _cache.clear()


def _run_probe(backend: Backend, device) -> Probe:
    def no(reason: str, version: str | None = None) -> Probe:
        return Probe(backend.name, str(device), False, reason, version)

    if device.type not in backend.devices:
        return no(f"runs on {' or '.join(backend.devices)} only")
    version = package_version(backend.package)
    if backend.package is not None:
        if version is None:
            return no(f"{backend.package} is not installed")
        problem = backend.version_problem(version)
        if problem:
            return no(problem, version)
    try:
        backend.load()
    except (ImportError, OSError, RuntimeError) as exc:
        return no(f"cannot import: {' '.join(str(exc).split())[:200]}", version)
    if device.type == "cuda":
        import torch

        if not torch.cuda.is_available():
            return no("CUDA is not available", version)
    problem = backend.device_problem(device)
    if problem:
        return no(problem, version)
    try:
        error = self_test(backend, device)
    except Exception as exc:  # any failure here means the kernel cannot be trusted on this device
        return no(f"self-test raised {type(exc).__name__}: {' '.join(str(exc).split())[:200]}", version)
    if not error == error or error > backend.tolerance:  # NaN compares unequal to itself
        return no(f"self-test error {error:.2e} above {backend.tolerance:.0e}", version)
    return Probe(backend.name, str(device), True, None, version, error)


def self_test(backend: Backend, device) -> float:
    """Max |error| of a 1 x 2 x 64 x D attention (fp16 on GPUs, fp32 on the CPU) against fp32 math."""
    import torch

    d = backend.self_test_head_dim
    dtype = torch.float16 if device.type != "cpu" else torch.float32
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 64, d, generator=generator).to(device, dtype) for _ in range(3))
    with torch.no_grad():
        out = backend.run(q, k, v, Args(None, False, None, False, 0.0, None))
        reference = torch.ops.aten._scaled_dot_product_attention_math(q.float(), k.float(), v.float())[0]
    if out.shape != reference.shape:
        raise RuntimeError(f"output shape {tuple(out.shape)} instead of {tuple(reference.shape)}")
    difference = (out.float() - reference).abs()
    return float("nan") if not bool(torch.isfinite(out).all()) else float(difference.max())
