"""What the doctor shows about attention: packages, probes per GPU, install commands."""

from __future__ import annotations

import json
import subprocess
import sys

from .backends import REGISTRY
from .probes import package_version


def packages() -> dict[str, str | None]:
    """Each optional kernel package's installed version, read from metadata (never imported)."""
    return {b.package: package_version(b.package) for b in REGISTRY.values() if b.package}


def install_commands(torch_version: str) -> dict[str, str]:
    """Commands that add each optional kernel without replacing the installed torch."""
    commands = {}
    for backend in REGISTRY.values():
        if backend.install:
            command = backend.install
            if "{xformers}" in command:
                from .backends import xformers

                version = xformers.xformers_for_torch(torch_version)
                if version is None:
                    continue
                command = command.format(xformers=version)
            commands[backend.name] = command
    return commands


def probe_devices() -> list[dict]:
    """Probe every backend on the CPU and on each GPU (run in this process)."""
    import torch

    from .probes import probe

    devices = ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    out = []
    for device in devices:
        name = "cpu" if device == "cpu" else torch.cuda.get_device_name(device)
        backends = {}
        for backend in REGISTRY.values():
            found = probe(backend, device)
            if device == "cpu" and "cpu" not in backend.devices:
                continue
            backends[backend.name] = found.report()
        out.append({"device": device, "name": name, "backends": backends})
    return out


def probe_in_subprocess(timeout: float = 300.0) -> list[dict] | dict:
    """`python -m mizuoto.runtime.accel` in a child: a kernel that crashes the process crashes it there."""
    import os

    import mizuoto
    from mizuoto.core.compute import cpu

    env = cpu.child_env()
    # In a ComfyUI clone the library is loaded by path, not installed: the child must find the same copy.
    # (The child runs only this probe, so the pack's other folders on its path reach nothing else.)
    library_parent = os.path.dirname(os.path.dirname(os.path.abspath(mizuoto.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (library_parent, env.get("PYTHONPATH")) if p)
    try:
        done = subprocess.run([sys.executable, "-m", "mizuoto.runtime.accel"], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"probing took longer than {timeout:.0f} s"}
    if done.returncode != 0:
        return {"error": f"the probe process exited with status {done.returncode}: {done.stderr.strip()[-500:]}"}
    return json.loads(done.stdout)
