"""graphs: usable, signature, LayerSteps (eager, and with graphs emulated on the CPU), Graphs.capture's
control flow and failure handling on a fake torch.cuda, and the real thing on CUDA (marked gpu)."""

import importlib.util
import logging
import os
import subprocess
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pytest
import torch
from helpers import EmulatedGraphs
from torch import nn

from mizuoto.runtime import graphs as graphs_mod
from mizuoto.runtime.graphs import DecoderSteps, Graph, Graphs, LayerSteps, signature, usable

REPO = Path(__file__).resolve().parents[2]
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _load_check():
    # The toy stack and the GPU checks live in scripts/graphs_check.py; loaded by path (scripts/ is no package).
    name = "mizuoto_graphs_check"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / "graphs_check.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


check = _load_check()
SMALL = {"vocab": 64, "dim": 32, "heads": 2, "layers": 3}


# ---------------------------------------------------------------------------------------------------
# usable, signature


def test_usable_only_for_nvidia_cuda_with_the_option_on(monkeypatch):
    assert not usable("cpu", True) and not usable(None, True) and not usable(torch.device("meta"), True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.version, "hip", None)
    assert usable("cuda", True) and usable(torch.device("cuda", 1), True)
    assert not usable("cuda", False) and not usable("cpu", True)
    monkeypatch.setattr(torch.version, "hip", "6.2.41133")
    assert not usable("cuda", True)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not usable("cuda", True)


def test_signature_follows_weight_addresses():
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    first = signature(model)
    assert signature(model) == first == signature([model])
    assert len(first) == 2 + 2 + 3  # linear weight, bias; norm weight, bias, and its three buffers
    with torch.no_grad():
        model[0].weight.add_(1)  # in place: same address, and the graphs see the new values
    assert signature(model) == first
    model[0].weight = nn.Parameter(model[0].weight.detach().clone())
    replaced = signature(model)
    assert replaced != first
    assert signature(model.to(torch.float64)) != replaced
    assert signature(model.to("meta")) != replaced
    assert signature([nn.Linear(4, 4), model]) != signature(model)


# ---------------------------------------------------------------------------------------------------
# LayerSteps without graphs: the stack's own forward, bit for bit


def test_eager_layer_steps_match_the_stack_bit_for_bit():
    stack = check.make_stack("cpu", **SMALL)
    generator = torch.Generator().manual_seed(0)
    stack.generator = lambda: generator
    with torch.inference_mode():
        stepped = check.decode(stack, LayerSteps(stack.layers, stack.embed, stack.head), steps=6)
        state = generator.get_state()
        generator.manual_seed(0)
        direct = check.decode(stack, stack, steps=6)
    assert torch.equal(stepped[0], direct[0]) and torch.equal(stepped[1], direct[1])
    assert torch.equal(state, generator.get_state())
    assert stepped[0].shape == (2, 6) and stepped[1].shape == (6, 2, 1, 64)


def test_decoder_steps_use_the_decoder_protocol():
    calls = []

    class Layer:
        def __init__(self, i):
            self.i = i

        def before(self, x, pos):
            calls.append(("before", self.i))
            return x * 2, x, x, x + pos

        def attend(self, q, k, v, index):
            calls.append(("attend", self.i, index))
            return q + k + v

        def after(self, a, residual):
            calls.append(("after", self.i))
            return a + residual

    class Decoder:
        layers = [Layer(0), Layer(1)]

        def embed(self, tokens):
            calls.append(("embed",))
            return tokens.float()

        def finish(self, x):
            calls.append(("finish",))
            return x / 2

    decoder = Decoder()
    tokens, pos = torch.tensor([[3]]), torch.tensor([[1.0]])
    # 3 → before: q 6, k 3, v 3, residual 4 → attend 12 → after 16 → 32, 16, 16, 17 → 64 → 81 → finish 40.5
    assert DecoderSteps(decoder)(tokens, pos, 5).item() == 40.5
    assert calls == [("embed",), ("before", 0), ("attend", 0, 5), ("after", 0), ("before", 1), ("attend", 1, 5),
                     ("after", 1), ("finish",)]
    assert DecoderSteps(decoder, head=lambda x: x + 1)(tokens, pos, 5).item() == 41.5
    assert DecoderSteps(decoder, embed=lambda t: t.float() + 1)(tokens, pos, 5).item() == 53.0  # 4 → 21 → 106


# ---------------------------------------------------------------------------------------------------
# LayerSteps with graphs emulated on the CPU: a "graph" reruns its function into the tensors the
# capture returned, reading its inputs from the tensors it was captured with, as a replay does. This
# checks the static buffers, the wiring between segments, recapture and the fallbacks.


