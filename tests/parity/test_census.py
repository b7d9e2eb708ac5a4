"""A reference set's census (scripts/parity/census.py): the library-backed calls of its comparison, recorded without
changing their arithmetic, replayed on integer-built inputs under the pins, and a set whose census hashes
differently here is not compared exactly against its committed files."""

import json
import subprocess
import sys

import helpers
import pytest
import torch
from fallback import Comparison
from helpers import PARITY_SCRIPTS, machine_fingerprint, reference_sets, require_avx2

census = helpers.parity_module("census")


def _workload():
    """One of each tracked kind, through the composite ops the engines call (GRU, linear, conv, stft, SDPA)."""
    torch.manual_seed(0)
    gru = torch.nn.GRU(24, 16, batch_first=True, bidirectional=True)
    x = torch.randn(2, 30, 24)
    with torch.inference_mode():
        return [gru(x)[0], torch.nn.functional.linear(x, torch.randn(20, 24), torch.randn(20)),
                torch.nn.functional.conv1d(x.transpose(1, 2), torch.randn(8, 24, 3), dilation=2),
                torch.stft(x.reshape(2, -1), 256, 64, window=torch.hann_window(256), return_complex=True).abs(),
                torch.nn.functional.scaled_dot_product_attention(*torch.randn(3, 1, 2, 9, 8).unbind(0),
                                                                 is_causal=True)]


def test_recording_leaves_the_arithmetic_alone():
    """The profiler observes; a Python dispatch mode would not do: GRU rounds differently under one."""
    plain = _workload()
    calls = set()
    with census.recording(calls):
        recorded = _workload()
    assert all(torch.equal(a, b) for a, b in zip(plain, recorded, strict=True))
    ops = {json.loads(key)[0].split(".")[0] for key in calls}
    assert {"addmm", "convolution", "_fft_r2c", "_scaled_dot_product_flash_attention_for_cpu"} <= ops


def _write_census(folder, calls):
    """census.json for `calls`, hashed by the writer's own child process under the pins."""
    folder.mkdir(parents=True, exist_ok=True)
    keys = folder / "calls.json"
    keys.write_text(json.dumps(sorted(calls)))
    done = subprocess.run([sys.executable, str(PARITY_SCRIPTS / "census.py"), "replay-files", str(keys)],
                          capture_output=True, text=True, check=True)
    hashes = json.loads(done.stdout.strip().splitlines()[-1])
    (folder / census.CENSUS_FILE).write_text(json.dumps({"fingerprint": machine_fingerprint()["id"],
                                                         "calls": hashes}))
    return hashes


def test_a_census_replays_identically_here_and_sees_other_gemm_code(tmp_path):
    require_avx2()
    calls = set()
    with census.recording(calls):
        _workload()
    hashes = _write_census(tmp_path / "toy", calls)
    assert len(hashes) == len(calls) and census.moved({"toy": tmp_path / "toy"}) == {"toy": 0}
    # MKL's own GEMM code for this CPU stands in for a machine whose GEMMs round otherwise
    lifted = {**reference_sets().pinned_env(), "FINGERPRINT_LIFTED": "MKL_CBWR"}
    lifted.pop("MKL_CBWR")
    moved = census.moved({"toy": tmp_path / "toy"}, env=lifted)["toy"]
    if moved == 0:
        pytest.skip("MKL runs its compatible GEMM code on this CPU without the pin too")
    assert 0 < moved <= len(hashes)


def test_every_set_with_floats_has_a_census_at_its_fingerprint():
    sets = reference_sets()
    for name, spec in sets.SETS.items():
        recorded = census.read(spec.committed)
        if not spec.floats or name in census.PENDING:
            continue
        assert recorded is not None, f"{name}: no census.json (python scripts/parity/census.py write)"
        assert recorded["fingerprint"] == sets.recorded_fingerprint(spec.committed)["id"], name
        assert recorded["calls"], name
    assert set(census.PENDING) <= set(sets.SETS)


def test_a_set_whose_census_moved_is_not_compared_exactly(monkeypatch):
    sets = reference_sets()
    if not sets.same_floats(sets.recorded_fingerprint(sets.SETS["dummy"].committed), machine_fingerprint()):
        pytest.skip("the dummy set is another machine's floats here already")
    monkeypatch.setattr(helpers, "census_moves", lambda: {"dummy": 3})
    comparison = Comparison.for_folder("dummy", sets.SETS["dummy"].committed)
    assert not comparison.exact and "3 calls of the set's census" in comparison.why
    monkeypatch.setattr(helpers, "census_moves", lambda: {"f5tts": 1})  # a PyPI set: written here instead
    assert helpers.writers_floats("f5tts", sets.SETS["f5tts"].committed)[0] is False
