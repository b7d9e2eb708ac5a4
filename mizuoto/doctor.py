"""`python -m mizuoto doctor`: what Mizuoto sees of this environment, as JSON."""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from typing import Any

from mizuoto.core.compute import cpu


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def report(settings_file=None) -> dict[str, Any]:
    import torch

    from mizuoto import __version__, engines
    from mizuoto.host import settings as host_settings
    from mizuoto.runtime import accel

    settings = host_settings.current(settings_file)
    for spec in engines.all_engines().values():
        spec.implementation_module()  # declares the engine's attention sites
    return {
        "mizuoto": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cpu": {"threads": torch.get_num_threads(), "capability": torch.backends.cpu.get_cpu_capability(),
                "applied": cpu.apply()},
        "cuda": {"available": torch.cuda.is_available(),
                 "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]},
        "packages": {name: _version(name) for name in ("safetensors", "numpy", "flash-attn", "xformers",
                                                        "sageattention")},
        "settings": {key: {"value": list(value) if isinstance(value, tuple) else value,
                           "from": settings.sources[key]} for key, value in settings.values.items()},
        "engines": {spec.id: {"name": spec.display_name, "weights_license": spec.weights_license}
                    for spec in engines.all_engines().values()},
        "attention_sites": sorted(accel.REGISTRY),
    }
