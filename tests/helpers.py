"""Test helpers shared by several test files (tests/ is on sys.path through conftest.py)."""

import functools
import os
import sys
import threading
from contextlib import nullcontext
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mizuoto.runtime import graphs as graphs_mod
from mizuoto.runtime.context import ACCEL
from mizuoto.runtime.graphs import Graph, Graphs

# Ops that copy a value from the device to the host (each one waits for the device).
# (`int(tensor)` under inference mode dispatches as aten.item.)
HOST_READS = {"aten._local_scalar_dense.default", "aten.item.default", "aten.nonzero.default", "aten.equal.default",
              "aten.is_nonzero.default", "aten._assert_async.default", "aten._assert_async.msg"}


class HostReads(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.reads = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func) in HOST_READS:
            self.reads.append(str(func))
        return func(*args, **(kwargs or {}))



class Replayer:
    def __init__(self, fn, outputs):
        self.fn, self.outputs, self.replays = fn, outputs, 0

    def replay(self):
        """The captured work again, outside any bound policy: a real replay launches kernels and dispatches
        nothing (GraphedCall counts the capture's attention for it)."""
        self.replays += 1
        token = ACCEL.set(None)
        try:
            graphs_mod._copy(self.outputs, self.fn())
        finally:
            ACCEL.reset(token)


class EmulatedGraphs:
    drawing = Graphs.drawing

    def __init__(self, fail=()):
        self.device, self.epoch, self.lock = torch.device("cpu"), 0, threading.RLock()
        self.generator = torch.Generator()
        self.captures, self.fail = 0, set(fail)  # the numbers of the captures that fail

    def device_context(self):
        return nullcontext()

    def capture(self, fn, state=(), pool=None):
        self.captures += 1
        before, saved = self.generator.get_state(), [t.clone() for t in state]

        def restore():
            for t, value in zip(state, saved, strict=True):
                t.copy_(value)
            self.generator.set_state(before)

        fn()
        restore()
        if self.captures in self.fail:
            self.replace_generator()
            return None
        outputs = fn()  # what capture allocates; a real capture runs nothing, so undo what this did
        restore()
        return Graph(Replayer(fn, outputs), outputs, self.device, self.epoch)

    def replace_generator(self):
        fresh = torch.Generator()
        fresh.set_state(self.generator.get_state())
        self.generator, self.epoch = fresh, self.epoch + 1


def tiny_upstream_whisper(dims: dict, sharpen_cross_attention: float | None = None):
    """openai-whisper's own Whisper with random weights, its LayerNorms and decoder positions
    randomised too (upstream starts them at one/zero and uninitialised: a wrong norm or position
    would pass unnoticed). `sharpen_cross_attention` scales the cross-attention query and key
    weights, so that word alignments are not near-uniform."""
    import whisper

    torch.manual_seed(0)  # tests may seed the global generator; library code never does
    model = whisper.model.Whisper(whisper.model.ModelDimensions(**dims)).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "ln" in name or name.endswith("positional_embedding"):
                param.copy_(torch.randn_like(param) * 0.3 + (1.0 if name.endswith("ln.weight") else 0.0))
            elif sharpen_cross_attention and name.endswith(("cross_attn.query.weight", "cross_attn.key.weight")):
                param.mul_(sharpen_cross_attention)
    return model


def save_upstream_whisper(model, dims: dict, path):
    """An openai-format .pt checkpoint of `model`."""
    torch.save({"dims": dims, "model_state_dict": model.state_dict()}, path)
    return path


# ---------------------------------------------------------------------------------------------------
# Parity against stored references (tests/parity/README.md): every comparison process runs under the pins
# the writers ran under (scripts/parity/pinned.py), and reads the reference set that is valid on this
# machine: the committed one where its recorded fingerprint is this machine's, else one written here by
# upstream's own code.