def eager_reference(stack, seed, steps, batch=2):
    generator = torch.Generator().manual_seed(seed)
    stack.generator = lambda: generator
    with torch.inference_mode():
        tokens, logits = check.decode(stack, stack, steps, batch)
    return tokens, logits, generator.get_state()


def graphed(stack, graphs, seed, steps, layer_steps=None, batch=2):
    generator = torch.Generator().manual_seed(seed)
    stack.generator = lambda: graphs.generator
    layer_steps = layer_steps or LayerSteps(stack.layers, stack.embed, stack.head, graphs)
    with torch.inference_mode(), graphs.drawing(generator):
        tokens, logits = check.decode(stack, layer_steps, steps, batch)
    return (tokens, logits, generator.get_state()), layer_steps


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_emulated_graphs_match_eager_and_capture_once_per_shape():
    stack = check.make_stack("cpu", **SMALL)
    graphs = EmulatedGraphs()
    result, steps = graphed(stack, graphs, 11, 6)
    assert same(result, eager_reference(stack, 11, 6))
    segments = len(stack.layers) + 1
    assert graphs.captures == segments
    (run,) = steps._runs.values()
    assert [g.graph.replays for g in run.graphs] == [6] * segments
    result, _ = graphed(stack, graphs, 12, 5, steps)  # replays only, another seed
    assert graphs.captures == segments and same(result, eager_reference(stack, 12, 5))
    result, _ = graphed(stack, graphs, 13, 3, steps, batch=3)  # new shapes: captured again
    assert graphs.captures == 2 * segments and len(steps._runs) == 2
    assert same(result, eager_reference(stack, 13, 3, batch=3))


def test_pos_may_be_a_tuple_and_state_is_restored_after_the_warm_up():
    counter = torch.zeros(1)

    class Layer:
        def before(self, x, pos):
            cos, sin = pos
            counter.add_(1)  # changed in place by the segments: listed in state
            return x * cos, x * sin, x, x

        def attend(self, q, k, v, index):
            return q + k * index + v

        def after(self, a, residual):
            return a - residual

    steps = LayerSteps([Layer(), Layer()], lambda t: t * 1.0, lambda x: x + counter, EmulatedGraphs(), [counter])
    eager = LayerSteps(steps.layers, steps.head_in, steps.head_out)
    with torch.inference_mode():
        for i in range(3):
            pos = (torch.full((1, 2), 0.5 + i), torch.full((1, 2), 2.0 - i))
            x = torch.arange(2.0)[None] + i
            before = counter.clone()
            want = eager(x, pos, i).clone()
            counter.copy_(before)
            assert torch.equal(steps(x, pos, i), want)
            assert torch.equal(counter, before + 2)


def test_a_failed_capture_finishes_the_step_eagerly_and_stays_eager():
    stack = check.make_stack("cpu", **SMALL)
    graphs = EmulatedGraphs(fail={3})  # segment 2 of 4
    result, steps = graphed(stack, graphs, 21, 5)
    assert same(result, eager_reference(stack, 21, 5))
    assert graphs.captures == 3 and graphs.epoch == 1
    assert list(steps._runs.values()) == [None]
    result, _ = graphed(stack, graphs, 22, 4, steps)
    assert graphs.captures == 3 and same(result, eager_reference(stack, 22, 4))


def test_graphs_of_a_replaced_generator_are_captured_again():
    stack = check.make_stack("cpu", **SMALL)
    graphs = EmulatedGraphs()
    _, steps = graphed(stack, graphs, 31, 2)
    (old,) = steps._runs.values()
    graphs.replace_generator()  # another LayerSteps on these graphs failed a capture
    result, _ = graphed(stack, graphs, 32, 4, steps)
    (new,) = steps._runs.values()
    assert new is not old and new.epoch == 1 and graphs.captures == 2 * (len(stack.layers) + 1)
    assert same(result, eager_reference(stack, 32, 4))


def test_no_graphs_while_autograd_records():
    stack = check.make_stack("cpu", **SMALL)
    graphs = EmulatedGraphs()
    steps = LayerSteps(stack.layers, stack.embed, stack.head, graphs)
    stack.generator = lambda: graphs.generator
    stack.reset(1, 2)
    with torch.enable_grad():
        tokens, logits = steps(torch.tensor([[1]]), torch.zeros(1, 1, dtype=torch.long), 0)
    assert graphs.captures == 0 and logits.requires_grad


def test_drawing_loads_and_writes_back_the_request_state():
    graphs = EmulatedGraphs()
    request = torch.Generator().manual_seed(5)
    expected = torch.Generator().manual_seed(5)
    with pytest.raises(RuntimeError), graphs.drawing(request):
        drawn = torch.rand(3, generator=graphs.generator)
        raise RuntimeError("the step failed")
    assert torch.equal(drawn, torch.rand(3, generator=expected))
    assert torch.equal(request.get_state(), expected.get_state())  # written back even so
    with graphs.drawing(None):
        torch.rand(1, generator=graphs.generator)
    assert torch.equal(request.get_state(), expected.get_state())


