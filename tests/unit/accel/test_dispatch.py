"""The dispatcher: chains, selection caching, fallbacks, OOM, logging, reports, strict, binding."""

import logging
import threading

import pytest
import torch
import torch.nn.functional as F

from mizuoto.core.errors import Cancelled, InputError
from mizuoto.core.settings import POLICY_NAMES
from mizuoto.runtime import accel
from mizuoto.runtime.accel import dispatch, policies, probes
from mizuoto.runtime.accel.backends import REGISTRY, Backend
from mizuoto.runtime.accel.call import Args, Call
from mizuoto.runtime.context import RequestContext

SITE = accel.Site("tests.dispatch.site")
EXACT_SITE = accel.Site("tests.dispatch.exact", approx_ok=False)
PINNED = accel.Site("tests.dispatch.pinned", swappable=False)


def qkv(b=2, h=4, lq=5, lk=7, d=16, hk=None, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, lq, d, generator=g, dtype=dtype)
    k = torch.randn(b, hk or h, lk, d, generator=g, dtype=dtype)
    v = torch.randn(b, hk or h, lk, d, generator=g, dtype=dtype)
    return q, k, v


class Fake(Backend):
    """A CPU backend under test control: counts calls, may raise, computes the exact reference."""

    devices = ("cpu",)

    def __init__(self, name, error=None, reason=None, exact=True):
        self.name, self.error, self.reason, self.exact = name, error, reason, exact
        self.calls = 0

    def constraints(self, call):
        return self.reason

    def run(self, q, k, v, args):
        self.calls += 1
        if self.error is not None:
            raise self.error
        return F.scaled_dot_product_attention(q, k, v, attn_mask=args.mask, is_causal=args.causal,
                                              scale=args.scale, enable_gqa=args.enable_gqa)


@pytest.fixture
def fake(monkeypatch):
    """Install fake backends and a policy naming the first; fresh broken/log state."""
    monkeypatch.setattr(policies, "_broken", {})
    monkeypatch.setattr(policies, "_logged", set())
    probes.forget()
    installed = []

    def install(*backends):
        for backend in backends:
            monkeypatch.setitem(REGISTRY, backend.name, backend)
            # Probed as available: the self-test would otherwise call (and count) the fake.
            probes._cache[(backend.name, "cpu")] = probes.Probe(backend.name, "cpu", True)
            installed.append(backend)
        return backends

    yield install
    probes.forget()


def bound(policy):
    run = policy.start()
    return run, RequestContext(0, accel=run)


def test_policy_names_match_the_settings_list():
    assert accel.policy_names() == POLICY_NAMES


def test_chain_is_named_backend_then_fast_chain():
    assert accel.policy_for("flash").chain()[0] == "flash"
    assert accel.policy_for("flash").chain()[1:] == tuple(n for n in policies.FAST_ORDER if n != "flash")
    assert accel.policy_for("fast").chain() == policies.FAST_ORDER
    assert accel.policy_for("auto").start() is None


def test_policy_objects_are_shared_per_value():
    assert accel.policy_for("fast") is accel.policy_for("fast")
    assert accel.policy_for("fast", strict=True) is not accel.policy_for("fast")
    with pytest.raises(InputError, match="unknown attention policy 'turbo'"):
        accel.policy_for("turbo")


def test_host_policy_reads_comfyui_choice(monkeypatch):
    import sys
    import types

    assert accel.policy_for("host").first is None  # no ComfyUI: behaves like fast
    attention = types.ModuleType("comfy.ldm.modules.attention")

    def attention_sage(*args, **kwargs):
        pass

    attention.optimized_attention = attention_sage
    monkeypatch.setitem(sys.modules, "comfy.ldm.modules.attention", attention)
    assert accel.policy_for("host").chain()[0] == "sage"


def test_named_backend_runs_and_is_counted(fake):
    (one,) = fake(Fake("one"))
    run, ctx = bound(policies.AccelPolicy("one"))
    q, k, v = qkv()
    with ctx.step():
        out = accel.attention(q, k, v, site=SITE)
        accel.attention(q, k, v, site=SITE)
    assert torch.equal(out, F.scaled_dot_product_attention(q, k, v))
    assert one.calls == 2
    assert run.report() == {"policy": "one", "used": {"one": 2}, "fallbacks": {}}
    assert run.warnings() == []


