"""CUDA graphs for decode steps: one launch per segment instead of thousands of small kernels.

A graph replays exactly the kernels eager code launched, with the same arguments, so results are
bit-identical to eager (random draws included: the graph's generator carries the request's state).

    if graphs.usable(device, options.cuda_graphs):
        model.graphs = model.graphs or Graphs(device)        # kept on the loaded model
        model.steps = DecoderSteps(model.decoder, model.graphs, head=sample_head)
    with model.graphs.drawing(ctx.generator_for(device)):    # sample with model.graphs.generator
        for i in range(n):
            tokens = model.steps(tokens, pos, i)

Graphs hold the addresses of the weights, inputs and outputs they were captured with: keep them
with the loaded model and drop them when `signature(modules)` changes (weights moved or offloaded).
Capture and replay run under `torch.cuda.device(graphs.device)`: replays launch on the current
device's stream, so a model on cuda:1 replayed while cuda:0 is current reads illegal memory.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from contextlib import contextmanager
from functools import partial
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch

from mizuoto.runtime.accel.policies import is_cancellation, is_out_of_memory
from mizuoto.runtime.context import ACCEL

log = logging.getLogger("mizuoto.graphs")

# Mizuoto's captures run one at a time in the process: cudaMallocAsync (ComfyUI's default allocator)
# refuses a second capture while one is under way, and two models may load on two threads.
_capture_lock = threading.Lock()
_warned: set[str] = set()


def usable(device, option: bool) -> bool:
    """Whether to capture for `device`: the option is on and it is an NVIDIA CUDA device (ROCm's
    HIP graphs are unverified)."""
    if not option or device is None:
        return False
    return torch.device(device).type == "cuda" and torch.version.hip is None and torch.cuda.is_available()


def signature(modules) -> tuple:
    """(data_ptr, device, dtype, shape) of every parameter and buffer: what the graphs read from.

    Graphs keep reading these addresses, so a caller compares the signature before replaying (once
    per request is enough) and drops its graphs when it changed (weights moved, offloaded, reloaded).
    In-place updates keep the address and are seen by the graphs, as by eager code.
    """
    if isinstance(modules, torch.nn.Module):
        modules = (modules,)
    return tuple((t.data_ptr(), t.device, t.dtype, tuple(t.shape))
                 for m in modules for t in (*m.parameters(), *m.buffers()))


class Graph:
    """One captured graph and what `fn` returned during capture: its static outputs, rewritten in
    place by every replay (clone what must outlive the next one)."""

    __slots__ = ("graph", "outputs", "device", "epoch")

    def __init__(self, graph, outputs, device, epoch: int):
        self.graph, self.outputs, self.device, self.epoch = graph, outputs, device, epoch

    def replay(self):
        with torch.cuda.device(self.device):
            self.graph.replay()
        return self.outputs


class Graphs:
    """The graphs of one model on one device: their capture stream, generator and memory pool.
    Only for CUDA devices (ValueError otherwise: check `usable()` first; on the CPU nothing is captured
    and LayerSteps without graphs runs eagerly).

    `generator` is registered with every graph captured here; sample with `graphs.generator` inside
    `drawing(request_generator)`, read afresh each call, because a failed capture replaces it.
    `epoch` counts those replacements: a graph captured in an older epoch draws from a generator that
    is gone and must be captured again (LayerSteps does so by itself).
    """

    def __init__(self, device):
        device = torch.device(device)
        if device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, got {device}; check graphs.usable() first")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.epoch = 0
        self.lock = threading.RLock()  # one request at a time: the generator and static buffers are shared
        with torch.cuda.device(device):
            self.stream = torch.cuda.Stream(device)
            self.generator = self._new_generator()
        # A pool handle only: torch.cuda.MemPool is unsupported under cudaMallocAsync.
        self.pool = torch.cuda.graph_pool_handle()

    def _new_generator(self) -> torch.Generator:
        return torch.Generator(self.device)

    def device_context(self):
        return torch.cuda.device(self.device)

    @contextmanager
    def drawing(self, generator: torch.Generator | None) -> Iterator[None]:
        """Draw from the request's `generator` through `self.generator` for the duration.

        Replays advance the registered generator exactly as eager draws would; its state is copied in
        before and written back after, so a seeded request draws what eager code draws. Holds the
        graphs' lock: requests on this model run one at a time.
        """
        with self.lock:
            if generator is not None:
                self.generator.set_state(generator.get_state())  # values only: the registered state object stays
            try:
                yield
            finally:
                if generator is not None:
                    generator.set_state(self.generator.get_state())

    def capture(self, fn: Callable[[], Any], state: Sequence[torch.Tensor] = (), pool=None) -> Graph | None:
        """Capture `fn()` and return the Graph (not yet replayed), or None when capture failed.

        `fn` runs once eagerly first (lazy initialisation, cuBLAS workspaces for the capture stream,
        caches built outside the graph); the tensors in `state` that it changes and the generator are
        then restored, so capturing has no effect on results. A failed capture is logged once per
        reason and the caller runs eagerly; out-of-memory, cancellation and interrupts still raise.
        """
        pool = self.pool if pool is None else pool
        with _capture_lock, torch.cuda.device(self.device):
            current = torch.cuda.current_stream(self.device)
            self.stream.wait_stream(current)  # the inputs were written on the current stream
            try:
                with torch.cuda.stream(self.stream):
                    return self._capture(fn, tuple(state), pool)
            finally:
                # capture_begin resets the generators' seed/offset tensors on the capture stream; a
                # first replay racing those kernels would draw from offset 0.
                current.wait_stream(self.stream)

    def _capture(self, fn, state, pool) -> Graph | None:
        before = self.generator.get_state()
        saved = [t.clone() for t in state]
        try:
            fn()
        finally:
            for tensor, value in zip(state, saved, strict=True):
                tensor.copy_(value)
            self.generator.set_state(before)
        del saved
        # Not torch.cuda.graph(): its synchronize, gc.collect and empty_cache cost tens of ms per
        # capture, and a 24-layer step captures 25 graphs.
        graph = torch.cuda.CUDAGraph()
        try:
            graph.register_generator_state(self.generator)
            # thread_local: a capture must not make other threads' CUDA calls fail ("global" does).
            graph.capture_begin(pool=pool, capture_error_mode="thread_local")
            outputs = fn()
            graph.capture_end()
        except BaseException as exc:
            self._abort(graph, pool, before)
            if not isinstance(exc, Exception) or is_out_of_memory(exc) or is_cancellation(exc):
                raise
            _warn_once(exc)
            return None
        return Graph(graph, outputs, self.device, self.epoch)

    def _abort(self, graph, pool, before) -> None:
        """Leave no capture behind: end it, end the allocator's routing to the pool, take the
        generators out of capture mode, and install a fresh generator with the same state."""
        ended = False
        if torch.cuda.is_current_stream_capturing():
            try:
                graph.capture_end()
                ended = True  # fn raised before anything illegal: a whole (discarded) graph
            except Exception:
                pass  # the capture was invalidated; cudaStreamEndCapture has ended it anyway
        if not ended:
            # capture_end failed before telling the allocator, or capture_begin failed after routing:
            # without this cudaMallocAsync refuses every later capture ("Only one capture at a time")
            # and defers every free, and the native allocator counts the pool in use forever.
            if _end_allocation(self.device, pool) and pool == self.pool:
                _release_pool(self.device, pool)
                # Released, its count may be zero: beginning it again would trip the allocator's
                # assertion, so later captures take a new pool (the live graphs keep the old one).
                self.pool = torch.cuda.graph_pool_handle()
            self._settle()
        del graph
        # The old generator may still be in capture mode (torch before per-capture RNG states), and
        # every graph registered with it is now unusable: new generator, new epoch.
        self.generator = self._new_generator()
        self.generator.set_state(before)
        self.epoch += 1

    def _settle(self) -> None:
        """On torch before per-capture RNG states, capture_begin registers the device's default
        generator and only a successful capture_end takes it out of capture mode; until then every
        eager draw from it raises. One tiny successful capture does that."""
        try:
            scratch = torch.zeros(1, device=self.device)
            graph = torch.cuda.CUDAGraph()
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                scratch.add_(1)  # not empty: an empty graph warns
            finally:
                graph.capture_end()
        except Exception:
            pass


def _end_allocation(device: torch.device, pool) -> bool:
    """Stop routing allocations to `pool`; False when nothing was routed (or no API for it)."""
    for name in ("_cuda_endAllocateToPool", "_cuda_endAllocateCurrentStreamToPool"):  # torch >= 2.8, older
        end = getattr(torch._C, name, None)
        if end is not None:
            try:
                end(device.index, tuple(pool))
                return True
            except Exception:
                return False
    return False


def _release_pool(device: torch.device, pool) -> None:
    try:
        torch._C._cuda_releasePool(device.index, tuple(pool))
    except Exception:
        pass


def _warn_once(exc: BaseException) -> None:
    reason = f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
    if reason not in _warned:
        _warned.add(reason)
        log.warning("CUDA graph capture failed (%s); that step runs eagerly", reason)


# ---------------------------------------------------------------------------------------------------
# Layer stacks


class LayerSteps:
    """The single-token step of a layer stack as one graph per segment between two attention calls.

    Protocol, for a stack of N layers:
      - `head_in(*inputs) -> x`: e.g. the embedding of the step's tokens;
      - `layers[i].before(x, pos) -> (q, k, v, residual)`: norm, projections, RoPE (tensors only);
      - `layers[i].attend(q, k, v, index) -> a`: eager every step: writes k, v into the layer's cache
        and attends over the keys so far; must not keep q, k, v (they are rewritten next step);
      - `layers[i].after(a, residual) -> x`: output projection, residual, MLP;
      - `head_out(x) -> out`: e.g. final norm, logits, sampling with `graphs.generator`.
    Segment 0 is head_in + layers[0].before, segment i is layers[i-1].after + layers[i].before, the
    last is layers[N-1].after + head_out. Attention runs eagerly between replays on growing keys, so
    the cache and the attention kernels are those of eager code.

    `steps(inputs, pos, index)`: `inputs` a tensor or tuple of tensors for head_in, `pos` a tensor or
    tuple of tensors given to every `before`, `index` any object given to every `attend` (e.g. the
    cache position). Returns head_out's result; with graphs it lives in static buffers rewritten by
    the next step. Everything between attention calls must be capturable: no host syncs, no Python
    control flow on tensor values, no Python numbers that change between steps (pass them in `pos`).
    Tensors the segments change in place besides their outputs go in `state`.

    Graphs are captured at the first step of each set of input shapes, segment by segment on real
    inputs. Without graphs (CPU, option off, autograd on, or a capture that failed) the same segments
    run eagerly, so results are identical either way.
    """

    def __init__(self, layers: Iterable, head_in: Callable, head_out: Callable, graphs: Graphs | None = None,
                 state: Sequence[torch.Tensor] = ()):
        self.layers = list(layers)
        self.head_in, self.head_out = head_in, head_out
        self.graphs = graphs
        self.state = tuple(state)
        self._runs: dict[tuple, _Run | None] = {}  # per input shapes; None: capture failed, eager

    def segment(self, i: int, pos, *args):
        """Segment i on `args`: the step's inputs (i = 0) or (attention output, residual)."""
        x = self.head_in(*args) if i == 0 else self.layers[i - 1].after(*args)
        return self.head_out(x) if i == len(self.layers) else self.layers[i].before(x, pos)

    def eager(self, inputs, pos, index, start: int = 0):
        """Segments `start`.. eagerly, with attention between them; `inputs` are segment start's."""
        out = self.segment(start, pos, *inputs)
        for i in range(start + 1, len(self.layers) + 1):
            q, k, v, residual = out
            out = self.segment(i, pos, self.layers[i - 1].attend(q, k, v, index), residual)
        return out

    def __call__(self, inputs, pos, index):
        inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
        graphs = self.graphs
        if graphs is None or torch.is_grad_enabled():
            return self.eager(inputs, pos, index)
        with graphs.lock, graphs.device_context():  # the static buffers serve one step at a time
            key = tuple((t.shape, t.dtype, t.device) for t in (*inputs, *_tensors(pos)))
            run = self._runs.get(key, _MISSING)
            if run is None:
                return self.eager(inputs, pos, index)
            if run is _MISSING or run.epoch != graphs.epoch:  # new shapes, or its generator was replaced
                run = self._runs[key] = _Run(inputs, pos, graphs.epoch)
            return self._step(key, run, inputs, pos, index)

    def _step(self, key, run: _Run, inputs, pos, index):
        _copy(run.inputs, inputs)
        _copy(run.pos, pos)
        out = None
        for i in range(len(self.layers) + 1):
            if i:
                q, k, v, residual = out
                a = self.layers[i - 1].attend(q, k, v, index)
            if i < len(run.graphs):
                if i:
                    run.attended[i - 1].copy_(a)
                run.graphs[i].graph.replay()
                out = run.graphs[i].outputs
                continue
            # First step with these shapes: capture segment i on the values it has now.
            if i:
                run.attended.append(a.clone())
            args = run.inputs if i == 0 else (run.attended[i - 1], residual)
            graph = self.graphs.capture(partial(self.segment, i, run.pos, *args), self.state)
            if graph is None:
                self._runs[key] = None
                return self.eager(args, run.pos, index, start=i)
            run.graphs.append(graph)
            graph.graph.replay()
            out = graph.outputs
        return out


