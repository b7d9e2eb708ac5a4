"""The portability of stored references (tests/parity/README.md): the machine fingerprint decides by measurement,
a set with a foreign fingerprint is written again here by its pinned upstream environment (the committed copy
untouched, the cache reused), a GitHub-only set falls back to tolerances, a set that cannot be rewritten fails
in one line, and a corrupted reference still fails."""

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import helpers
import pytest
import torch
from dummy_parity import run_and_compare
from fallback import Comparison
from helpers import PARITY_CACHE, PARITY_SCRIPTS, machine_fingerprint, reference_sets, require_avx2, resolve, run_pinned

REPO = Path(__file__).resolve().parents[2]
FOREIGN = "f0f0f0f0f0f0f0f0"


def tree_digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def copy_with_fingerprint(name: str, root: Path, fingerprint_id: str) -> Path:
    """A copy of committed set `name` under `root` whose fingerprint.json claims `fingerprint_id`."""
    target = root / name
    shutil.copytree(reference_sets().SETS[name].committed, target)
    record = json.loads((target / "fingerprint.json").read_text())
    (target / "fingerprint.json").write_text(json.dumps({**record, "id": fingerprint_id}))
    return target


# ---------------------------------------------------------------------------------------------------
# The fingerprint


def test_every_set_is_fingerprinted_and_registered():
    sets = reference_sets()
    data = REPO / "tests" / "parity" / "data"
    on_disk = {str(p.parent.relative_to(data)) for p in data.rglob("references.json")}
    assert on_disk == set(sets.SETS)
    for spec in sets.SETS.values():
        recorded = sets.recorded_fingerprint(spec.committed)
        assert recorded and recorded["pins"] == sets.pinned_env({})  # written under every pin
        assert recorded["num_threads"] == 1 and recorded["mkldnn"] is False
        assert spec.oracle is None or spec.env_script.exists()
        assert all((PARITY_SCRIPTS / writer[0]).exists() for writer in spec.writers)


def test_fingerprint_is_stable_and_covers_the_engines_primitives():
    first = machine_fingerprint()
    again = reference_sets().machine_fingerprint()
    assert again == first
    kinds = {name.split("/")[0] for name in first["primitives"]}
    assert {"mm", "linear", "bmm", "conv1d", "conv_transpose1d", "rfft", "stft", "layer_norm", "rms_norm",
            "softmax", "unary", "sdpa", "lstm", "randn"} <= kinds
    assert first["torch"] == torch.__version__


@pytest.mark.parametrize(("lift", "moved"), [
    ("MKL_CBWR", "mm/128x256x192"),  # MKL's own code path for this CPU
    ("ATEN_CPU_CAPABILITY", "softmax"),  # torch's kernels at this machine's own level
    ("onednn", "unary/gelu"),  # oneDNN's kernels
])
def test_fingerprint_notices_other_floats(lift, moved):
    """Lifting one pin on this machine stands in for a machine whose kernels differ: the battery sees it."""
    require_avx2()
    if lift == "ATEN_CPU_CAPABILITY" and torch.backends.cpu.get_cpu_capability() != "AVX512":
        pytest.skip("this machine's own level is avx2: lifting the pin changes nothing")
    pinned = machine_fingerprint()["primitives"]
    lifted = helpers.parity_module("fingerprint").lifted_battery(lift)
    if lift == "MKL_CBWR" and all(lifted[n] == pinned[n] for n in pinned if n.split("/")[0] in ("mm", "linear", "bmm")):
        # on some CPUs MKL's own choice for every battery GEMM is its compatible code: nothing can move there
        pytest.skip("MKL runs its compatible GEMM code on this CPU without the pin too")
    assert lifted[moved] != pinned[moved]
    assert lifted["unary/exp"] == pinned["unary/exp"]  # only what that pin governs moves


# ---------------------------------------------------------------------------------------------------
# A foreign fingerprint: PyPI upstreams are written again here, GitHub-only ones fall back


@pytest.mark.slow
def test_a_foreign_set_is_written_again_by_its_upstream_and_compared_exactly(tmp_path):
    """voxcpm/cfm claiming another machine's floats: the suite builds (or reuses) voxcpm 2.0.3's pinned
    environment in the cache and writes the set with the same writer; on this machine (the committed set's
    own floats) that reproduces the committed bytes, the comparison is exact, and the copy is untouched."""
    sets = reference_sets()
    spec = dataclasses.replace(sets.SETS["voxcpm/cfm"], root=tmp_path)
    copy = copy_with_fingerprint("voxcpm/cfm", tmp_path, FOREIGN)
    before = tree_digest(copy)
    folder = resolve(spec)
    assert folder != copy and folder.is_relative_to(PARITY_CACHE or sets.cache_root())
    assert tree_digest(copy) == before
    written, committed = tree_digest(folder), tree_digest(sets.SETS["voxcpm/cfm"].committed)
    if helpers.writers_floats("voxcpm/cfm", sets.SETS["voxcpm/cfm"].committed)[0]:
        # the writers are deterministic: the same floats give the same bytes (the fingerprint file may now hold
        # extended primitives the committed one was written without; the census is recorded from our side)
        beside = ("fingerprint.json", "census.json")
        assert {k: v for k, v in written.items() if k not in beside} == \
            {k: v for k, v in committed.items() if k not in beside}
    assert resolve(spec) == folder  # the second time, from the cache
    diffs = run_pinned(REPO / "tests" / "engines" / "test_voxcpm_cfm.py", folder, "dit", timeout=300)
    assert diffs and all(value == 0.0 for value in diffs.values())