def test_selection_is_cached_per_site_and_call(fake, monkeypatch):
    fake(Fake("one"))
    policy = policies.AccelPolicy("one")
    selections = []
    original = policy._select
    monkeypatch.setattr(policy, "_select", lambda *a: selections.append(a[0]) or original(*a))
    _, ctx = bound(policy)
    with ctx.step():
        for _ in range(5):
            accel.attention(*qkv(), site=SITE)
        accel.attention(*qkv(lq=9), site=SITE)  # other lengths, same kind of call: no new selection
        accel.attention(*qkv(lq=7), site=SITE)  # as many queries as keys: another Call
        accel.attention(*qkv(), site=EXACT_SITE)  # another site
    assert [s.name for s in selections] == ["tests.dispatch.site", "tests.dispatch.site", "tests.dispatch.exact"]
    assert len(policy._selections) == 3


def test_constraint_skip_is_reported_as_fallback(fake):
    fake(Fake("picky", reason="head dim 16"), Fake("second"))
    policy = policies.AccelPolicy("picky")
    policy_chain = ("picky", "second")
    policy.chain = lambda: policy_chain  # type: ignore[method-assign]
    run, ctx = bound(policy)
    with ctx.step():
        accel.attention(*qkv(), site=SITE)
        accel.attention(*qkv(), site=SITE)
    assert run.report() == {"policy": "picky", "used": {"second": 2},
                            "fallbacks": {"picky→second": {"head dim 16": 2}}}
    assert run.warnings() == ["attention fell back picky→second (head dim 16: 2)"]


def test_raising_backend_is_marked_broken_and_next_takes_over(fake, caplog):
    boom, second = fake(Fake("boom", error=RuntimeError("no kernel image")), Fake("second"))
    policy = policies.AccelPolicy("boom")
    policy.chain = lambda: ("boom", "second")  # type: ignore[method-assign]
    run, ctx = bound(policy)
    q, k, v = qkv()
    with caplog.at_level(logging.WARNING, logger="mizuoto.accel"), ctx.step():
        first = accel.attention(q, k, v, site=SITE)
        accel.attention(q, k, v, site=SITE)
        accel.attention(q, k, v, site=SITE)
    assert torch.equal(first, F.scaled_dot_product_attention(q, k, v))
    assert boom.calls == 1  # broken for this kind of call: never tried again
    assert second.calls == 3
    reason = "raised RuntimeError: no kernel image"
    assert run.report()["fallbacks"] == {"boom→second": {reason: 3}}
    assert [r.getMessage() for r in caplog.records].count(
        f"attention site tests.dispatch.site: boom not used ({reason})") == 1
    # Another kind of call still tries it.
    with ctx.step():
        accel.attention(*qkv(d=32), site=SITE)
    assert boom.calls == 2


def test_out_of_memory_and_cancellation_propagate(fake):
    for error in (torch.OutOfMemoryError("CUDA out of memory"), Cancelled("stop")):
        (oom,) = fake(Fake(f"e{id(error)}", error=error))
        policy = policies.AccelPolicy(oom.name)
        policy.chain = lambda name=oom.name: (name,)  # type: ignore[method-assign]
        _, ctx = bound(policy)
        with ctx.step(), pytest.raises(type(error)):
            accel.attention(*qkv(), site=SITE)
        assert policies._broken == {}


def test_everything_skipped_runs_the_reference(fake):
    fake(Fake("picky", reason="nope"))
    policy = policies.AccelPolicy("picky")
    policy.chain = lambda: ("picky",)  # type: ignore[method-assign]
    run, ctx = bound(policy)
    q, k, v = qkv()
    with ctx.step():
        out = accel.attention(q, k, v, site=SITE)
    assert torch.equal(out, F.scaled_dot_product_attention(q, k, v))
    assert run.report()["used"] == {"sdpa": 1} and run.report()["fallbacks"] == {"picky→sdpa": {"nope": 1}}


def test_unswappable_site_always_runs_its_reference(fake):
    (one,) = fake(Fake("one"))
    run, ctx = bound(policies.AccelPolicy("one"))
    with ctx.step():
        accel.attention(*qkv(), site=PINNED)
    assert one.calls == 0 and run.report()["used"] == {"sdpa": 1} and run.report()["fallbacks"] == {}


