"""What the parity processes share: the pins every reference writer, every pinned comparison and the machine
fingerprint run under, which clone is ours, and how reference files are written and described.

Why these pins (measured with fingerprint.py's battery; tests/parity/README.md has the table):
- one thread: reductions split by thread count;
- ATEN_CPU_CAPABILITY=avx2: torch's own vectorised kernels (softmax, SDPA, reductions) differ between levels;
- MKL_CBWR=COMPATIBLE: MKL's GEMM otherwise picks its code by CPU vendor and model (an AMD machine reports no
  ISA branch at all, so AVX2 is ignored there and only COMPATIBLE is honoured on every x86-64 CPU);
- oneDNN off in process (torch.backends.mkldnn): strided and depthwise convolutions, GELU and LSTM go to oneDNN,
  which picks kernels by ISA and cache sizes; ATen's own kernels then run them. DNNL_MAX_CPU_ISA caps what is
  left. Torch reads these once (the capability when it loads, MKL at its first call), so a process that
  lacks them re-executes itself before importing torch.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

CAPABILITY = "avx2"  # every x86-64 test machine here has it; float results depend on the level
PINS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "ATEN_CPU_CAPABILITY": CAPABILITY,
        "MKL_CBWR": "COMPATIBLE", "DNNL_MAX_CPU_ISA": "AVX2"}


def pinned_env(env: dict | None = None) -> dict:
    """`env` (default: this process's) with the pins set, for a child process."""
    return {**(os.environ if env is None else env), **PINS}


def is_pinned(env: dict | None = None) -> bool:
    env = os.environ if env is None else env
    return all(env.get(name) == value for name, value in PINS.items())


def reexec_pinned() -> None:
    """Restart this script with the pins in its environment, unless they are there already."""
    if not is_pinned():
        os.execve(sys.executable, [sys.executable, *sys.argv], pinned_env())


def apply_in_process() -> None:
    """The pins that are settings of torch, not of the environment: one intra-op thread, oneDNN off."""
    import torch

    torch.set_num_threads(1)
    torch.backends.mkldnn.enabled = False


def pin_process() -> None:
    """Every pin, for a parity script: call it first thing, before torch is imported."""
    reexec_pinned()
    apply_in_process()


def check_pinned() -> None:
    """Refuse to describe references computed without every pin (they would carry a wrong fingerprint)."""
    import torch

    assert is_pinned(), f"run under the parity pins {PINS} (pinned.pin_process)"
    assert torch.get_num_threads() == 1 and not torch.backends.mkldnn.enabled, "call pinned.pin_process() first"


def add_ours_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ours", type=Path, default=Path(__file__).resolve().parents[2],
                        help="the Mizuoto clone whose modules are compared (default: this one)")


def write_references(refs: dict, path) -> None:
    """Save the reference arrays (C-contiguous: safetensors' numpy writer scrambles other layouts,
    ENGINES.md §1) and read them back to check they are what was computed, and finite."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    refs = {k: np.ascontiguousarray(a) for k, a in refs.items()}
    save_file(refs, str(path))
    back = load_file(str(path))
    assert back.keys() == refs.keys() and all(np.array_equal(back[k], refs[k]) for k in refs)
    for key, a in refs.items():
        assert a.dtype.kind != "f" or np.isfinite(a).all(), key


def write_golden(folder: Path, kind: str, values: dict) -> Path:
    """Golden values a test compares with (hashes, codes) as folder/golden/<kind>.json, part of the set."""
    import json

    path = Path(folder) / "golden" / f"{kind}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(values, indent=1, sort_keys=True) + "\n")
    return path


def add_checkout_argument(parser: argparse.ArgumentParser) -> None:
    """For a GitHub-only upstream's writer: where its checkout is (reference_sets.py write NAME --checkout)."""
    parser.add_argument("--checkout", type=Path, required=True, help="a git checkout of the upstream repository")


def checkout_record(path) -> dict:
    """What a writer of a GitHub-only upstream records of the checkout it ran: its commit, and whether the work
    tree differed from it (a reference written from local changes is not upstream's)."""
    import subprocess

    def git(*args):
        done = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{path} is not a git checkout of the upstream: {done.stderr.strip()}")
        return done.stdout.strip()

    remotes = git("remote").split()
    return {"commit": git("rev-parse", "HEAD"), "modified": bool(git("status", "--porcelain", "--untracked-files=no")),
            "origin": git("remote", "get-url", "origin") if "origin" in remotes else None}


def environment(packages) -> dict:
    """What the references' numbers depend on: torch, threads, the pins, package versions."""
    from importlib import metadata

    import torch

    check_pinned()

    def version(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    return {"torch": torch.__version__, "num_threads": torch.get_num_threads(),
            "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY"),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "pins": PINS, "mkldnn": False,
            "versions": {name: version(name) for name in packages}, "python": sys.version.split()[0]}


