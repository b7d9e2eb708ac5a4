"""Policies: which backend runs each attention call, with fallbacks and statistics.

A policy is fixed when a model loads (`policy_for(name, strict)`, one shared object per value). For
every call it walks a chain: the named backend, then the `fast` chain for that call, then the site's
reference. Backends are skipped when their probe says they cannot run on the device, when the call
needs a backward or dropout they lack, when the site refuses approximation and they approximate, or
when their constraints reject the call. The result is cached per (site, Call), so a decode loop
selects once. A kernel that raises is marked broken for that kind of call and the next one takes
over; out-of-memory and cancellation propagate.

A request binds an `AccelRun` (the policy plus the request's counters) around each of its steps;
`auto` binds nothing, so every site runs its reference at the cost of one context-variable read.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from mizuoto.core.errors import InputError
from mizuoto.core.settings import POLICY_NAMES

from . import dispatch, host
from .backends import REGISTRY, Backend
from .call import Args, Call
from .probes import probe

log = logging.getLogger("mizuoto.accel")

# The `fast` chain, fastest first. Approximate kernels come first and are skipped by every site that
# refuses approximation (all autoregressive ones).
FAST_ORDER = ("sage3", "sage", "flash", "sdpa_cudnn", "sdpa_flash", "xformers", "sdpa_efficient", "cpu_flash")
SPECIAL = ("auto", "host", "fast")


@dataclass
class Selection:
    """The backends that may run a (site, Call), in order, and the ones skipped in front of them."""

    candidates: list[Backend]
    skipped: list[tuple[str, str]]  # (backend, reason) worth reporting as a fallback


@dataclass(eq=False)
class AccelPolicy:
    name: str
    strict: bool = False
    _selections: dict = field(default_factory=dict, repr=False)
    # call_key(...) -> Entry: the per-call lookup, keyed on raw facts that are cheaper to gather than a
    # Call and that determine it (so a hit is exactly what building the Call would have selected)
    _by_key: dict = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def first(self) -> str | None:
        """The backend the policy names, put first in every chain (None: auto and fast)."""
        if self.name == "host":
            return host.backend()
        return None if self.name in SPECIAL else self.name

    def start(self) -> "AccelRun | None":
        """What one request binds around its steps: None for auto (nothing is bound or counted)."""
        return None if self.name == "auto" else AccelRun(self)

    def check_device(self, device) -> None:
        """At load: with strict, refuse a named backend that cannot run on `device`."""
        name = self.first
        if not self.strict or name is None:
            return
        found = probe(REGISTRY[name], device)
        if not found.ok:
            raise InputError(f"attention policy '{self.name}' cannot run on {device}: {found.reason}; "
                             f"choose another policy or turn strict off to fall back")

    def chain(self) -> tuple[str, ...]:
        first = self.first
        return ((first,) if first else ()) + tuple(n for n in FAST_ORDER if n != first)

    # -- selection -----------------------------------------------------------------------------------

    def select(self, site, call: Call, q, k, v, args: Args) -> Selection:
        key = (site.name, call)
        found = self._selections.get(key)
        if found is None:
            with self._lock:
                found = self._selections.get(key)
                if found is None:
                    found = self._selections[key] = self._select(site, call, q, k, v, args)
        return found

    def resolve(self, key: tuple, site, q, k, v, args: Args, grad: bool) -> "Entry":
        """For a call whose `call_key` missed: the Call built and the selection made (or found) for it as
        `select` does, remembered under the key."""
        call = Call.of(q, k, v, args, grad)
        entry = Entry(call, self.select(site, call, q, k, v, args))
        with self._lock:
            self._by_key[key] = entry
        return entry

    def _select(self, site, call: Call, q, k, v, args: Args) -> Selection:
        if not site.swappable:
            return Selection([], [])
        candidates, skipped = [], []
        named = self.first
        for name in self.chain():
            backend = REGISTRY[name]
            reason, worth_reporting = why_not(backend, site, call, q, k, v, args)
            if reason is None:
                candidates.append(backend)
            elif (worth_reporting or name == named) and not candidates:
                skipped.append((name, reason))
        return Selection(candidates, skipped)

    def forget(self, call: Call, backend: Backend, reason: str) -> None:
        """Drop `backend` from every cached selection for `call` after it broke; later calls report it
        as a fallback for that reason, as they would a constraint."""
        with self._lock:
            for key, selection in list(self._selections.items()):
                if key[1] == call and backend in selection.candidates:
                    position = selection.candidates.index(backend)
                    skipped = selection.skipped + ([(backend.name, reason)] if position == 0 else [])
                    self._selections[key] = Selection([b for b in selection.candidates if b is not backend],
                                                      skipped)
            for entry in self._by_key.values():
                entry.run = None  # runs that remembered one as their last call's go the whole way again
            self._by_key.clear()  # rare: the keys resolve afresh to the selections just rewritten


# Backends that raised, per kind of call: broken[(backend, call)] = reason. Process-wide, because a
# kernel that fails for a shape fails for every model.
_broken: dict[tuple[str, Call], str] = {}
_logged: set[tuple[str, str, str]] = set()


def why_not(backend: Backend, site, call: Call, q, k, v, args: Args) -> tuple[str | None, bool]:
    """Why `backend` cannot take this call (None if it can), and whether that is worth reporting.

    Not being available on the device is reported only for the backend a policy names; a backend
    that is there but cannot take this call is always reported (the seed's "sage→flash: head dim 80").
    """
    if call.device not in backend.devices:
        return f"runs on {' or '.join(backend.devices)} only", False
    found = probe(backend, q.device)
    if not found.ok:
        return found.reason, False
    if call.grad and not backend.backward:
        return "no backward", True
    if call.dropout and not backend.dropout:
        return "no dropout", True
    if not backend.exact and not site.approx_ok:
        return "site needs exact attention", True
    reason = backend.constraints(call)
    if reason is None:
        reason = _broken.get((backend.name, call))
    if reason is None:
        reason = backend.eligible(q, k, v, args)
    return reason, reason is not None


def log_once(site: str, backend: str, reason: str) -> None:
    key = (site, backend, reason)
    if key not in _logged:
        _logged.add(key)
        log.warning("attention site %s: %s not used (%s)", site, backend, reason)


class Entry:
    """What a `call_key` resolves to: the Call, its Selection, and the run method and name of the backend
    that takes it straight away (None, None when the call must walk its chain: a skip to report, or only
    the reference; `run` also turns None when a backend broke and the entries were dropped)."""

    __slots__ = ("call", "selection", "run", "ran")

    def __init__(self, call: Call, selection: Selection):
        self.call, self.selection = call, selection
        direct = selection.candidates[0] if selection.candidates and not selection.skipped else None
        self.run, self.ran = (direct.run, direct.name) if direct is not None else (None, None)


def call_key(site, q, k, v, args: Args, grad: bool) -> tuple:
    """The facts a Call is built from, as they come (shapes, dtype and device objects, flags): equal keys
    give equal Calls, and gathering them costs a fraction of building the Call. A decode loop whose keys
    grow keeps one key: the key holds whether there are as many queries as keys, not the key count."""
    mask, causal, scale, _, dropout_p, info = args
    q_shape, k_shape = q.shape, k.shape
    return (site, q_shape, k_shape[1] if len(k_shape) == 4 else 0, k_shape[-2] == q_shape[-2], v.shape[-1],
            q.dtype, q.device, None if mask is None else mask.dtype, None if info is None else info.structure(),
            scale is None, causal, dropout_p, grad)


def grad_needed(q, k, v) -> bool:
    """Whether autograd will need this call's backward (grad mode on and an input that requires grad)."""
    return dispatch._grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)


