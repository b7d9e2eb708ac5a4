#!/usr/bin/env python
"""A reference set's census: every library-backed op call its comparison runs (GEMM, convolution, FFT, CPU flash
attention), at its own shapes, strides and arguments, replayed on inputs built from integers and hashed.

The machine fingerprint (fingerprint.py) is one fixed battery, and a battery cannot hold every op at every size:
MKL picks GEMM and FFT code by shape and CPU, so two machines whose batteries agree can still round one of a set's
own calls differently (a CI machine did: qwen3tts' mels, Seed-VC, RMVPE and F5's waveform moved by 1e-7..1e-6
under the writer's fingerprint). A census closes that gap set by set. It is recorded from our side of the
comparison, on a machine whose floats are the set's (every exact comparison passes there), and stored beside the
fingerprint as `census.json`; a test compares exactly against the committed set only where replaying its census
here gives the same hashes (tests/helpers.writers_floats), and treats the set as written on another machine
otherwise.

    python scripts/parity/census.py write [PYTEST ARGS]   # run the parity tests recording, then write each
                                                          # recorded set's census.json (default: every test
                                                          # that reads a reference set)
    python scripts/parity/census.py check [SET ...]       # which committed sets' censuses move here (pinned)
"""

from __future__ import annotations

import hashlib
import json
import os
import runpy
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fingerprint import _values  # noqa: E402  (beside this script)
from pinned import apply_in_process, pinned_env, reexec_pinned  # noqa: E402

CENSUS_FILE = "census.json"
RECORD_ENV = "MIZUOTO_PARITY_CENSUS"  # a folder: pinned comparison runs record their calls there
MODES_FILE = "parity-modes.json"  # beside them, from the test run: how each set was compared (conftest.py)
# Sets without a census, and why (test_census.py holds every other set with floats to having one).
PENDING: dict[str, str] = {
    "audio/librosa_resample": "compared in the test process (numpy's soxr port), not in a pinned run: nothing to "
                              "record; its fingerprint decides alone",
}
# The ops whose code a library picks by CPU model, shape or cache size (MKL's GEMM and FFT, the CPU BLAS behind
# flash attention and convolution's im2col). Composite ops (linear, matmul, einsum, stft, LSTM) reach these.
TRACKED = frozenset({
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "convolution",
    "_fft_r2c", "_fft_c2r", "_fft_c2c", "_scaled_dot_product_flash_attention_for_cpu",
})


# ---------------------------------------------------------------------------------------------------
# Calls as JSON: a tensor becomes its shape, strides and dtype; other arguments stay as they are

# The profiler's names of the dtypes a tracked call may take (integer inputs would need their real values)
DTYPES = {"float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
          "c10::complex<float>": "complex64", "c10::complex<double>": "complex128", "bool": "bool"}


def _storage_size(shape, stride) -> int:
    return 0 if 0 in shape else 1 + sum((size - 1) * step for size, step in zip(shape, stride, strict=True))


def _tensor(shape, stride, dtype: str, seed: int):
    """A tensor of that layout filled from integer-built values: the same bits on every machine."""
    import torch

    n = _storage_size(shape, stride)
    if dtype == "bool":
        flat = _values(n, seed=seed) > 0
    elif dtype.startswith("complex"):
        flat = torch.complex(_values(n, seed=seed), _values(n, seed=seed + 1000)).to(getattr(torch, dtype))
    else:
        flat = _values(n, seed=seed).to(getattr(torch, dtype))
    return flat.as_strided(shape, stride)


def event_key(event) -> str | None:
    """A profiled call (torch.profiler's kineto event) as its census key, or None where it is not tracked."""
    name = event.name().removeprefix("aten::")
    if name not in TRACKED:
        return None
    args = []
    for shape, stride, dtype, value in zip(event.shapes(), event.structured_input_strides(), event.dtypes(),
                                           event.concrete_inputs(), strict=True):
        if dtype in DTYPES:
            args.append({"tensor": [list(shape), list(stride), DTYPES[dtype]]})
        elif dtype in ("Scalar", "ScalarList", "") and not (dtype == "" and shape):
            args.append(value)
        else:
            return None  # an integer tensor, or an argument the profiler does not spell out
    return json.dumps([f"{name}.{event.overload_name() or 'default'}", args], separators=(",", ":"))


def _decode(args):
    seeds = iter(range(1, 10_000))
    return [_tensor(*a["tensor"], seed=next(seeds)) if isinstance(a, dict) else a for a in args]


# ---------------------------------------------------------------------------------------------------
# Recording (inside a pinned comparison run) and replaying (under the pins)


@contextmanager
def recording(calls: set):
    """Adds to `calls` the key of every tracked call run inside. torch's profiler observes the calls without
    changing how they dispatch (a Python dispatch mode would: composite ops such as GRU take other paths under
    one, and round differently)."""
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            yield
    finally:  # a script that ends in sys.exit(0) is recorded too
        events = prof.profiler.kineto_results.events()
    for event in events:
        key = event_key(event)
        if key is not None:
            calls.add(key)


def _op(name: str):
    import torch

    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload)


def _digest(out) -> str:
    import torch
    from torch.utils._pytree import tree_leaves

    h = hashlib.sha256()
    for t in tree_leaves(out):
        if isinstance(t, torch.Tensor):
            t = t.detach().contiguous()
            t = torch.view_as_real(t) if t.is_complex() else t
            t = t.view(torch.int16) if t.dtype in (torch.bfloat16, torch.float16) else t
            h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]


