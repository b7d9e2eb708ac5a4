"""CUDA graphs on a toy decoder: bit-identical to eager, failures fall back, and how much faster.

    python scripts/graphs_check.py [--steps N] [--json OUT.json]

On each CUDA device it decodes a toy layer stack (embedding, 6 layers of norm/QKV/RoPE/attention on a
growing KV cache/MLP, final norm, logits, sampling inside the graph) eagerly and with LayerSteps graphs
and requires identical tokens, logits and request-generator state; then with a capture that fails on
purpose (a host sync in the last segment), which must fall back with one warning and still match,
leave the device's default generator and the allocator usable, and let a later capture succeed; then
a model on the last GPU while cuda:0 is current (with two GPUs or more). It prints decode steps per
second eager and with graphs, and runs itself again under PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
(ComfyUI's default allocator) unless that is already set. Without CUDA it checks the eager LayerSteps
path against the stack's own forward on the CPU. Exits non-zero on any failure.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from mizuoto.runtime import graphs as graphs_mod
from mizuoto.runtime.graphs import Graphs, LayerSteps

ASYNC_ALLOCATOR = "backend:cudaMallocAsync"


# ---------------------------------------------------------------------------------------------------
# The toy stack: a small pre-norm decoder with the before/attend/after protocol.

def rms(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class ToyLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.norm1 = nn.Parameter(1 + 0.1 * torch.randn(dim))
        self.norm2 = nn.Parameter(1 + 0.1 * torch.randn(dim))
        self.qkv = nn.Linear(dim, 3 * dim)
        self.o = nn.Linear(dim, dim)
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)
        half = self.head_dim // 2
        self.register_buffer("freqs", 1.0 / (10000 ** (torch.arange(half).float() / half)), persistent=False)
        self.k_cache = self.v_cache = None

    def reset(self, batch, length):
        shape = (batch, self.heads, length, self.head_dim)
        self.k_cache = torch.zeros(shape, device=self.qkv.weight.device, dtype=self.qkv.weight.dtype)
        self.v_cache = torch.zeros_like(self.k_cache)

    def rope(self, x, pos):  # x (B, H, 1, D), pos (B, 1) int64
        angle = (pos[:, None, :, None].float() * self.freqs).to(x.dtype)
        a, b = x.chunk(2, -1)
        return torch.cat((a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()), -1)

    def before(self, x, pos):
        batch, length, dim = x.shape
        q, k, v = self.qkv(rms(x, self.norm1)).view(batch, length, 3, self.heads, self.head_dim).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        return self.rope(q, pos), self.rope(k, pos), v, x

    def attend(self, q, k, v, index):
        self.k_cache[:, :, index:index + 1].copy_(k)
        self.v_cache[:, :, index:index + 1].copy_(v)
        keys, values = self.k_cache[:, :, :index + 1], self.v_cache[:, :, :index + 1]
        weights = torch.softmax((q @ keys.transpose(-1, -2)) * self.head_dim ** -0.5, -1)
        return weights @ values

    def after(self, a, residual):
        batch, heads, length, head_dim = a.shape
        x = residual + self.o(a.transpose(1, 2).reshape(batch, length, heads * head_dim))
        return x + self.down(F.gelu(self.up(rms(x, self.norm2))))

    def forward(self, x, pos, index):
        """The same layer in one piece, written out: the reference LayerSteps is compared with."""
        batch, length, dim = x.shape
        h = rms(x, self.norm1)
        q, k, v = self.qkv(h).view(batch, length, 3, self.heads, self.head_dim).unbind(2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q, k = self.rope(q, pos), self.rope(k, pos)
        self.k_cache[:, :, index:index + 1].copy_(k)
        self.v_cache[:, :, index:index + 1].copy_(v)
        keys, values = self.k_cache[:, :, :index + 1], self.v_cache[:, :, :index + 1]
        a = torch.softmax((q @ keys.transpose(-1, -2)) * self.head_dim ** -0.5, -1) @ values
        x = x + self.o(a.transpose(1, 2).reshape(batch, length, dim))
        return x + self.down(F.gelu(self.up(rms(x, self.norm2))))


class ToyStack(nn.Module):
    """`generator()` says where head_out draws from (the request's, or graphs.generator)."""

    def __init__(self, vocab=512, dim=256, heads=4, layers=6, sync_in_capture=False):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(ToyLayer(dim, heads) for _ in range(layers))
        self.norm = nn.Parameter(1 + 0.1 * torch.randn(dim))
        self.lm_head = nn.Linear(dim, vocab)
        self.sync_in_capture = sync_in_capture  # make the last segment uncapturable on purpose
        self.generator = lambda: None

    def reset(self, batch, length):
        for layer in self.layers:
            layer.reset(batch, length)

    def embed(self, tokens):
        return self.embedding(tokens)

    def head(self, x):
        """Logits and a sample without torch.multinomial (no host sync): argmax(p / Exp(1))."""
        logits = self.lm_head(rms(x, self.norm))
        if self.sync_in_capture and logits.is_cuda and torch.cuda.is_current_stream_capturing():
            logits.sum().item()  # illegal while capturing: invalidates the capture
        probs = torch.softmax(logits.float(), -1)
        noise = torch.empty_like(probs).exponential_(1, generator=self.generator())
        return (probs / noise).argmax(-1), logits

    def forward(self, tokens, pos, index):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, pos, index)
        return self.head(x)