def test_exact_sites_refuse_approximate_backends(fake):
    fake(Fake("rough", exact=False), Fake("fine"))
    policy = policies.AccelPolicy("rough")
    policy.chain = lambda: ("rough", "fine")  # type: ignore[method-assign]
    run, ctx = bound(policy)
    with ctx.step():
        accel.attention(*qkv(), site=EXACT_SITE)
        accel.attention(*qkv(), site=SITE)
    assert run.report()["used"] == {"fine": 1, "rough": 1}
    assert run.report()["fallbacks"] == {"rough→fine": {"site needs exact attention": 1}}


def test_backward_and_dropout_needs(fake):
    class NoGrad(Fake):
        backward = False

    fake(NoGrad("nograd"), Fake("grad"))
    policy = policies.AccelPolicy("nograd")
    policy.chain = lambda: ("nograd", "grad")  # type: ignore[method-assign]
    run, ctx = bound(policy)
    q, k, v = qkv()
    with ctx.step():
        accel.attention(q.requires_grad_(), k, v, site=SITE).sum().backward()
        with torch.no_grad():
            accel.attention(q, k, v, site=SITE)
    assert run.report()["used"] == {"grad": 1, "nograd": 1}
    assert q.grad is not None


def test_strict_refuses_at_load_and_names_what_to_change():
    with pytest.raises(InputError, match="attention policy 'sdpa_flash' cannot run on cpu: runs on cuda only"):
        accel.policy_for("sdpa_flash", strict=True).check_device(torch.device("cpu"))
    accel.policy_for("sdpa_flash").check_device(torch.device("cpu"))  # not strict: falls through later
    accel.policy_for("cpu_flash", strict=True).check_device(torch.device("cpu"))


def test_non_strict_named_backend_missing_on_device_is_reported():
    run, ctx = bound(accel.policy_for("sdpa_flash"))
    with ctx.step():
        accel.attention(*qkv(), site=SITE)
    report = run.report()
    assert report["used"] == {"cpu_flash": 1}
    assert report["fallbacks"] == {"sdpa_flash→cpu_flash": {"runs on cuda only": 1}}