class DecoderSteps(LayerSteps):
    """LayerSteps for the shared QwenDecoder: `decoder.embed(*inputs)`, `decoder.layers[i].before`,
    `.attend`, `.after`, then `decoder.finish(x)` (final norm) followed by `head` when given (e.g.
    logits and sampling, so they are captured too). `embed` replaces `decoder.embed` for engines that
    feed their own input embeddings."""

    def __init__(self, decoder, graphs: Graphs | None = None, head: Callable | None = None,
                 embed: Callable | None = None, state: Sequence[torch.Tensor] = ()):
        finish = decoder.finish if head is None else (lambda x: head(decoder.finish(x)))
        super().__init__(decoder.layers, embed or decoder.embed, finish, graphs, state)


class _Run:
    """The static buffers and graphs of one LayerSteps for one set of input shapes."""

    def __init__(self, inputs, pos, epoch: int):
        self.inputs = tuple(t.clone() for t in inputs)
        self.pos = pos.clone() if isinstance(pos, torch.Tensor) else tuple(t.clone() for t in pos)
        self.epoch = epoch
        self.graphs: list[Graph] = []
        self.attended: list[torch.Tensor] = []  # attention outputs, copied in before segment i + 1


_MISSING = object()


def _tensors(value) -> tuple:
    return (value,) if isinstance(value, torch.Tensor) else tuple(value)