def make_stack(device, seed=0, **kwargs) -> ToyStack:
    with torch.random.fork_rng(devices=[]):
        torch.random.manual_seed(seed)  # the toy's weights only; the CPU RNG is restored after
        stack = ToyStack(**kwargs)
    return stack.to(device).eval()


def decode(stack, step, steps, batch=2):
    """`steps` tokens from a fixed start; returns tokens (B, steps) and logits (steps, B, 1, V)."""
    device = stack.lm_head.weight.device
    stack.reset(batch, steps)
    tokens = torch.arange(batch, device=device)[:, None]
    out, logits = [], []
    for i in range(steps):
        pos = torch.full((batch, 1), i, device=device, dtype=torch.long)
        tokens, step_logits = step(tokens, pos, i)
        out.append(tokens.clone())
        logits.append(step_logits.clone())
    return torch.cat(out, 1), torch.stack(logits)


def decode_eager(stack, seed, steps):
    generator = torch.Generator(stack.lm_head.weight.device).manual_seed(seed)
    stack.generator = lambda: generator
    tokens, logits = decode(stack, LayerSteps(stack.layers, stack.embed, stack.head), steps)
    return tokens, logits, generator.get_state()


def decode_graphed(stack, graphs, seed, steps, layer_steps=None):
    generator = torch.Generator(stack.lm_head.weight.device).manual_seed(seed)
    stack.generator = lambda: graphs.generator  # read afresh: a failed capture replaces it
    layer_steps = layer_steps or LayerSteps(stack.layers, stack.embed, stack.head, graphs)
    with graphs.drawing(generator):
        tokens, logits = decode(stack, layer_steps, steps)
    return tokens, logits, generator.get_state(), layer_steps


# ---------------------------------------------------------------------------------------------------
# Checks: each returns a list of failures.

def compare(label, eager, graphed) -> list[str]:
    names = ("tokens", "logits", "generator state")
    return [f"{label}: {name} differ" for name, a, b in zip(names, eager, graphed, strict=True)
            if not torch.equal(a, b)]


def check_identical(device, steps=24) -> list[str]:
    stack = make_stack(device)
    with torch.inference_mode():
        eager = decode_eager(stack, 1234, steps)
        graphs = Graphs(device)
        first = decode_graphed(stack, graphs, 1234, steps)  # captures at the first step
        layer_steps = first[3]
        captured = len(next(iter(layer_steps._runs.values())).graphs)
        again = decode_graphed(stack, graphs, 1234, steps, layer_steps)  # replays only
        other_seed = decode_graphed(stack, graphs, 99, steps, layer_steps)
    failures = compare("graphs, first run", eager, first[:3]) + compare("graphs, replayed", eager, again[:3])
    if captured != len(stack.layers) + 1:
        failures.append(f"captured {captured} segments, expected {len(stack.layers) + 1}")
    if torch.equal(other_seed[0], eager[0]):
        failures.append("another seed drew the same tokens")
    return failures