def replay(keys) -> dict[str, str]:
    """key -> the hash of that call on integer-built inputs, in this process (which must run under the pins)."""
    import torch

    hashes = {}
    with torch.inference_mode():
        for key in keys:
            name, args = json.loads(key)
            op = _op(name)
            values, schema = _decode(args), op._schema.arguments  # the profiler lists keyword-only ones in order
            positional = [v for v, a in zip(values, schema, strict=False) if not a.kwarg_only]
            keywords = {a.name: v for v, a in zip(values, schema, strict=False) if a.kwarg_only}
            hashes[key] = _digest(op(*positional, **keywords))
    return hashes


def recorded_sets(argv) -> list[str]:
    """The registered sets whose committed folders a comparison run's arguments name (copies are not the set)."""
    from reference_sets import SETS

    named = set()
    for arg in argv:
        path = Path(arg).resolve() if arg and not arg.startswith("-") else None
        for spec in SETS.values():
            if path is not None and (path == spec.committed or spec.committed in path.parents):
                named.add(spec.name)
    return sorted(named)


def run_recording(argv) -> None:
    """Run a comparison script (`argv` as runpy would see it) with its tracked calls recorded into RECORD_ENV's
    folder, one file per set it reads and process."""
    sets, calls = recorded_sets(argv[1:]), set()
    try:
        with recording(calls):
            runpy.run_path(argv[0], run_name="__main__")
    finally:
        folder = Path(os.environ[RECORD_ENV])
        for name in sets:
            path = folder / f"{name.replace('/', '__')}.{os.getpid()}.json"
            path.write_text(json.dumps(sorted(calls)))


def read(folder: Path) -> dict | None:
    path = Path(folder) / CENSUS_FILE
    return json.loads(path.read_text()) if path.exists() else None


def moved(folders: dict[str, Path], env: dict | None = None) -> dict[str, int]:
    """name -> how many of the set's census calls hash differently here (0: none), for each folder with a
    census, replayed in one pinned process (or in `env` as it is, with the in-process pins)."""
    as_is = ["--as-is"] if env is not None else []
    done = subprocess.run([sys.executable, __file__, "check", *as_is, *(f"{n}={p}" for n, p in folders.items())],
                          capture_output=True, text=True, env=pinned_env() if env is None else env, timeout=1200)
    if done.returncode != 0:
        raise RuntimeError(f"census.py check failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------------
# The commands


def _check(names) -> None:
    """names: NAME (its committed folder) or NAME=FOLDER; none: every registered set. --as-is: keep this
    process's environment (a test lifts one pin), with the in-process pins."""
    if "--as-is" not in names:
        reexec_pinned()
    apply_in_process()
    from reference_sets import SETS

    censuses = {}
    for item in [n for n in names if n != "--as-is"] or sorted(SETS):
        name, _, folder = item.partition("=")
        census = read(Path(folder) if folder else SETS[name].committed)
        if census is not None:
            censuses[name] = census["calls"]
    here = replay(sorted({key for calls in censuses.values() for key in calls}))  # a call shared by sets once
    print(json.dumps({name: sum(here[key] != want for key, want in calls.items())
                      for name, calls in censuses.items()}))


def _replay_files(files) -> None:
    """Child of `write`: the union of the recorded calls, hashed under the pins, as JSON."""
    reexec_pinned()
    apply_in_process()
    keys = sorted({key for f in files for key in json.loads(Path(f).read_text())})
    print(json.dumps(replay(keys)))


def _write(pytest_args) -> int:
    import tempfile

    from fingerprint import same_floats
    from reference_sets import DATA, SETS, machine_fingerprint, recorded_fingerprint

    here = machine_fingerprint()
    # default: every test module with a pinned comparison run (the reference sets' own tests copy them)
    tests = pytest_args or sorted(str(p) for p in (DATA.parents[1]).rglob("test_*.py")
                                  if ("run_pinned(" in p.read_text() or "run_and_compare(" in p.read_text())
                                  and p.name != "test_reference_sets.py")
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, RECORD_ENV: folder}
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], env=env)
        if done.returncode != 0:
            print("census: the comparisons must pass exactly before their calls are recorded", file=sys.stderr)
            return 1
        modes = json.loads((Path(folder) / MODES_FILE).read_text())
        files: dict[str, list[str]] = {}
        for path in Path(folder).glob("*.json"):
            if path.name != MODES_FILE:
                files.setdefault(path.name.split(".")[0].replace("__", "/"), []).append(str(path))
        for name, paths in sorted(files.items()):
            spec = SETS[name]
            # only where every comparison was exact against the committed files are this machine's hashes the set's
            exact = modes.get(name, "").startswith("exact, committed references")
            if not exact or not same_floats(recorded_fingerprint(spec.committed), here):
                print(f"census: {name} is not this machine's floats ({modes.get(name)}): not recorded",
                      file=sys.stderr)
                continue
            child = subprocess.run([sys.executable, __file__, "replay-files", *paths], capture_output=True,
                                   text=True, env=pinned_env(), check=True)
            hashes = json.loads(child.stdout.strip().splitlines()[-1])
            census = {"fingerprint": here["id"], "tracked": sorted(TRACKED), "calls": hashes}
            (spec.committed / CENSUS_FILE).write_text(json.dumps(census, indent=0, sort_keys=True) + "\n")
            print(f"census: {name}: {len(hashes)} calls")
    return 0


if __name__ == "__main__":
    command, rest = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if command == "check":
        _check(rest)
    elif command == "replay-files":
        _replay_files(rest)
    elif command == "write":
        sys.exit(_write(rest))
    else:
        sys.exit(__doc__)