def test_a_foreign_github_only_set_is_compared_within_tolerance(tmp_path):
    folder = copy_with_fingerprint("dummy", tmp_path, FOREIGN)
    comparison = run_and_compare(folder, tmp_path)
    assert comparison.mode == "tolerance"
    assert any("not compared" in line for line in comparison.checked)
    assert any("greedy argmax" in line for line in comparison.checked)


def test_a_set_that_cannot_be_written_here_fails_in_one_line(tmp_path, monkeypatch):
    """No registry: the oracle environment cannot be built, and the test says so instead of loosening."""
    sets = reference_sets()
    spec = dataclasses.replace(sets.SETS["voxcpm/minicpm"], root=tmp_path)
    copy_with_fingerprint("voxcpm/minicpm", tmp_path, FOREIGN)
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    with pytest.raises(pytest.fail.Exception) as failure:
        resolve(spec, root=tmp_path / "cache")
    message = str(failure.value)
    assert "\n" not in message and "could not be built" in message and "voxcpm/minicpm" in message
    assert not (tmp_path / "cache" / "sets").exists() or not any((tmp_path / "cache" / "sets").rglob("*.json"))


def test_github_only_sets_are_never_rewritten():
    sets = reference_sets()
    with pytest.raises(sets.RegenerationError, match="cannot be run here"):
        sets.regenerated(sets.SETS["dummy"], {"id": FOREIGN})


# ---------------------------------------------------------------------------------------------------
# A corrupted reference still fails, in either mode


def _corrupt(folder: Path, key: str, scale: float) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / "references.safetensors"))
    tensors[key] = tensors[key].clone()
    tensors[key].view(-1)[0] += scale
    save_file(tensors, str(folder / "references.safetensors"))


def test_a_corrupted_reference_fails_the_exact_comparison(tmp_path):
    shutil.copytree(reference_sets().SETS["voxcpm/cfm"].committed, tmp_path / "cfm")
    _corrupt(tmp_path / "cfm", "toy/probe/out", 1e-6)
    diffs = run_pinned(REPO / "tests" / "engines" / "test_voxcpm_cfm.py", tmp_path / "cfm", "toy", timeout=300)
    assert diffs["toy/probe"] not in (0.0, None)


@pytest.mark.parametrize("fingerprint_id", ["writer's", FOREIGN])
def test_a_corrupted_reference_fails_the_fallback_comparison(tmp_path, fingerprint_id):
    here = machine_fingerprint()["id"] if fingerprint_id == "writer's" else fingerprint_id
    folder = copy_with_fingerprint("dummy", tmp_path, here)
    _corrupt(folder, "decode/logits", 1e-3)  # a hundred times the tolerance: a real error
    with pytest.raises(AssertionError, match="decode logits"):
        run_and_compare(folder, tmp_path)


def test_the_fallback_keeps_greedy_choices_where_the_gap_is_wide():
    theirs = torch.tensor([[0.0, 1.0, 0.85], [0.30, 0.35, 0.0]])
    close_swap = torch.tensor([[0.0, 1.0, 0.85], [0.36, 0.30, 0.0]])  # swaps a pair closer than tol: allowed
    Comparison("toy", exact=False, why="test").teacher_forced("toy", close_swap, theirs, tol=0.1)
    wide_swap = torch.tensor([[0.0, 0.92, 0.93], [0.30, 0.35, 0.0]])  # each within tol, a 0.15 gap swapped
    with pytest.raises(AssertionError, match="greedy choice"):
        Comparison("toy", exact=False, why="test").teacher_forced("toy", wide_swap, theirs, tol=0.1)


# ---------------------------------------------------------------------------------------------------
# The writers of GitHub-only upstreams: they run from a checkout and record its commit


WRITER = '''import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from pinned import checkout_record, pin_process
pin_process()
out = Path(sys.argv[1])
(out / "references.json").write_text(json.dumps({"upstream": checkout_record(sys.argv[2])}))
'''


def test_a_github_only_writer_records_the_checkouts_commit(tmp_path):
    sets = reference_sets()
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    git = ["git", "-C", str(upstream), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    (upstream / "model.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "upstream"], check=True)
    commit = subprocess.run([*git[:3], "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    writer = tmp_path / "toy_references.py"  # an absolute path: not one of scripts/parity
    writer.write_text(WRITER)
    spec = sets.ReferenceSet("toy", None, ((str(writer), sets.OUT, sets.CHECKOUT, str(PARITY_SCRIPTS)),))
    with pytest.raises(sets.RegenerationError, match="--checkout"):
        sets.write(spec, tmp_path / "set", sys.executable)
    fingerprint = sets.write(spec, tmp_path / "set", sys.executable, checkout=upstream)
    recorded = json.loads((tmp_path / "set" / "references.json").read_text())["upstream"]
    assert recorded == {"commit": commit, "modified": False, "origin": None}
    assert sets.recorded_fingerprint(tmp_path / "set") == fingerprint == machine_fingerprint()
