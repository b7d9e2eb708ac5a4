"""`python -m mizuoto.runtime.accel`: probe every attention backend on the CPU and each GPU; JSON."""

import json

from .report import probe_devices

print(json.dumps(probe_devices(), indent=2))
