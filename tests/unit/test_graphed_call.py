"""GraphedCall: a whole computation replayed as one graph per input signature, with eager code's draws
(emulated on the CPU by helpers.EmulatedGraphs; scripts/gpu_check.py replays it on a real GPU)."""

import torch
from helpers import EmulatedGraphs

from mizuoto.runtime.graphs import GraphedCall


def solve(x, scale, generator, steps=2, gain=1.0):
    for _ in range(steps):
        x = x * scale + gain * torch.randn(x.shape, generator=generator)
    return x


def test_replays_give_eager_values_and_advance_the_generator_as_eager_code():
    graphs = EmulatedGraphs()
    call = GraphedCall(solve, graphs)
    eager_generator, graphed_generator = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    with torch.inference_mode():
        for n in range(4):
            x, scale = torch.full((3, 4), float(n)), torch.tensor(0.5 + n)
            want = solve(x, scale, eager_generator, steps=3)
            got = call((x, scale), graphed_generator, steps=3)
            assert torch.equal(got, want)
    assert torch.equal(graphed_generator.get_state(), eager_generator.get_state())
    assert graphs.captures == 1  # one signature, captured once, then replayed


def test_each_signature_is_its_own_graph_and_a_failed_capture_stays_eager():
    graphs = EmulatedGraphs(fail={2})
    call = GraphedCall(solve, graphs)
    g = torch.Generator().manual_seed(1)
    with torch.inference_mode():
        call((torch.ones(2), torch.tensor(2.0)), g, steps=1)
        call((torch.ones(2), torch.tensor(2.0)), g, steps=2)  # other options: capture 2, which fails
        call((torch.ones(2), torch.tensor(2.0)), g, steps=2)  # eager from then on
        call((torch.ones(3), torch.tensor(2.0)), g, steps=1)  # other shapes: capture 3
        reference = torch.Generator().manual_seed(1)
        for steps, size in ((1, 2), (2, 2), (2, 2), (1, 3)):
            solve(torch.ones(size), torch.tensor(2.0), reference, steps=steps)
    assert graphs.captures == 3
    assert torch.equal(g.get_state(), reference.get_state())


def test_without_graphs_or_under_autograd_it_is_the_function():
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    assert torch.equal(GraphedCall(solve, None)((torch.ones(2), torch.tensor(1.0)), g1),
                       solve(torch.ones(2), torch.tensor(1.0), g2))
    graphs = EmulatedGraphs()
    GraphedCall(solve, graphs)((torch.ones(2), torch.tensor(1.0)), g1)  # grad mode on: no capture
    assert graphs.captures == 0


def test_a_replay_counts_the_attention_its_capture_ran_and_another_policy_captures_anew():
    from mizuoto.runtime import accel
    from mizuoto.runtime.context import RequestContext

    site = accel.Site("test.graphed_call")

    def attend(x, generator):
        q = x.reshape(1, 1, 2, 2)
        return accel.attention(q, q, q, site=site).reshape(x.shape)

    graphs = EmulatedGraphs()
    call = GraphedCall(attend, graphs)
    x, g = torch.ones(4), torch.Generator()
    with torch.inference_mode():
        want = attend(x, g)
        for name, captures in (("math", 1), ("math", 1), ("fast", 2)):
            run = accel.policy_for(name).start()
            with RequestContext(0, accel=run).step():
                assert torch.equal(call((x,), g), want)
            assert sum(run.used.values()) == 1, run.used  # one call, not the capture's warm-up and capture
            assert graphs.captures == captures
        assert torch.equal(call((x,), g), want) and graphs.captures == 3  # auto: no policy bound, its own graph
