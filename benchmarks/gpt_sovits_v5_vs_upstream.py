"""GPT-SoVITS v5's mel generator on the CPU: Mizuoto's cfm_v5.synthesize vs upstream's synthesize_v5_mel (the
cuda_graph_accel_v5 branch's module/v5_inference.py and static-cache DiT at ac846f5, staged over an RVC-Boss/GPT-SoVITS
checkout as scripts/parity/gpt_sovits_v5_references.py stages them) on the same weights, inputs and seed, in one
process under the parity pins at `--threads` threads; the mels are compared first.

    GPT_SOVITS_V5_FILES=DIR VENV/bin/python benchmarks/gpt_sovits_v5_vs_upstream.py --checkout PATH
        [--size tiny|full] [--threads 1] [--repeats 2] [--reference 300] [--target 400] [--versions v5turbo v5dev]
        [--dev-steps 4] [--json OUT]
(VENV: scripts/parity/gpt_sovits_upstream_env.sh with resampy; DIR: the branch's files, as for the writer.)

Both requests of a fragment: v5turbo (4 steps, no guidance: one DiT forward per step) and v5dev at `--dev-steps`
(default 4 here, 32 upstream's default; guidance 1.3: two forwards per step). `tiny`: the gpt_sovits_v5 set's DiT
(dim 64, depth 2); `full`: the released one (DiT(dim=1024, depth=22, heads=16, ff_mult=2, text_dim=512,
conv_layers=4) without a step embedding) with seeded random weights. Reported: each side's best wall time after a
warm-up (the sides alternating), the ratio, and whether the mels are equal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts" / "parity"))
sys.path.insert(0, str(REPO))
from pinned import pin_process  # noqa: E402

pin_process()

import gpt_sovits_v5_references as writer  # noqa: E402
import torch  # noqa: E402
from gpt_sovits_cfm_weights import cfm_state  # noqa: E402

FULL = {"dim": 1024, "depth": 22, "heads": 16, "dim_head": 64, "ff_mult": 2, "text_dim": 512, "conv_layers": 4,
        "mel_dim": 100, "use_step_embedding": False}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, required=True)
    parser.add_argument("--size", choices=("tiny", "full"), default="tiny")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--reference", type=int, default=300, help="reference frames (100 per second)")
    parser.add_argument("--target", type=int, default=400, help="target frames of the fragment")
    parser.add_argument("--dev-steps", type=int, default=4, choices=(4, 8, 16, 32))
    parser.add_argument("--versions", nargs="+", default=["v5turbo", "v5dev"], choices=("v5turbo", "v5dev"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from mizuoto.engines.gpt_sovits import cfm, cfm_v5

    config = writer.CONFIG if args.size == "tiny" else FULL
    with tempfile.TemporaryDirectory() as tmp:
        root = writer.staged(args.checkout.resolve(), writer.files_folder(), Path(tmp))
        cfm_class, dit_class, synthesize = writer.upstream(root)
        theirs = cfm_class(100, dit_class(**config)).eval()
        entries = [(k, list(v.shape)) for k, v in theirs.named_parameters()]
        state = cfm_state(entries, writer.SEED)
        with torch.no_grad():
            for name, value in state.items():
                theirs.get_parameter(name).copy_(value)
        ours = cfm_v5.CFMV5(cfm.CFMConfig(**{k: v for k, v in config.items() if k != "use_step_embedding"},
                                          step_embedding=False)).eval()
        ours.load_state_dict({**state, "estimator.rotary_embed.inv_freq": theirs.estimator.rotary_embed.inv_freq})
        g = torch.Generator().manual_seed(5)
        text_dim = config["text_dim"]
        mel = torch.randn(1, 100, args.reference, generator=g) * 0.5
        reference = torch.randn(1, text_dim, args.reference, generator=g)
        target = torch.randn(1, text_dim, args.target, generator=g)
        report = {"size": args.size, "threads": args.threads, "reference": args.reference, "target": args.target,
                  "torch": torch.__version__, "requests": {}}
        requests = {"v5turbo": (4, 0.0), "v5dev": (args.dev_steps, 1.3)}
        for version in args.versions:
            steps, rate = requests[version]
            def upstream(version=version, steps=steps, rate=rate):
                torch.manual_seed(9)
                return synthesize(SimpleNamespace(version=version, cfm=theirs), reference, target, mel, steps, rate)

            def mine(steps=steps, rate=rate):
                with torch.inference_mode():
                    generator = torch.Generator().manual_seed(9)
                    return cfm_v5.synthesize(ours, reference, target, mel, steps, rate, generator)

            results, times = [upstream(), mine()], [[], []]
            for _ in range(args.repeats):
                for side, fn in enumerate((upstream, mine)):
                    start = time.perf_counter()
                    results[side] = fn()
                    times[side].append(time.perf_counter() - start)
            entry = {"steps": steps, "cfg_rate": rate, "upstream_s": min(times[0]), "mizuoto_s": min(times[1]),
                     "speedup": min(times[0]) / min(times[1]), "equal": bool(torch.equal(results[0], results[1])),
                     "max_abs_diff": float((results[0] - results[1]).abs().max())}
            report["requests"][version] = entry
            print(f"{version}: upstream {entry['upstream_s']:.3f} s, mizuoto {entry['mizuoto_s']:.3f} s "
                  f"({entry['speedup']:.2f}x), equal {entry['equal']}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if all(r["equal"] for r in report["requests"].values()) else 1


if __name__ == "__main__":
    os.environ.setdefault("GSVV5_CFM_STATIC_CACHE", "1")  # upstream's default: the static cache on
    sys.exit(main())
