"""What a bound attention policy adds to one decode step of the shared Qwen decoder, measured in one run.

    python benchmarks/decoder_step_overhead.py [--layers 28] [--steps 64] [--repeats 6]

A tiny QwenDecoder (mizuoto/nn/qwen.py; hidden 64, 4 query and 2 key heads of 16, random weights) decodes
one token a step against a growing cache, on one CPU thread, each step twice in lockstep: with no policy
bound (auto: every layer runs the site's reference, torch's SDPA, which gives cpu_flash's bits for these
calls) and under cpu_flash (the dispatcher finds the backend and counts). The figure is the
median of the per-step differences: what the runtime costs a decoder step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from mizuoto.nn.qwen import QwenConfig, QwenDecoder
from mizuoto.runtime import accel
from mizuoto.runtime.context import RequestContext


def paired_steps(decoder: QwenDecoder, ctx: RequestContext, steps: int) -> list[tuple[float, float]]:
    """(auto, bound) seconds of each decode step after a 4-token prefill: two caches decoded in lockstep,
    each step timed once with no policy bound and once under `ctx`, so machine noise hits both alike."""
    hidden = decoder.config.hidden_size
    x = torch.randn(1, 4, hidden, generator=torch.Generator().manual_seed(0))
    caches = [decoder.new_cache(1, 4 + steps) for _ in range(2)]
    for cache in caches:
        decoder(x, torch.arange(4)[None], cache, decoder.mask_for(None, 4, 4))
    token, out = x[:, -1:], []
    for i in range(steps):
        position, mask = torch.tensor([[4 + i]]), decoder.mask_for(None, 1, 5 + i)
        start = time.perf_counter()
        decoder(token, position, caches[0], mask)
        middle = time.perf_counter()
        with ctx.step():
            decoder(token, position, caches[1], mask)
        out.append((middle - start, time.perf_counter() - middle))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--policy", default="cpu_flash", help="the bound policy (math runs the kernel SDPA picks "
                                                             "here, so the difference is the runtime alone)")
    opts = parser.parse_args()
    torch.set_num_threads(1)
    config = QwenConfig(hidden_size=64, intermediate_size=128, num_layers=opts.layers, num_heads=4, num_kv_heads=2,
                        head_dim=16, vocab_size=None)
    decoder = QwenDecoder(config).eval()
    policy = accel.policy_for(opts.policy)
    pairs = []
    with torch.inference_mode():
        paired_steps(decoder, RequestContext(0, accel=policy.start()), 8)  # probes and selections, once
        for _ in range(opts.repeats):
            pairs += paired_steps(decoder, RequestContext(0, accel=policy.start()), opts.steps)
    a = statistics.median(p[0] for p in pairs) * 1e6
    b = statistics.median(p[1] for p in pairs) * 1e6
    diff = statistics.median(p[1] - p[0] for p in pairs) * 1e6
    print(json.dumps({"torch": torch.__version__, "threads": 1, "layers": opts.layers, "steps": len(pairs),
                      "policy": opts.policy, "auto_step_us": round(a, 1), "bound_step_us": round(b, 1),
                      "overhead_per_step_us": round(diff, 1),
                      "overhead_per_layer_us": round(diff / opts.layers, 2)}, indent=2))


if __name__ == "__main__":
    main()
