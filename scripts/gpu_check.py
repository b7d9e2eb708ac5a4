"""Every attention backend on every device here, in one go: probes, exactness, fallback chains.

    python scripts/gpu_check.py [--json OUT.json]

For each device (the CPU and each GPU) it prints the probe of every backend, then, for each backend
and each kind of call (plain, masks, causal, GQA, decode steps with padding, windows), runs the call
through the dispatcher under that backend's policy in float32 and bfloat16 and compares it with fp32
math. A row says which backend actually ran (a fallback shows as `x→y`) and the max |error|. It exits
non-zero when a backend that ran exceeds its tolerance, or a fallback chain misbehaves. On each GPU it
also checks that the dummy engine gives the same samples with CUDA graphs on, off, and with a capture
that fails, then runs scripts/graphs_check.py (both allocators, steps per second). On a machine
without CUDA it checks the CPU backends only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
from pathlib import Path

import torch

from mizuoto.runtime import accel
from mizuoto.runtime.accel import probes
from mizuoto.runtime.accel.backends import REGISTRY
from mizuoto.runtime.accel.mask import MaskInfo
from mizuoto.runtime.context import RequestContext

SITE = accel.Site("scripts.gpu_check")
EXACT_SITE = accel.Site("scripts.gpu_check.exact", approx_ok=False)
TOLERANCE = {"float32": 2e-5, "bfloat16": 3e-2, "float16": 5e-3}
APPROXIMATE_TOLERANCE = 8e-2


def cases(device):
    """(name, q, k, v, kwargs) for the kinds of call the engines make."""
    g = torch.Generator().manual_seed(0)

    def t(*shape):
        return torch.randn(*shape, generator=g).to(device)

    b, h, d = 2, 8, 64
    out = [
        ("plain 128x128 d64", t(b, h, 128, d), t(b, h, 128, d), t(b, h, 128, d), {}),
        ("head dim 80", t(b, h, 64, 80), t(b, h, 64, 80), t(b, h, 64, 80), {}),
        ("head dim 128", t(b, h, 64, 128), t(b, h, 64, 128), t(b, h, 64, 128), {}),
        ("causal 256", t(b, h, 256, d), t(b, h, 256, d), t(b, h, 256, d), {"causal": True}),
        ("gqa 8q/2kv", t(b, h, 64, d), t(b, 2, 64, d), t(b, 2, 64, d), {"enable_gqa": True}),
    ]
    keys = torch.rand(b, 1, 1, 96, generator=g).to(device) > 0.2
    out.append(("bool mask", t(b, h, 32, d), t(b, h, 96, d), t(b, h, 96, d), {"mask": keys}))
    lengths = torch.tensor([70, 96], device=device)
    for padding in ("right", "left"):
        info = MaskInfo.from_lengths(lengths, 96, padding, causal=True)
        out.append((f"decode step, {padding} padding", t(b, h, 1, d), t(b, 2, 96, d), t(b, 2, 96, d),
                    {"mask": info.dense(1), "mask_info": info, "enable_gqa": True}))
        out.append((f"3-token chunk, {padding} padding", t(b, h, 3, d), t(b, 2, 96, d), t(b, 2, 96, d),
                    {"mask": info.dense(3), "mask_info": info, "enable_gqa": True}))
    window = MaskInfo.full(b, 96, device=device, causal=True, window=32)
    out.append(("window 32", t(b, h, 4, d), t(b, h, 96, d), t(b, h, 96, d),
                {"mask": window.dense(4), "mask_info": window}))
    return out


def math_reference(q, k, v, kwargs):
    mask = kwargs.get("mask")
    if mask is not None and mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, device=mask.device).masked_fill(~mask, float("-inf"))
    return torch.ops.aten._scaled_dot_product_attention_math(
        q.float(), k.float(), v.float(), mask, 0.0, kwargs.get("causal", False), None,
        enable_gqa=kwargs.get("enable_gqa", False))[0]


def run_case(backend_name, site, q, k, v, kwargs):
    run = accel.policy_for(backend_name).start()
    with torch.no_grad(), RequestContext(0, accel=run).step():
        out = accel.attention(q, k, v, site=site, **kwargs)
    report = run.report()
    (ran,) = report["used"]
    fallbacks = {pair: ", ".join(reasons) for pair, reasons in report["fallbacks"].items()}
    return out, ran, fallbacks


def check_device(device, rows, failures):
    for name in REGISTRY:
        found = probes.probe(name, device)
        status = f"ok (self-test {found.error:.1e})" if found.ok else f"no: {found.reason}"
        rows.append({"device": str(device), "backend": name, "case": "probe", "result": status})
    dtypes = ["float32"] if device.type == "cpu" else ["float32", "bfloat16"]
    for backend in REGISTRY.values():
        if device.type not in backend.devices or not probes.probe(backend, device).ok:
            continue
        for case, q, k, v, kwargs in cases(device):
            for dtype in dtypes:
                cast = [x.to(getattr(torch, dtype)) for x in (q, k, v)]
                kw = dict(kwargs)
                if kw.get("mask") is not None and kw["mask"].dtype != torch.bool:
                    kw["mask"] = kw["mask"].to(getattr(torch, dtype))
                site = SITE if not backend.exact else EXACT_SITE
                try:
                    out, ran, fallbacks = run_case(backend.name, site, *cast, kw)
                except Exception as exc:  # a raise that escaped the dispatcher is itself a failure
                    failures.append(f"{device} {backend.name} {case} {dtype}: {type(exc).__name__}: {exc}")
                    rows.append({"device": str(device), "backend": backend.name, "case": f"{case} {dtype}",
                                 "result": f"RAISED {type(exc).__name__}"})
                    continue
                error = (out.float() - math_reference(*cast, kw)).abs().max().item()
                limit = TOLERANCE[dtype] if REGISTRY.get(ran, backend).exact else APPROXIMATE_TOLERANCE
                ok = error <= limit
                if not ok:
                    failures.append(f"{device} {backend.name} {case} {dtype}: ran {ran}, error {error:.2e}")
                path = ran if ran == backend.name else f"{backend.name}→{ran}"
                detail = f"; {'; '.join(f'{p}: {r}' for p, r in fallbacks.items())}" if fallbacks else ""
                rows.append({"device": str(device), "backend": backend.name, "case": f"{case} {dtype}",
                             "result": f"{'ok' if ok else 'FAIL'} {path} err {error:.1e}{detail}"})


def check_fallback_chain(device, failures, rows):
    """A kernel that raises is replaced by the next one for that kind of call, and reported."""
    from mizuoto.runtime.accel.backends import Backend

    class Broken(Backend):
        name = "gpu_check_broken"
        devices = (device.type,)

        def run(self, q, k, v, args):
            raise RuntimeError("deliberately broken")

    REGISTRY[Broken.name] = Broken()
    probes._cache[(Broken.name, str(device))] = probes.Probe(Broken.name, str(device), True)
    try:
        policy = accel.AccelPolicy(Broken.name)
        run = policy.start()
        q = torch.randn(1, 2, 16, 64, device=device)
        with torch.no_grad(), RequestContext(0, accel=run).step():
            out = accel.attention(q, q, q, site=EXACT_SITE)
        (ran,) = run.report()["used"]
        error = (out.float() - math_reference(q, q, q, {})).abs().max().item()
        fell_back = any(pair.startswith(Broken.name) for pair in run.report()["fallbacks"])
        ok = fell_back and error <= TOLERANCE["float32"]
        rows.append({"device": str(device), "backend": Broken.name, "case": "raising kernel",
                     "result": f"{'ok' if ok else 'FAIL'} →{ran} err {error:.1e}"})
        if not ok:
            failures.append(f"{device}: a raising kernel did not fall back cleanly ({run.report()})")
    finally:
        del REGISTRY[Broken.name]


def check_engine_graphs(device, failures, rows):
    """The dummy engine on `device`: CUDA graphs on and off, and a capture that fails, give the same
    samples bit for bit (its decoder runs through DecoderSteps)."""
    from mizuoto.host import load_model, speak
    from mizuoto.runtime import graphs

    def waveform(cuda_graphs: bool):
        model = load_model("dummy", device=str(device), overrides={"compute.cuda_graphs": cuda_graphs})
        first = speak(model, "Graphs replay exactly what eager code launches.", seed=11).waveform
        again = speak(model, "Graphs replay exactly what eager code launches.", seed=11).waveform  # replays
        return first, again, model

    eager, _, _ = waveform(False)
    captured, replayed, model = waveform(True)
    original = graphs.Graphs.capture
    graphs.Graphs.capture = lambda self, fn, state=(), pool=None: None  # every capture "fails": eager
    try:
        failed, _, _ = waveform(True)
    finally:
        graphs.Graphs.capture = original
    for name, got in (("graphs, first request", captured), ("graphs, replayed", replayed),
                      ("failed capture", failed)):
        ok = torch.equal(got, eager)
        rows.append({"device": str(device), "backend": "dummy engine", "case": name,
                     "result": "ok identical to eager" if ok else "FAIL differs from eager"})
        if not ok:
            failures.append(f"{device}: dummy engine {name} differs from eager")
    rows.append({"device": str(device), "backend": "dummy engine", "case": "graphs used",
                 "result": str(model.info.graphs)})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="also write the rows and failures to this file")
    opts = parser.parse_args()
    devices = [torch.device("cpu")] + [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    rows, failures = [], []
    for device in devices:
        with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
            check_device(device, rows, failures)
            check_fallback_chain(device, failures, rows)
            if device.type == "cuda":
                check_engine_graphs(device, failures, rows)
    width = max(len(r["case"]) for r in rows)
    for row in rows:
        print(f"{row['device']:<8} {row['backend']:<15} {row['case']:<{width}}  {row['result']}")
    print(f"\n{len(failures)} failure(s)" + "".join(f"\n  {f}" for f in failures))
    if torch.cuda.is_available():
        # The graph runtime's own checks (toy decoder, failed captures, cudaMallocAsync, steps/s).
        graphs_check = subprocess.run([sys.executable, str(Path(__file__).with_name("graphs_check.py"))])
        if graphs_check.returncode != 0:
            failures.append("scripts/graphs_check.py failed (see its output above)")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows, "failures": failures}, f, indent=2)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
