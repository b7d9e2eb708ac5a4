"""Host start-up: the process-wide settings, applied once when a host (the CLI, ComfyUI) starts.

CPU placement must precede `import torch`; compute.fast switches are process-wide torch flags, so they
are set here once, before any model loads, and every output lists them (params.fast). Library code
never touches either.
"""

from __future__ import annotations

import logging
import sys

from mizuoto.core.compute import cpu

log = logging.getLogger("mizuoto")
_started = False


def start(settings_file=None) -> tuple[str, ...]:
    """Apply CPU placement and the compute.fast switches; returns the switches now in force."""
    global _started
    if "torch" not in sys.modules:
        # Only a host that starts the process places CPU threads and the allocator. Inside ComfyUI,
        # torch is imported before custom nodes load, and the process is ComfyUI's to tune.
        cpu.apply()
    from mizuoto.host import settings as host_settings
    from mizuoto.runtime.accel import features

    if not _started:
        _started = True
        switches = host_settings.current(settings_file)["compute.fast"]
        if switches:
            done = features.apply(switches)
            log.info("Mizuoto: compute.fast switches on: %s (they change results)", ", ".join(done))
    return features.applied()
