"""The dummy engine's code decoder against transformers' own Qwen3 (tests/parity/data/dummy): the first user of
tests/fallback.py. What is compared, in which mode, and why the tolerance is what it is: tests/dummy_parity.py."""

import json

from dummy_parity import TOLERANCE, run_and_compare
from fallback import Comparison
from helpers import reference_sets


def test_decoder_matches_upstream_qwen3(tmp_path, record_property):
    comparison = run_and_compare(reference_sets().SETS["dummy"].committed, tmp_path, Comparison.for_set("dummy"))
    record_property("parity_mode", comparison.mode)
    print(f"dummy parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")
    assert len(comparison.checked) >= 4


def test_the_set_records_its_spread_and_upstream():
    info = json.loads((reference_sets().SETS["dummy"].committed / "references.json").read_text())
    assert info["upstream"]["transformers"] == "4.57.3"
    assert max(info["spread"]["max"].values()) * 5 < TOLERANCE  # the stated tolerance is the measured one's


def test_a_probe_that_moved_turns_exact_mode_off():
    """A fingerprint that names the writer's floats can still miss an op at some size: a probe that differs within
    its tolerance says so and the set is compared as on another machine from there on; over it, it fails."""
    import pytest
    import torch

    theirs = torch.linspace(-1, 1, 64)
    comparison = Comparison("probe-demo", True, "fingerprint f is the writer's")
    comparison.probe("same bits", theirs.clone(), theirs, 1e-3)
    assert comparison.exact
    comparison.probe("one ulp off", theirs + 1e-6, theirs, 1e-3)
    assert not comparison.exact and "one ulp off moved" in comparison.why
    assert not comparison.free_running("tokens", torch.tensor([1]), torch.tensor([2]))  # not compared now
    with pytest.raises(AssertionError, match="over the tolerance"):
        Comparison("probe-demo", True, "").probe("a bug", theirs + 0.1, theirs, 1e-3)
