"""`python -m mizuoto doctor`: what Mizuoto sees of this environment, as JSON. `mizuoto.doctor_text` words
the same report for a person (the ComfyUI dialog, `doctor --text`, the Doctor node)."""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

from mizuoto.core.compute import cpu
from mizuoto.runtime.accel.probes import package_version


def report(settings_file=None) -> dict[str, Any]:
    import torch

    from mizuoto import __version__, engines
    from mizuoto.core import settings as core_settings
    from mizuoto.host import settings as host_settings
    from mizuoto.runtime import accel

    settings = host_settings.current(settings_file)
    for spec in engines.all_engines().values():
        spec.implementation_module()  # declares the engine's attention sites
    file = settings_file if settings_file is not None else core_settings.default_settings_file(os.environ)
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
        "settings_file": None if file is None else str(file),
        "settings": {key: {"value": list(value) if isinstance(value, tuple) else value,
                           "from": settings.sources[key]} for key, value in settings.values.items()},
        "engines": {spec.id: {"name": spec.display_name, "weights_license": spec.weights_license,
                              "builtin_weights": spec.builtin_weights, "models": models(spec)}
                    for spec in engines.all_engines().values()},
        "attention_sites": sorted(accel.REGISTRY),
        "acceleration": acceleration(settings, torch.__version__),
    }


def models(spec) -> dict[str, Any]:
    """Where this engine's models go, which are installed, which the loader can download
    (mizuoto.host.catalog); a failure is reported, never raised, so the rest of the report still shows."""
    from mizuoto.host import catalog

    try:
        return catalog.engine_report(spec)
    except Exception as exc:  # noqa: BLE001 - the doctor reports what it cannot read
        return {"error": f"{type(exc).__name__}: {exc}"}


def audio_files() -> dict[str, Any]:
    """What this machine's libsndfile reads and writes (an MP3 reader and writer need libsndfile 1.1+)."""
    from mizuoto.audio import files

    return files.library_report()


def acceleration(settings, torch_version: str) -> dict[str, Any]:
    """The acceleration check: the settings that matter, each optional kernel package (version from
    metadata, not imported), whether each backend runs on each device (probed in a child process,
    so a kernel that crashes cannot take the doctor down), and install commands that keep torch."""
    from mizuoto.runtime.accel import features, report
    from mizuoto.runtime.accel.backends import REGISTRY

    relevant = {key: value for key, value in settings.values.items()
                if key.startswith("compute.") or key.endswith(".attention")}
    packages = report.packages()
    install = report.install_commands(torch_version)
    return {
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in relevant.items()},
        "fast_applied": list(features.applied()),
        "packages": packages,
        "devices": report.probe_in_subprocess(),
        "install": install,
        # each optional kernel once: its backend, package, installed version and install command
        "kernels": [{"backend": b.name, "package": b.package, "version": packages.get(b.package),
                     "devices": list(b.devices), "install": install.get(b.name)}
                    for b in REGISTRY.values() if b.package],
    }
