import subprocess
import sys
import threading

import pytest
import torch

from mizuoto.core.errors import Cancelled, InputError
from mizuoto.runtime.context import ACCEL, SEED_MAX, RequestContext, current_accel


def test_generator_matches_manual_seed_and_leaves_global_state_alone():
    before = torch.get_rng_state()
    ctx = RequestContext(seed=1234)
    ours = torch.rand(5, generator=ctx.generator_for("cpu"))
    assert torch.equal(torch.get_rng_state(), before)
    reference = torch.Generator().manual_seed(1234)
    assert torch.equal(ours, torch.rand(5, generator=reference))
    # One generator per device for the request: a second call continues the same stream.
    assert ctx.generator_for(torch.device("cpu")) is ctx.generator_for("cpu")


@pytest.mark.parametrize("seed", [0, 1, 2**63, SEED_MAX])
def test_full_seed_range(seed):
    RequestContext(seed).generator_for("cpu")


@pytest.mark.parametrize("seed", [-1, SEED_MAX + 1, 1.5, "7", True])
def test_bad_seeds(seed):
    with pytest.raises(InputError, match="seed must be an integer"):
        RequestContext(seed)


def test_fresh_seed_when_none():
    assert RequestContext().seed != RequestContext().seed


def test_step_binds_policy_only_inside_and_only_in_this_thread():
    policy = object()
    ctx = RequestContext(0, accel=policy)
    seen = {}

    def other():
        seen["other"] = current_accel()

    with ctx.step():
        assert ACCEL.get() is policy
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert current_accel() is None
    assert seen["other"] is None


def test_cancel_stops_the_next_step():
    ctx = RequestContext(0)
    with ctx.step():
        pass
    ctx.cancel()
    assert ctx.cancelled
    with pytest.raises(Cancelled):
        with ctx.step():
            pass


def test_importing_context_does_not_import_torch():
    code = "import sys, mizuoto.runtime.context; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