def test_binding_is_per_thread():
    runs = [policies.AccelPolicy("math").start(), policies.AccelPolicy("cpu_flash").start()]
    barrier = threading.Barrier(2)

    def work(run):
        with RequestContext(0, accel=run).step():
            barrier.wait()
            for _ in range(3):
                accel.attention(*qkv(), site=SITE)
            barrier.wait()

    threads = [threading.Thread(target=work, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert runs[0].report()["used"] == {"math": 3}
    assert runs[1].report()["used"] == {"cpu_flash": 3}


def test_suspended_stream_does_not_leak_its_policy():
    # Two streams interleaved in one thread, each binding its policy around each of its steps only.
    def stream(run, steps):
        ctx = RequestContext(0, accel=run)
        for _ in range(steps):
            with ctx.step():
                accel.attention(*qkv(), site=SITE)
            yield

    a, b = policies.AccelPolicy("math").start(), policies.AccelPolicy("cpu_flash").start()
    sa, sb = stream(a, 3), stream(b, 3)
    for _ in range(3):
        next(sa)
        accel.attention(*qkv(), site=SITE)  # between steps nothing is bound: the reference runs
        next(sb)
    assert a.report()["used"] == {"math": 3} and b.report()["used"] == {"cpu_flash": 3}


def test_process_policy_reaches_other_threads(monkeypatch):
    run = policies.AccelPolicy("math").start()
    monkeypatch.setattr(dispatch, "PROCESS_POLICY", run)
    t = threading.Thread(target=lambda: accel.attention(*qkv(), site=SITE))
    t.start()
    t.join()
    assert run.report()["used"] == {"math": 1}


def test_call_describes_the_call_without_tensor_data():
    q, k, v = qkv(lq=1, lk=9, hk=2, d=80)
    mask = torch.ones(2, 1, 1, 9, dtype=torch.bool)
    info = accel.MaskInfo.from_lengths(torch.tensor([9, 4]), 9, "right", causal=True)
    call = Call.of(q, k, v, Args(mask, False, 0.5, True, 0.0, info), grad_enabled=True)
    assert call == Call(device="cpu", capability=None, dtype="float32", head_dim=80, value_dim=80, gqa=True,
                        single_query=True, equal_lengths=False, long_queries=False, mask="bool",
                        mask_info=("right", True, False), custom_scale=True, causal=False, dropout=False,
                        grad=False, wide_grid=False)
    assert hash(call) == hash(Call.of(*qkv(lq=1, lk=9, hk=2, d=80, seed=5), Args(mask, False, 0.5, True, 0.0, info),
                                      grad_enabled=True))
    additive = torch.zeros(2, 1, 1, 9)
    assert Call.of(q, k, v, Args(additive, False, None, True, 0.1, None), False).mask == "additive"


def test_fallback_report_through_a_real_request():
    from mizuoto.host import load_model, speak

    speech = speak(load_model("dummy", device="cpu", policy="sdpa_flash"), "hi", seed=1)
    attention = speech.report["attention"]
    (calls,) = attention["used"].values()
    assert attention["policy"] == "sdpa_flash" and attention["used"] == {"cpu_flash": calls}
    assert attention["fallbacks"] == {"sdpa_flash→cpu_flash": {"runs on cuda only": calls}}
    assert speech.report["warnings"] == [f"attention fell back sdpa_flash→cpu_flash (runs on cuda only: {calls})"]
    auto = speak(load_model("dummy", device="cpu"), "hi", seed=1).report
    assert auto["attention"] == {"policy": "auto"}


# --------------------------------------------------------------------------------------------------
# The per-call lookup (policies.call_key): a hit is what building the Call would have selected


def recorded_selections(policy, monkeypatch) -> list:
    """(site, Call) of every selection `policy` makes from now on."""
    made = []
    select = policy._select
    monkeypatch.setattr(policy, "_select", lambda site, call, *rest: made.append((site, call))
                        or select(site, call, *rest))
    return made


def test_a_decode_loop_keeps_one_key_and_selects_once(fake, monkeypatch):
    """One query against keys that grow every step: one key, one selection, every call counted."""
    (one,) = fake(Fake("one"))
    policy = policies.AccelPolicy("one")
    selections = recorded_selections(policy, monkeypatch)
    run, ctx = bound(policy)
    with ctx.step():
        for length in range(3, 40):
            accel.attention(*qkv(lq=1, lk=length), site=SITE)
    assert len(selections) == 1 and len(policy._by_key) == 1 and one.calls == 37
    assert run.report() == {"policy": "one", "used": {"one": 37}, "fallbacks": {}}


def test_a_new_kind_of_call_selects_afresh(fake, monkeypatch):
    fake(Fake("one"))
    policy = policies.AccelPolicy("one")
    calls = recorded_selections(policy, monkeypatch)
    _, ctx = bound(policy)
    with ctx.step():
        accel.attention(*qkv(lq=1, lk=5), site=SITE)
        accel.attention(*qkv(lq=1, lk=6), site=SITE)  # the same kind: no selection
        accel.attention(*qkv(lq=5, lk=5), site=SITE)  # as many queries as keys
        accel.attention(*qkv(lq=1, lk=5, hk=2), site=SITE)  # GQA
        accel.attention(*qkv(lq=1, lk=5, dtype=torch.float64), site=SITE)
        accel.attention(*qkv(lq=1, lk=5), site=SITE, mask=torch.ones(1, 5, dtype=torch.bool))
        accel.attention(*qkv(lq=1, lk=5), site=SITE, mask=torch.zeros(1, 5))  # additive
        accel.attention(*qkv(lq=1, lk=5), site=SITE, scale=0.5)
    assert len(calls) == 7 and len({call for _, call in calls}) == 7


def test_equal_keys_mean_equal_calls():
    """call_key never lumps two different Calls together (the lookup would hand one the other's
    selection): over a grid of shapes, dtypes, masks and flags, each key maps to one Call."""
    seen = {}
    info = accel.MaskInfo.from_lengths(torch.tensor([3, 2]), 3, "right")
    for lq, lk, hk, d, dv, dtype in [(1, 3, 4, 8, 8, torch.float32), (1, 9, 4, 8, 8, torch.float32),
                                     (3, 3, 4, 8, 8, torch.float32), (3, 3, 2, 8, 8, torch.float32),
                                     (1, 3, 4, 16, 8, torch.float32), (1, 3, 4, 8, 16, torch.float32),
                                     (1, 3, 4, 8, 8, torch.float64), (1200, 1200, 4, 8, 8, torch.float32)]:
        q, k, v = qkv(b=2, h=4, lq=lq, lk=lk, hk=hk, d=d, dtype=dtype)
        v = torch.zeros(*v.shape[:-1], dv, dtype=dtype)
        for mask in (None, torch.ones(2, 1, 1, lk, dtype=torch.bool), torch.zeros(2, 1, 1, lk, dtype=dtype)):
            for args in (Args(mask, False, None, hk != 4, 0.0, None), Args(mask, True, 0.3, hk != 4, 0.0, None),
                         Args(mask, False, None, hk != 4, 0.1, info if lk == 3 else None)):
                for grad in (False, True):
                    key = policies.call_key(SITE, q, k, v, args, grad)
                    call = Call.of(q.requires_grad_(grad), k, v, args, True)
                    q = q.detach()
                    assert seen.setdefault(key, call) == call


def test_a_backend_that_breaks_after_many_calls_falls_back_and_reports_exactly(fake, caplog):
    flaky, second = fake(Fake("flaky"), Fake("second"))
    policy = policies.AccelPolicy("flaky")
    policy.chain = lambda: ("flaky", "second")  # type: ignore[method-assign]
    run, ctx = bound(policy)
    q, k, v = qkv()
    with ctx.step():
        for _ in range(5):
            accel.attention(q, k, v, site=SITE)
        flaky.error = RuntimeError("illegal memory access")
        with caplog.at_level(logging.WARNING, logger="mizuoto.accel"):
            out = accel.attention(q, k, v, site=SITE)
            for _ in range(3):
                accel.attention(q, k, v, site=SITE)
    assert torch.equal(out, F.scaled_dot_product_attention(q, k, v))
    assert flaky.calls == 6 and second.calls == 4  # tried once more, then never for this kind of call
    reason = "raised RuntimeError: illegal memory access"
    assert run.report() == {"policy": "flaky", "used": {"flaky": 5, "second": 4},
                            "fallbacks": {"flaky→second": {reason: 4}}}
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [f"attention site tests.dispatch.site: flaky not used ({reason})"]


def test_every_call_of_a_cached_fallback_is_counted(fake):
    fake(Fake("picky", reason="head dim 16"), Fake("second"))
    policy = policies.AccelPolicy("picky")
    policy.chain = lambda: ("picky", "second")  # type: ignore[method-assign]
    run, ctx = bound(policy)
    with ctx.step():
        for length in range(4, 14):
            accel.attention(*qkv(lq=1, lk=length), site=SITE)
    assert run.report() == {"policy": "picky", "used": {"second": 10},
                            "fallbacks": {"picky→second": {"head dim 16": 10}}}


def test_a_backend_broken_in_one_request_is_not_retried_by_another(fake):
    """Two requests on one policy: when one finds the backend broken, the other's remembered last call is
    dropped too, so it falls back at once, as the rewritten selection says, without trying it again."""
    flaky, second = fake(Fake("flaky"), Fake("second"))
    policy = policies.AccelPolicy("flaky")
    policy.chain = lambda: ("flaky", "second")  # type: ignore[method-assign]
    (_, ctx_a), (run_b, ctx_b) = bound(policy), bound(policy)
    q, k, v = qkv()
    for ctx in (ctx_a, ctx_b):
        with ctx.step():
            accel.attention(q, k, v, site=SITE)
    flaky.error = RuntimeError("bad kernel")
    with ctx_a.step():
        accel.attention(q, k, v, site=SITE)
    with ctx_b.step():
        accel.attention(q, k, v, site=SITE)
    assert flaky.calls == 3 and second.calls == 2
    assert run_b.report() == {"policy": "flaky", "used": {"flaky": 1, "second": 1},
                              "fallbacks": {"flaky→second": {"raised RuntimeError: bad kernel": 1}}}
