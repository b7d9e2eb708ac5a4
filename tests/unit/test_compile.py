"""compile.Compiled and compile_module: a real compile on the CPU, and every way back to eager."""

import logging
import threading
import time

import pytest
import torch
from torch import nn

from mizuoto.core.errors import Cancelled
from mizuoto.runtime import compile as compile_mod
from mizuoto.runtime.accel import AccelPolicy, AccelRun
from mizuoto.runtime.compile import EAGER_DEVICES, Compiled, compile_module
from mizuoto.runtime.context import ACCEL

# Importing Inductor on torch 2.13 warns once per method of torch.utils.mkldnn: torch's own deprecation.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")

# Inductor fuses and reorders float operations: compiled fp32 results are close, not identical.
TOLERANCE = 1e-5


def mlp():
    generator = torch.Generator().manual_seed(0)
    module = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8)).eval()
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=generator))
    return module


@pytest.fixture(scope="module")
def compiled_mlp():
    """One real compile for the module (10-40 s on a cold Inductor cache)."""
    module = mlp()
    compiled = Compiled(module, "test.mlp")
    inputs = [torch.randn(n, 8, generator=torch.Generator().manual_seed(n)) for n in (3, 5, 7)]
    with torch.no_grad():
        outputs = [compiled(x) for x in inputs]
    return module, compiled, inputs, outputs


def test_real_compile_matches_eager_within_tolerance(compiled_mlp):
    module, compiled, inputs, outputs = compiled_mlp
    assert compiled._compiled is not None and not compiled.eager
    with torch.no_grad():
        for x, out in zip(inputs, outputs, strict=True):
            assert (out - module(x)).abs().max().item() <= TOLERANCE


def test_compiled_is_a_plain_attribute(compiled_mlp):
    module, compiled, _, _ = compiled_mlp
    holder = nn.Module()
    holder.mlp = module
    keys = list(holder.state_dict())
    holder.compiled = compiled
    assert list(holder.state_dict()) == keys
    assert "compiled" not in holder._modules and not isinstance(compiled, nn.Module)
    assert [name for name, _ in holder.named_modules()] == ["", "mlp", "mlp.0", "mlp.1", "mlp.2"]


class FakeCompiled:
    """What a patched torch.compile returns: records calls and the binding, then does `action`."""

    def __init__(self, module, action=None):
        self.module, self.action, self.calls, self.bound = module, action, 0, []

    def __call__(self, *args):
        self.calls += 1
        self.bound.append(ACCEL.get())
        if self.action is not None:
            self.action()
        return self.module(*args)


@pytest.fixture
def fake_compile(monkeypatch):
    made = []

    def install(action=None):
        def fake(module, dynamic=None):
            assert dynamic is True
            made.append(FakeCompiled(module, action))
            return made[-1]
        monkeypatch.setattr(torch, "compile", fake)
        return made
    return install


def raiser(exc):
    def action():
        raise exc
    return action


def warnings_from(caplog):
    return [r for r in caplog.records if r.name == "mizuoto.compile" and r.levelno == logging.WARNING]


@pytest.mark.parametrize("where", ["run", "compile"])
def test_a_failure_goes_eager_for_good_with_one_warning(fake_compile, monkeypatch, caplog, where):
    module = mlp()
    if where == "run":
        made = fake_compile(raiser(RuntimeError("C++ compile error: no compiler")))
    else:
        made = []

        def unsupported(module, dynamic=None):
            raise RuntimeError("Dynamo is not supported on this Python")
        monkeypatch.setattr(torch, "compile", unsupported)
    compiled = Compiled(module, "test.failing")
    x = torch.randn(4, 8)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="mizuoto.compile"):
        first = compiled(x)
        second = compiled(x)
    assert compiled.eager
    assert torch.equal(first, module(x)) and torch.equal(second, module(x))
    (record,) = warnings_from(caplog)
    assert "test.failing" in record.getMessage() and "RuntimeError" in record.getMessage()
    assert sum(f.calls for f in made) == (1 if where == "run" else 0)  # never tried again


@pytest.mark.parametrize("exc", [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"),
                                 RuntimeError("HIP out of memory"), Cancelled("cancelled"), KeyboardInterrupt()])
def test_out_of_memory_and_cancellation_propagate(fake_compile, caplog, exc):
    fake_compile(raiser(exc))
    compiled = Compiled(mlp(), "test.oom")
    with caplog.at_level(logging.WARNING, logger="mizuoto.compile"), pytest.raises(type(exc)):
        compiled(torch.randn(2, 8))
    assert not compiled.eager and not warnings_from(caplog)


def test_a_bad_call_raises_and_keeps_compiling(fake_compile, caplog):
    made = fake_compile()
    compiled = Compiled(mlp(), "test.bad_input")
    with caplog.at_level(logging.WARNING, logger="mizuoto.compile"), pytest.raises(RuntimeError):
        compiled(torch.randn(2, 5))  # wrong width: eager raises too, so the compiler is not to blame
    assert not compiled.eager and not warnings_from(caplog)
    compiled(torch.randn(2, 8))
    assert made[0].calls == 2


def test_binds_the_policy_run_while_running(fake_compile):
    made = fake_compile()
    compiled = Compiled(mlp(), "test.policy", policy=AccelPolicy("fast"))
    outer = object()
    token = ACCEL.set(outer)
    try:
        with torch.no_grad():
            compiled(torch.randn(2, 8))
            compiled(torch.randn(3, 8))
        assert ACCEL.get() is outer
    finally:
        ACCEL.reset(token)
    run = compiled.trace_run
    assert isinstance(run, AccelRun) and run.policy.name == "fast"
    assert made[0].bound == [run, run]  # the same trace run every call, never the caller's binding


def test_auto_policy_binds_nothing_and_takes_no_lock(fake_compile):
    made = fake_compile()
    compiled = Compiled(mlp(), "test.auto", policy=AccelPolicy("auto"))
    token = ACCEL.set(object())
    try:
        with torch.no_grad():
            compiled(torch.randn(2, 8))
    finally:
        ACCEL.reset(token)
    assert compiled.trace_run is None and made[0].bound == [None]
    assert not isinstance(compiled._lock, type(threading.Lock()))


def test_non_auto_policy_runs_one_call_at_a_time(fake_compile):
    active, peak = [0], [0]

    def slow():
        active[0] += 1
        peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        active[0] -= 1

    fake_compile(slow)
    compiled = Compiled(mlp(), "test.lock", policy=AccelPolicy("fast"))
    threads = [threading.Thread(target=compiled, args=(torch.randn(2, 8),)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 1


def test_compile_module_none_when_off_or_on_an_eager_device():
    module = mlp()
    assert EAGER_DEVICES == ("mps",)
    assert compile_module(module, False, "test.off") is None
    assert compile_module(module, True, "test.mps", device="mps") is None
    assert compile_module(module, True, "test.mps", device=torch.device("mps", 0)) is None
    made = compile_module(module, True, "test.cpu", device="cpu")
    assert isinstance(made, Compiled) and made.module is module and made.name == "test.cpu"
    assert isinstance(compile_module(module, True, "test.inferred"), Compiled)  # device from its parameters
    assert isinstance(compile_module(nn.GELU(), True, "test.no_params"), Compiled)


def test_compile_module_passes_the_policy(fake_compile):
    fake_compile()
    made = compile_module(mlp(), True, "test.with_policy", policy=AccelPolicy("fast"))
    assert made.trace_run.policy.name == "fast"
    assert compile_mod.compile_module(mlp(), True, "test.auto", policy=None).trace_run is None