_args = tuple.__new__  # Args(...) without the NamedTuple's Python-level __new__: this runs once per call


@dataclass
class AccelRun:
    """One request's binding: the policy and what ran under it."""

    policy: AccelPolicy
    used: Counter = field(default_factory=Counter)
    fallbacks: defaultdict = field(default_factory=lambda: defaultdict(Counter))

    def __post_init__(self):
        self._by_key = self.policy._by_key  # the policy's lookup (shared by its runs), one attribute nearer
        # site -> its last call without autograd: (q, k, v shapes, device, dtype, mask, mask_info, causal,
        # scale, enable_gqa, dropout_p, Args, Entry).
        # dispatch.attention reuses the entry of a call just like the site's last one (a decoder step's
        # layers), without building a key; this run writes it, in `attend`.
        self.last: dict = {}

    def attend(self, site, q, k, v, mask=None, causal=False, scale=None, enable_gqa=False, dropout_p=0.0,
               info=None):
        """One attention call unlike its site's last: its `call_key`, the lookup, the backend."""
        args = _args(Args, (mask, causal, scale, enable_gqa, dropout_p, info))
        grad = grad_needed(q, k, v)
        key = call_key(site, q, k, v, args, grad)
        entry = self._by_key.get(key)
        if entry is None:
            entry = self.policy.resolve(key, site, q, k, v, args, grad)
        if not grad:  # calls that need a backward are rare and always come this way
            self.last[site] = (q.shape, k.shape, v.shape, q.device, q.dtype, mask, info, causal, scale, enable_gqa,
                               dropout_p, args, entry)
        if entry.run is None:  # something is skipped, or nothing but the reference can run: the whole walk
            return self._attend_chain(site, q, k, v, args, entry.call, entry.selection, [])
        try:
            out = entry.run(q, k, v, args)
        except Exception as exc:
            return self.failed(site, q, k, v, args, entry, exc)
        self.used[entry.ran] += 1
        return out

    def failed(self, site, q, k, v, args: Args, entry: "Entry", exc: Exception):
        """The selected backend raised: out-of-memory and cancellation propagate (the caller retries exactly,
        or the request stops); anything else marks it broken for this kind of call and the chain goes on."""
        if is_out_of_memory(exc) or is_cancellation(exc):
            raise exc
        selection = entry.selection
        failed = [self._mark_broken(site, entry.call, selection.candidates[0], exc)]
        rest = Selection(selection.candidates[1:], selection.skipped)
        return self._attend_chain(site, q, k, v, args, entry.call, rest, failed)

    def _mark_broken(self, site, call: Call, backend: Backend, exc: Exception) -> tuple[str, str]:
        reason = f"raised {type(exc).__name__}: {' '.join(str(exc).split())[:120]}"
        _broken[(backend.name, call)] = reason
        self.policy.forget(call, backend, reason)
        log_once(site.name, backend.name, reason)
        return backend.name, reason

    def _attend_chain(self, site, q, k, v, args: Args, call: Call, selection: Selection, failed: list):
        """The whole walk: each candidate in turn (one that raises is marked broken), then the reference;
        every skip and failure in front of what ran is counted as a fallback."""
        for backend in selection.candidates:
            try:
                out = backend.run(q, k, v, args)
            except Exception as exc:
                if is_out_of_memory(exc) or is_cancellation(exc):
                    raise
                failed.append(self._mark_broken(site, call, backend, exc))
                continue
            self._record(backend.name, selection.skipped + failed, site)
            return out
        out = site.reference(q, k, v, args.mask, args.causal, args.scale, args.enable_gqa, args.dropout_p)
        self._record(site.reference_label, selection.skipped + failed, site)
        return out

    def _record(self, ran: str, skipped, site) -> None:
        self.used[ran] += 1
        for name, reason in skipped:
            self.fallbacks[f"{name}→{ran}"][reason] += 1
            log_once(site.name, name, reason)

    def report(self) -> dict:
        return {"policy": self.policy.name, "used": dict(self.used),
                "fallbacks": {pair: dict(reasons) for pair, reasons in self.fallbacks.items()}}

    def warnings(self) -> list[str]:
        return [f"attention fell back {pair} ({', '.join(f'{r}: {n}' for r, n in reasons.items())})"
                for pair, reasons in self.fallbacks.items()]


def is_out_of_memory(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def is_cancellation(exc: BaseException) -> bool:
    from mizuoto.core.errors import Cancelled

    # ComfyUI's InterruptProcessingException is matched by name: importing comfy here is not allowed.
    return isinstance(exc, Cancelled) or type(exc).__name__ == "InterruptProcessingException"


_POLICIES: dict[tuple[str, bool], AccelPolicy] = {}
_policies_lock = threading.Lock()


def policy_names() -> tuple[str, ...]:
    return SPECIAL + tuple(REGISTRY)


def policy_for(name: str, strict: bool = False) -> AccelPolicy:
    """The shared policy object for `name`; an unknown name is a one-line error listing the known."""
    if name not in POLICY_NAMES:
        raise InputError(f"unknown attention policy '{name}'; choose one of: {', '.join(POLICY_NAMES)}")
    key = (name, bool(strict))
    policy = _POLICIES.get(key)
    if policy is None:
        with _policies_lock:
            policy = _POLICIES.setdefault(key, AccelPolicy(name, bool(strict)))
    return policy