def check_failed_capture(device, steps=12) -> list[str]:
    failures = []
    stack = make_stack(device, sync_in_capture=True)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("mizuoto.graphs")
    logger.addHandler(handler)
    graphs_mod._warned.clear()
    try:
        with torch.inference_mode():
            eager = decode_eager(stack, 7, steps)
            graphs = Graphs(device)
            graphed = decode_graphed(stack, graphs, 7, steps)
            again = decode_graphed(stack, graphs, 7, steps, graphed[3])
    finally:
        logger.removeHandler(handler)
    failures += compare("failed capture", eager, graphed[:3]) + compare("failed capture, again", eager, again[:3])
    if len(records) != 1:
        failures.append(f"failed capture logged {len(records)} warnings, expected 1")
    if graphs.epoch != 1:
        failures.append(f"failed capture: epoch {graphs.epoch}, expected 1")
    try:  # the device's default generator is out of capture mode and the allocator routes normally
        torch.rand(4, device=device).sum().item()
        with torch.inference_mode():
            healthy = make_stack(device)
            eager = decode_eager(healthy, 5, steps)
            graphed = decode_graphed(healthy, graphs, 5, steps)
        failures += compare("capture after a failed one", eager, graphed[:3])
        if not graphed[3]._runs or None in graphed[3]._runs.values():
            failures.append("capture after a failed one did not capture")
    except Exception as exc:
        failures.append(f"after a failed capture: {type(exc).__name__}: {exc}")
    return failures


def check_other_device(steps=12) -> list[str]:
    """The model on the last GPU while cuda:0 is current."""
    device = torch.device("cuda", torch.cuda.device_count() - 1)
    stack = make_stack(device)
    with torch.cuda.device(0), torch.inference_mode():
        eager = decode_eager(stack, 3, steps)
        graphed = decode_graphed(stack, Graphs(device), 3, steps)
        torch.cuda.synchronize(device)
    return compare(f"model on {device}, cuda:0 current", eager, graphed[:3])


def speed(device, steps=64, repeats=3) -> dict:
    stack = make_stack(device, layers=24, dim=512, heads=8)
    graphs = Graphs(device)
    result = {}
    with torch.inference_mode():
        layer_steps = decode_graphed(stack, graphs, 0, steps)[3]  # capture outside the timing
        decode_eager(stack, 0, steps)
        for label, run in (("eager", lambda: decode_eager(stack, 0, steps)),
                           ("graphs", lambda: decode_graphed(stack, graphs, 0, steps, layer_steps))):
            best = float("inf")
            for _ in range(repeats):
                torch.cuda.synchronize(device)
                start = time.perf_counter()
                run()
                torch.cuda.synchronize(device)
                best = min(best, time.perf_counter() - start)
            result[label] = steps / best
    return result


def check_cpu(steps=8) -> list[str]:
    stack = make_stack("cpu")
    generator = torch.Generator().manual_seed(0)
    stack.generator = lambda: generator
    with torch.inference_mode():
        stepped = decode(stack, LayerSteps(stack.layers, stack.embed, stack.head), steps)
        generator.manual_seed(0)
        direct = decode(stack, stack, steps)
    return [f"cpu: {name} differ" for name, a, b in zip(("tokens", "logits"), stepped, direct, strict=True)
            if not torch.equal(a, b)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=64, help="decode steps timed")
    parser.add_argument("--quick", action="store_true", help="checks only, no timing")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    failures = check_cpu()
    result = {"torch": torch.__version__, "allocator": None, "devices": {}}
    if not graphs_mod.usable("cuda", True):
        print("no CUDA device: checked the eager LayerSteps path on the CPU only")
    else:
        result["allocator"] = torch.cuda.memory.get_allocator_backend()
        print(f"torch {torch.__version__}, allocator {result['allocator']}")
        for index in range(torch.cuda.device_count()):
            device = torch.device("cuda", index)
            found = check_identical(device) + check_failed_capture(device)
            name = torch.cuda.get_device_name(index)
            result["devices"][str(device)] = {"name": name, "failures": found}
            line = f"{device} ({name}): {'ok' if not found else 'FAIL'}"
            if not args.quick:
                rates = result["devices"][str(device)]["steps_per_s"] = speed(device, args.steps)
                line += (f"; decode steps/s eager {rates['eager']:.0f}, graphs {rates['graphs']:.0f} "
                         f"({rates['graphs'] / rates['eager']:.1f}x)")
            print(line, flush=True)
            failures += found
        if torch.cuda.device_count() > 1:
            failures += check_other_device()
        if ASYNC_ALLOCATOR not in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
            env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=ASYNC_ALLOCATOR)
            print("again under cudaMallocAsync:")
            child = subprocess.run([sys.executable, __file__, "--steps", str(args.steps)]
                                   + (["--quick"] if args.quick else []), env=env)
            if child.returncode:
                failures.append("under cudaMallocAsync: failed (see above)")
        elif result["allocator"] != "cudaMallocAsync":
            failures.append(f"PYTORCH_CUDA_ALLOC_CONF asks for cudaMallocAsync but torch uses {result['allocator']}")
    result["failures"] = failures
    for failure in failures:
        print(f"FAIL {failure}")
    print(f"{len(failures)} failure(s)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