# ---------------------------------------------------------------------------------------------------
# Graphs.capture on a fake torch.cuda: the order of the CUDA calls, and the failure handling.


class FakeCuda:
    """Records what Graphs does with streams, graphs and the allocator."""

    def __init__(self, monkeypatch, fail_end=None, fail_begin=None):
        self.events, self.capturing, self.on_capture_stream = [], False, False
        self.fail_end, self.fail_begin = fail_end, fail_begin
        fake = self

        class Stream:
            def __init__(self, device=None, name="capture"):
                self.name = name

            def wait_stream(self, other):
                fake.events.append(f"{self.name} waits {other.name}")

        class CUDAGraph:
            def register_generator_state(self, generator):
                fake.events.append("register")
                fake.registered = generator

            def capture_begin(self, pool=None, capture_error_mode="global"):
                fake.events.append(f"begin pool={pool} mode={capture_error_mode}")
                if fake.fail_begin:
                    raise fake.fail_begin
                fake.capturing = True

            def capture_end(self):
                if not fake.capturing:
                    raise RuntimeError("not capturing")
                fake.capturing = False
                fake.events.append("end")
                if fake.fail_end:
                    raise fake.fail_end

        @contextmanager
        def stream(s):
            fake.on_capture_stream = True
            yield
            fake.on_capture_stream = False

        pools = iter(range(7, 100))
        self.current = Stream(name="current")
        for name, value in {"Stream": Stream, "CUDAGraph": CUDAGraph, "stream": stream,
                            "device": lambda device: nullcontext(), "current_stream": lambda device=None: self.current,
                            "graph_pool_handle": lambda: (0, next(pools)), "current_device": lambda: 0,
                            "is_current_stream_capturing": lambda: self.capturing}.items():
            monkeypatch.setattr(torch.cuda, name, value)
        monkeypatch.setattr(graphs_mod, "_end_allocation", self.end_allocation)
        monkeypatch.setattr(graphs_mod, "_release_pool", lambda device, pool: self.events.append(f"release {pool}"))
        monkeypatch.setattr(CpuGraphs, "_settle", lambda graphs: self.events.append("settle"))
        self.routed = True  # whether the fake allocator still routes to the pool when asked to stop

    def end_allocation(self, device, pool):
        self.events.append(f"end allocation {pool}")
        return self.routed


class CpuGraphs(Graphs):
    def _new_generator(self):
        return torch.Generator()


@pytest.fixture
def fake_cuda(monkeypatch):
    graphs_mod._warned.clear()
    return lambda **kwargs: FakeCuda(monkeypatch, **kwargs)


def draws(graphs, log, state):
    """A step function: changes `state` in place and draws from the graphs' generator."""
    def fn():
        log.append(torch.rand(2, generator=graphs.generator))
        state.add_(1)
        return state * 2
    return fn


def test_graphs_need_a_cuda_device():
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device, got cpu"):
        Graphs("cpu")


def test_capture_warms_up_restores_then_captures_on_its_stream(fake_cuda):
    fake = fake_cuda()
    graphs = CpuGraphs("cuda:0")
    assert graphs.device == torch.device("cuda", 0) and graphs.pool == (0, 7)
    state, log = torch.zeros(2), []
    graphs.generator.manual_seed(3)
    expected = torch.rand(2, generator=torch.Generator().manual_seed(3))
    graph = graphs.capture(draws(graphs, log, state), [state])
    assert isinstance(graph, Graph) and graph.epoch == 0
    assert fake.events == ["capture waits current", "register", "begin pool=(0, 7) mode=thread_local", "end",
                           "current waits capture"]
    assert fake.registered is graphs.generator
    # The warm-up and the fake capture each ran fn (a real capture runs nothing): the capture started
    # from the state and generator the warm-up had found, and its outputs are the graph's.
    assert len(log) == 2 and torch.equal(log[0], expected) and torch.equal(log[1], expected)
    assert torch.equal(graph.outputs, torch.full((2,), 2.0))
    assert not fake.on_capture_stream and not fake.capturing
    graphs.capture(lambda: None, pool=(5, 0))
    assert "begin pool=(5, 0) mode=thread_local" in fake.events