# --- measuring a writer's spread (how far its outputs move when a pin is lifted) -------------------------------
# The environments a writer's --spread runs its computation in: each lifts one pin (or all) on this machine.
LIFTED = {
    "no pins (machine defaults, 2 threads)": {"unset": list(PINS), "threads": 2, "mkldnn": True},
    "ATEN_CPU_CAPABILITY=avx512": {"set": {"ATEN_CPU_CAPABILITY": "avx512"}},
    "MKL_CBWR unset": {"unset": ["MKL_CBWR"]},
    "oneDNN on": {"mkldnn": True},
    "2 threads": {"threads": 2},
}
UNPINNED = "PARITY_WRITER_UNPINNED"  # set in a --spread child: it runs as its environment says, unpinned


def is_spread_child() -> bool:
    return os.environ.get(UNPINNED) == "1"


def apply_spread_child() -> None:
    """In a --spread child, after importing torch: the threads and oneDNN setting its parent chose."""
    import torch

    torch.set_num_threads(int(os.environ["PARITY_WRITER_THREADS"]))
    torch.backends.mkldnn.enabled = os.environ["PARITY_WRITER_MKLDNN"] == "1"


def lifted_runs(script, args, tmp) -> dict:
    """Run `script OUT *args` once pinned and once per LIFTED environment this CPU can run (an AVX-512 level
    needs AVX-512), each as a --spread child writing OUT/references.safetensors; -> {label: its tensors}."""
    import subprocess

    from safetensors.torch import load_file

    runs = {}
    for label, change in {"pinned": {}, **LIFTED}.items():
        if "avx512" in label and "avx512f" not in Path("/proc/cpuinfo").read_text():
            continue  # this CPU has no such kernels (the run dies of SIGILL)
        env = {**os.environ, **PINS, UNPINNED: "1", "PARITY_WRITER_THREADS": str(change.get("threads", 1)),
               "PARITY_WRITER_MKLDNN": "1" if change.get("mkldnn") else "0"}
        for name in change.get("unset", []):
            env.pop(name, None)
        env.update(change.get("set", {}))
        target = Path(tmp) / str(len(runs))
        subprocess.run([sys.executable, str(script), str(target), *map(str, args)], env=env, check=True)
        runs[label] = load_file(str(target / "references.safetensors"))
    return runs


def save_spread(out, report: dict, floats) -> None:
    """A --spread report {lifted environment: {output: max |diff|, ...}} with its per-output maximum added, written
    to OUT/spread.json (the set's writer keeps it in references.json) and printed."""
    import json

    report["max"] = {k: max(r[k] for r in report.values()) for k in floats}
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / "spread.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


def checkout_golden_arguments(description: str, repository: str) -> tuple[Path, Path, dict]:
    """The command line `OUT --checkout PATH` of a GitHub-only upstream's golden writer: (OUT, the checkout,
    the record of `repository` at that checkout)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("out", type=Path)
    add_checkout_argument(parser)
    args = parser.parse_args()
    checkout = args.checkout.resolve()
    return args.out.resolve(), checkout, {"repository": repository, **checkout_record(checkout)}


def write_golden_set(out: Path, kind: str, record: dict, values: dict, **listing) -> None:
    """A strings-only set: OUT/golden/<kind>.json ({"upstream": record, **values}) and OUT/references.json naming
    the golden file, the cases (values["cases"]) and whatever else `listing` adds."""
    import json

    write_golden(out, kind, {"upstream": record, **values})
    (Path(out) / "references.json").write_text(json.dumps(
        {"upstream": record, "golden": f"golden/{kind}.json", **listing, "cases": sorted(values["cases"])},
        indent=1) + "\n")


def checkout_writer_main(description: str, write, spread, outputs) -> None:
    """The command line of a GitHub-only upstream's writer: `OUT --checkout PATH [--spread]`. `write(out,
    checkout)` writes the set, `spread(out, checkout)` measures it, and in a --spread child `outputs(checkout)[0]`
    (the reference tensors) is saved to OUT/references.safetensors."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("out", type=Path)
    parser.add_argument("--spread", action="store_true")
    add_checkout_argument(parser)
    args = parser.parse_args()
    checkout = args.checkout.resolve()
    if args.spread:
        spread(args.out, checkout)
    elif is_spread_child():
        from safetensors.torch import save_file

        apply_spread_child()
        args.out.mkdir(parents=True, exist_ok=True)
        save_file(outputs(checkout)[0], str(args.out / "references.safetensors"))
    else:
        write(args.out, checkout)


def write_checkout_tensors(out: Path, refs: dict, info: dict, checkout: Path, code: str, packages,
                           repository: str = "RVC-Boss/GPT-SoVITS") -> None:
    """A GitHub-only upstream's tensor set: OUT/references.safetensors (read back and compared), and
    OUT/references.json holding `info`, then the upstream record (its repository at `checkout`, what of its
    `code` ran), the versions of `packages` and the measured spread when OUT/spread.json is there."""
    import json

    import torch
    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file(refs, str(out / "references.safetensors"))
    back = load_file(str(out / "references.safetensors"))
    assert all(torch.equal(back[k], refs[k]) for k in refs)
    info["upstream"] = {"repository": repository, **checkout_record(checkout), "code": code}
    info["environment"] = environment(packages)
    spread_file = out / "spread.json"
    if spread_file.exists():
        info["spread"] = json.loads(spread_file.read_text())
    (out / "references.json").write_text(json.dumps(info, indent=1) + "\n")