PARITY_SCRIPTS = Path(__file__).resolve().parents[1] / "scripts" / "parity"
# Read once, when conftest.py imports this module (each test then runs with MIZUOTO_* cleared):
# MIZUOTO_PARITY_CACHE: where oracle environments and sets written here go (default ~/.cache/mizuoto-parity);
# MIZUOTO_PARITY_FOREIGN=1: act as a machine whose floats are no set's (every PyPI set is written here again,
# GitHub-only sets fall back to tolerances), to measure a cold run or check the writers on this machine.
PARITY_CACHE = Path(os.environ["MIZUOTO_PARITY_CACHE"]) if os.environ.get("MIZUOTO_PARITY_CACHE") else None
PARITY_FOREIGN = os.environ.get("MIZUOTO_PARITY_FOREIGN") == "1"
# MIZUOTO_PARITY_CENSUS=DIR: every pinned comparison run records its library-backed calls there (census.py write).
PARITY_CENSUS = os.environ.get("MIZUOTO_PARITY_CENSUS")


def load_pack(name: str):
    """The pack's entry module (the repository's __init__.py), loaded under `name` the way ComfyUI loads a
    custom_nodes folder."""
    import importlib.util

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location(name, root / "__init__.py", submodule_search_locations=[str(root)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def saved_audio(pack, graph: dict, recordings) -> dict:
    """Run an API workflow graph on the pack's node classes up to its SaveAudio node and return the AUDIO it
    gets. LoadAudio stands in with `recordings(file name)` -> (waveform (channels, samples), rate); SaveAudio
    keeps its inputs."""
    outputs = {}

    def run(node_id):
        if node_id not in outputs:
            node = graph[node_id]
            inputs = {k: (run(v[0])[v[1]] if isinstance(v, list) else v) for k, v in node["inputs"].items()}
            if node["class_type"] == "LoadAudio":
                wave, rate = recordings(inputs["audio"])
                outputs[node_id] = ({"waveform": wave[None], "sample_rate": rate},)
            elif node["class_type"] == "SaveAudio":
                outputs[node_id] = (inputs,)
            else:
                cls = pack.NODE_CLASS_MAPPINGS[node["class_type"]]
                result = getattr(cls(), cls.FUNCTION)(**inputs)
                outputs[node_id] = result["result"] if isinstance(result, dict) else result
        return outputs[node_id]

    (save_id,) = [i for i, n in graph.items() if n["class_type"] == "SaveAudio"]
    return run(save_id)[0]["audio"]


def parity_module(name: str):
    """A module of scripts/parity (pinned, fingerprint, reference_sets), imported once."""
    import importlib.util

    if name in sys.modules:
        return sys.modules[name]
    if str(PARITY_SCRIPTS) not in sys.path:
        sys.path.append(str(PARITY_SCRIPTS))  # the modules import each other by their plain names
    spec = importlib.util.spec_from_file_location(name, PARITY_SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def reference_sets():
    return parity_module("reference_sets")


# The run in a pinned process: the in-process pins first, then the script as __main__ (recording its census
# calls where MIZUOTO_PARITY_CENSUS says so).
_PINNED_RUNNER = ("import os, runpy, sys; sys.path.insert(0, sys.argv[1]); import pinned; pinned.apply_in_process(); "
                  "sys.argv = sys.argv[2:]; import census; "
                  "census.run_recording(sys.argv) if os.environ.get(census.RECORD_ENV) else "
                  "runpy.run_path(sys.argv[0], run_name='__main__')")


def bit_diff(ours: torch.Tensor, theirs: torch.Tensor):
    """A pinned comparison's verdict: 0.0 when bitwise equal (floats widened to float32, integers to int64, as the
    writers store them); the max abs difference otherwise; None when shape or kind differ."""
    ours = ours.detach().float() if ours.is_floating_point() else ours.detach().long()
    if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
        return None
    return 0.0 if torch.equal(ours, theirs) else (ours - theirs).abs().max().item()


def run_pinned(script, *args, timeout: int = 600) -> dict:
    """`python script *args` under the parity pins (one thread, avx2, MKL_CBWR, oneDNN off) -> the JSON of
    its last line."""
    import json
    import subprocess

    require_avx2()
    env = parity_module("pinned").pinned_env()
    if PARITY_CENSUS:
        env[parity_module("census").RECORD_ENV] = PARITY_CENSUS
    done = subprocess.run([sys.executable, "-c", _PINNED_RUNNER, str(PARITY_SCRIPTS), str(script), *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def require_avx2() -> None:
    """Skip where the pinned level cannot exist (references are from x86-64 AVX2 kernels)."""
    import pytest

    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("the references were computed on x86-64 with AVX2 kernels")


@functools.lru_cache(maxsize=None)
def machine_fingerprint() -> dict:
    """This machine's fingerprint under the pins (measured once per test session)."""
    require_avx2()
    return reference_sets().machine_fingerprint()


@functools.lru_cache(maxsize=None)
def census_moves() -> dict[str, int]:
    """Committed set -> how many of its census calls (census.py) hash differently here; measured once per test
    session, for every set with a census, in one pinned process."""
    require_avx2()
    sets = reference_sets()
    return parity_module("census").moved({name: spec.committed for name, spec in sets.SETS.items()})


def writers_floats(name: str, folder: Path) -> tuple[bool, str]:
    """Whether the numbers of set `name` in `folder` are this machine's floats, and why: the fingerprint's
    battery and extended primitives agree with the writer's (fingerprint.same_floats), and, for a committed set,
    every call of its census hashes as where it was recorded. A set written here (the cache) is this machine's."""
    sets = reference_sets()
    written, here = sets.recorded_fingerprint(folder), machine_fingerprint()
    recorded = (written or {}).get("id")
    if not sets.same_floats(written, here):
        if recorded == here["id"]:
            return False, f"fingerprint {here['id']} is the writer's, but an extended primitive differs " \
                          f"(fingerprint.py's _extended)"
        return False, f"written at fingerprint {recorded}, this machine measures {here['id']}"
    spec = sets.SETS.get(name)
    if spec is not None and Path(folder) == spec.committed and census_moves().get(name):
        return False, f"fingerprint {here['id']} is the writer's, but {census_moves()[name]} calls of the set's " \
                      f"census round differently here (census.py)"
    return True, f"fingerprint {here['id']} is the writer's"


# name -> how its comparisons run here: "exact (committed)", "exact (written here)" or "tolerance (...)";
# conftest.py prints it at the end of the run.
PARITY_MODES: dict[str, str] = {}


@functools.lru_cache(maxsize=None)
def reference_dir(name: str) -> Path:
    """The folder of reference set `name` (scripts/parity/reference_sets.py) whose numbers are this machine's:
    the committed one when its fingerprint matches (or it holds integers only), else the set written here by
    the pinned upstream environment (built once in the cache). Fails in one line where that cannot be done."""
    folder, mode = resolve_with_mode(reference_sets().SETS[name])
    PARITY_MODES[name] = mode
    return folder


def resolve(spec, root: Path | None = None) -> Path:
    """reference_dir for a ReferenceSet (its committed folder may be a copy), with the cache at `root`."""
    return resolve_with_mode(spec, root)[0]


def resolve_with_mode(spec, root: Path | None = None) -> tuple[Path, str]:
    import pytest

    sets = reference_sets()
    if not spec.floats:
        return spec.committed, "exact, committed references (integers only)"
    same, why = writers_floats(spec.name, spec.committed)
    if same and not PARITY_FOREIGN:
        return spec.committed, "exact, committed references"
    try:
        folder = sets.regenerated(spec, machine_fingerprint(), root=root or PARITY_CACHE,
                                  log=lambda line: print(line, file=sys.stderr))
    except sets.RegenerationError as error:
        pytest.fail(f"{spec.name}: the stored references are not this machine's floats ({why}), and {error}; run "
                    f"where PyPI is reachable, or rewrite them here with "
                    f"`python scripts/parity/reference_sets.py write {spec.name}`", pytrace=False)
    return folder, f"exact, written here by {spec.upstream} ({folder}; {why})"


def fingerprint(t: torch.Tensor) -> dict:
    """Shape, sha256 of the bytes and sum of a tensor: a compact golden value."""
    import hashlib

    import numpy as np

    a = t.detach().contiguous().cpu().numpy()
    return {"shape": list(a.shape), "sha256": hashlib.sha256(a.tobytes()).hexdigest(),
            "sum": round(float(a.astype(np.float64).sum()), 6)}


def record_compiles(monkeypatch) -> list[str]:
    """Stand torch.compile in with a recorder: every call of a 'compiled' module runs the module and
    appends its class name to the returned list (so a test sees which calls went through compile)."""
    calls: list[str] = []

    def fake_compile(module, dynamic=None):
        def run(*args, **kwargs):
            calls.append(type(module).__name__)
            return module(*args, **kwargs)
        return run

    monkeypatch.setattr(torch, "compile", fake_compile)
    return calls