def _copy(static, value) -> None:
    """Copy tensors (or nested tuples of them) into their static counterparts."""
    for dst, src in zip(_tensors(static), _tensors(value), strict=True):
        if isinstance(dst, (tuple, list)):
            _copy(dst, src)  # e.g. a residual that carries modulations along
        elif dst is not None:  # e.g. a layer whose attention reads its keys from a cache returns none
            dst.copy_(src)


class GraphedCall:
    """`fn(*inputs, generator, **options)` replayed as one CUDA graph per input signature: a whole computation
    of fixed shapes captured once (a diffusion solve, a vocoder window) and launched as one graph after.

        call = GraphedCall(solve, graphs)                 # graphs: Graphs, or None for eager
        out = call((mu, prompt, style), generator, steps=10, cfg_rate=0.7)   # a fresh tensor each call

    The signature is every input's shape, dtype and device, the `options` (plain values), the autocast
    state, so a graph captured under float16 autocast replays only there, and the bound attention policy: a
    graph holds the attention kernels its capture chose, so another policy captures its own. The attention
    calls a capture made are added to the bound run's counts at every replay, as eager calls count themselves.
    `fn` must be capturable (no host reads) and draw only from the generator it is given: replays draw from
    `graphs.generator` with the request's state copied in and back (`Graphs.drawing`), so the draws are eager
    code's. Eager where `graphs` is None, under autograd, or for a signature whose capture failed (logged once
    by Graphs). Keep it with the loaded model: its graphs hold the weights' addresses.
    """

    def __init__(self, fn: Callable, graphs: Graphs | None):
        self.fn, self.graphs = fn, graphs
        self._runs: dict[tuple, Any] = {}

    def __call__(self, inputs: Sequence[torch.Tensor], generator: torch.Generator, **options) -> torch.Tensor:
        graphs = self.graphs
        if graphs is None or torch.is_grad_enabled():
            return self.fn(*inputs, generator, **options)
        with graphs.drawing(generator):
            return self._graphed(tuple(inputs), options)

    def _graphed(self, inputs: tuple, options: dict) -> torch.Tensor:
        graphs = self.graphs
        device_type = graphs.device.type
        bound = ACCEL.get()
        policy, used = getattr(bound, "policy", None), getattr(bound, "used", None)
        signature = (tuple((t.shape, t.dtype, t.device) for t in inputs), tuple(sorted(options.items())),
                     torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type),
                     None if policy is None else (policy.name, policy.strict))
        with graphs.lock, graphs.device_context():
            run = self._runs.get(signature, _MISSING)
            if run is None:  # its capture failed: eager, drawing from the graphs' generator as a replay would
                return self.fn(*inputs, graphs.generator, **options)
            if run is _MISSING or run.epoch != graphs.epoch:  # new shapes, or its generator was replaced
                run = self._runs[signature] = _CallRun(inputs, graphs.epoch)
            for static, value in zip(run.inputs, inputs, strict=True):
                static.copy_(value)
            if run.graph is None:
                before = Counter(used) if used is not None else None

                def captured():
                    start = Counter(used) if used is not None else None
                    out = self.fn(*run.inputs, graphs.generator, **options)
                    if used is not None and ACCEL.get() is bound:  # the warm-up and the capture: the same calls
                        run.attention = Counter(used) - start
                    return out

                run.graph = graphs.capture(captured)
                if used is not None:  # the capture's counts are not this call's: its replay's are
                    used.clear()
                    used.update(before)
                if run.graph is None:
                    self._runs[signature] = None
                    return self.fn(*inputs, graphs.generator, **options)
            run.graph.graph.replay()  # already under the graphs' device
            if used is not None:
                used.update(run.attention)
            return run.graph.outputs.clone()  # the static output is rewritten by the next replay


class _CallRun:
    def __init__(self, inputs: tuple, epoch: int):
        self.inputs = tuple(t.clone() for t in inputs)
        self.epoch = epoch
        self.graph: Graph | None = None
        self.attention: Counter = Counter()  # the attention backends one call ran, as the bound run counts them