def test_an_invalidated_capture_is_ended_logged_once_and_replaced(fake_cuda, caplog):
    fake = fake_cuda(fail_end=RuntimeError("CUDA error: operation not permitted when stream is capturing"))
    graphs = CpuGraphs("cuda:0")
    graphs.generator.manual_seed(4)
    old, before = graphs.generator, graphs.generator.get_state()
    state, log = torch.zeros(2), []
    with caplog.at_level(logging.WARNING, logger="mizuoto.graphs"):
        assert graphs.capture(draws(graphs, log, state), [state]) is None
        assert graphs.capture(draws(graphs, log, state), [state]) is None
    assert fake.events[:8] == ["capture waits current", "register", "begin pool=(0, 7) mode=thread_local", "end",
                               "end allocation (0, 7)", "release (0, 7)", "settle", "current waits capture"]
    # the released pool is never begun again: the next capture takes a new one
    assert "begin pool=(0, 8) mode=thread_local" in fake.events[8:] and graphs.pool == (0, 9)
    assert not fake.capturing
    assert graphs.generator is not old and graphs.epoch == 2
    assert torch.equal(graphs.generator.get_state(), before)  # same state: the caller goes on eagerly
    (record,) = [r for r in caplog.records if r.name == "mizuoto.graphs"]
    assert "operation not permitted" in record.getMessage() and "RuntimeError" in record.getMessage()


def test_a_pool_the_caller_gave_is_not_released(fake_cuda):
    fake = fake_cuda(fail_end=RuntimeError("CUDA error: operation failed due to a previous error during capture"))
    graphs = CpuGraphs("cuda:0")
    assert graphs.capture(lambda: None, pool=(3, 0)) is None
    assert "end allocation (3, 0)" in fake.events and not any(e.startswith("release") for e in fake.events)
    assert graphs.pool == (0, 7)


def test_a_python_error_during_capture_ends_a_whole_graph_and_discards_it(fake_cuda):
    fake = fake_cuda()
    graphs = CpuGraphs("cuda:0")
    calls = []

    def fn():
        calls.append(torch.cuda.is_current_stream_capturing())
        if calls[-1]:
            raise TypeError("unsupported in capture")

    assert graphs.capture(fn) is None
    assert "end" in fake.events and "end allocation (0, 7)" not in fake.events and "settle" not in fake.events
    assert graphs.epoch == 1 and calls == [False, True]


def test_a_failed_begin_stops_the_routing_it_started(fake_cuda):
    fake = fake_cuda(fail_begin=RuntimeError("CUDA error: capture already underway"))
    fake.routed = False  # it failed before routing: nothing to end, nothing to release
    graphs = CpuGraphs("cuda:0")
    assert graphs.capture(lambda: None) is None
    assert "end allocation (0, 7)" in fake.events and not any(e.startswith("release") for e in fake.events)
    assert "end" not in fake.events and graphs.epoch == 1


@pytest.mark.parametrize("exc", [torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB"),
                                 KeyboardInterrupt()])
def test_out_of_memory_and_interrupts_raise_after_cleaning_up(fake_cuda, caplog, exc):
    fake = fake_cuda()
    graphs = CpuGraphs("cuda:0")
    old = graphs.generator

    def fn():
        if torch.cuda.is_current_stream_capturing():
            raise exc

    with caplog.at_level(logging.WARNING, logger="mizuoto.graphs"), pytest.raises(type(exc)):
        graphs.capture(fn)
    assert not fake.capturing and fake.events[-1] == "current waits capture"
    assert graphs.generator is not old and graphs.epoch == 1
    assert not [r for r in caplog.records if r.name == "mizuoto.graphs"]


def test_an_error_in_the_warm_up_propagates_with_state_restored(fake_cuda):
    fake = fake_cuda()
    graphs = CpuGraphs("cuda:0")
    state = torch.zeros(3)

    def fn():
        state.add_(1)
        raise ValueError("a bug in the step")

    with pytest.raises(ValueError):
        graphs.capture(fn, [state])
    assert torch.equal(state, torch.zeros(3)) and graphs.epoch == 0
    assert fake.events == ["capture waits current", "current waits capture"]


# ---------------------------------------------------------------------------------------------------
# The real thing (scripts/graphs_check.py holds the checks; run it on a GPU machine for the speed).


def test_graphs_check_script_runs_on_this_machine(tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "graphs_check.py"), "--quick"], capture_output=True,
                         text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "0 failure(s)" in out.stdout


@pytest.mark.gpu
@CUDA
def test_graphs_bit_identical_to_eager_with_sampling_inside():
    assert check.check_identical(torch.device("cuda", 0)) == []


@pytest.mark.gpu
@CUDA
def test_a_failed_capture_is_still_bit_identical_and_leaves_cuda_usable():
    assert check.check_failed_capture(torch.device("cuda", 0)) == []


@pytest.mark.gpu
@CUDA
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_model_on_another_gpu_than_the_current_one():
    assert check.check_other_device() == []


@pytest.mark.gpu
@CUDA
def test_the_same_under_cuda_malloc_async(tmp_path):
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=check.ASYNC_ALLOCATOR)
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "graphs_check.py"), "--quick"], capture_output=True,
                         text=True, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "allocator cudaMallocAsync" in out.stdout and "0 failure(s)" in out.stdout
