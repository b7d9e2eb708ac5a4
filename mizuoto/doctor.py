"""`python -m mizuoto doctor`: what Mizuoto sees of this environment, as JSON."""

from __future__ import annotations

import platform
import sys
from typing import Any

from mizuoto.core.compute import cpu
from mizuoto.runtime.accel.probes import package_version


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
        "packages": {name: package_version(name) for name in ("safetensors", "numpy", "soundfile", "soxr")},
        "audio_files": audio_files(),
        "settings": {key: {"value": list(value) if isinstance(value, tuple) else value,
                           "from": settings.sources[key]} for key, value in settings.values.items()},
        "engines": {spec.id: {"name": spec.display_name, "weights_license": spec.weights_license}
                    for spec in engines.all_engines().values()},
        "attention_sites": sorted(accel.REGISTRY),
        "acceleration": acceleration(settings, torch.__version__),
    }


def audio_files() -> dict[str, Any]:
    """What this machine's libsndfile reads and writes (an MP3 reader and writer need libsndfile 1.1+)."""
    from mizuoto.audio import files

    return files.library_report()


def acceleration(settings, torch_version: str) -> dict[str, Any]:
    """The acceleration check: the settings that matter, each optional kernel package (version from
    metadata, not imported), whether each backend runs on each device (probed in a child process,
    so a kernel that crashes cannot take the doctor down), and install commands that keep torch."""
    from mizuoto.runtime.accel import features, report

    relevant = {key: value for key, value in settings.values.items()
                if key.startswith("compute.") or key.endswith(".attention")}
    return {
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in relevant.items()},
        "fast_applied": list(features.applied()),
        "packages": report.packages(),
        "devices": report.probe_in_subprocess(),
        "install": report.install_commands(torch_version),
    }
