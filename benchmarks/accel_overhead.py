"""Per-call cost of accel.attention() over calling the computation directly, measured in one run.

    python benchmarks/accel_overhead.py [--calls 2000] [--repeats 151]

auto (no policy bound) should cost about one microsecond over the site's reference: one context
variable read and a call. A bound policy (here cpu_flash) adds one lookup keyed on the call's shapes,
dtype, device and flags (policies.call_key; the Call is built and the backend selected only on a miss)
and one counter, measured against calling that backend's kernel directly: at most 2 us.
Tiny tensors keep the kernels cheap so the difference is the dispatcher; each figure is the median
of --repeats timed batches, with the two sides interleaved so machine noise hits both; `*_min_us` is
the least disturbed batch of each side, steadier on a busy machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from mizuoto.runtime import accel
from mizuoto.runtime.accel.backends import REGISTRY
from mizuoto.runtime.accel.call import Args
from mizuoto.runtime.context import RequestContext

SITE = accel.Site("benchmarks.overhead")


def per_call(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def compare(direct, dispatched, calls: int, repeats: int) -> dict:
    direct_us, dispatched_us = [], []
    for _ in range(repeats):
        direct_us.append(per_call(direct, calls))
        dispatched_us.append(per_call(dispatched, calls))
    d, x = statistics.median(direct_us), statistics.median(dispatched_us)
    return {"direct_us": round(d, 3), "dispatched_us": round(x, 3), "overhead_us": round(x - d, 3),
            "overhead_min_us": round(min(dispatched_us) - min(direct_us), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # many short batches rather than a few long ones: on a shared machine the median of 151 steadies where
    # that of 15 swung by a microsecond between runs
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=151)
    opts = parser.parse_args()
    torch.set_num_threads(1)
    q, k, v = (torch.randn(1, 1, 1, 8) for _ in range(3))
    reference = SITE.reference

    with torch.inference_mode():
        auto = compare(lambda: reference(q, k, v, None, False, None, False, 0.0),
                       lambda: accel.attention(q, k, v, site=SITE), opts.calls, opts.repeats)
        kernel = REGISTRY["cpu_flash"]
        args = Args(None, False, None, False, 0.0, None)
        ctx = RequestContext(0, accel=accel.policy_for("cpu_flash").start())
        with ctx.step():
            bound = compare(lambda: kernel.run(q, k, v, args), lambda: accel.attention(q, k, v, site=SITE),
                            opts.calls, opts.repeats)
    print(json.dumps({"torch": torch.__version__, "threads": 1, "auto_vs_reference": auto,
                      "cpu_flash_policy_vs_kernel": bound}, indent=2))


if __name__ == "__main__":
    main()
