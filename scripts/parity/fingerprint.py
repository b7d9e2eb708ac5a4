#!/usr/bin/env python
"""A measured fingerprint of this machine's floats: the hash of a fixed battery of the CPU primitives the
engines run, computed under the parity pins (pinned.py).

Stored reference outputs are exact only on a machine that computes the same floats as the one that wrote
them. Naming the machine does not decide that (MKL and oneDNN pick code by CPU model, cache sizes and
vendor), so every reference set records this fingerprint, and a test compares exactly against stored data
only where the fingerprint it computes now is the same. The battery's inputs are built from integers, so
they are the same bits everywhere; only the arithmetic under test can move a hash.

    python scripts/parity/fingerprint.py            # the JSON of this machine's fingerprint, pinned
    python scripts/parity/fingerprint.py --unpinned  # the battery as this process's environment computes it
    python scripts/parity/fingerprint.py --lift       # which primitives move when each pin is lifted alone
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import PINS, apply_in_process, reexec_pinned  # noqa: E402  (beside this script)

# Bump when the battery changes: a fingerprint is only comparable with one of the same battery.
BATTERY_VERSION = 1


def _values(*shape: int, seed: int = 0, scale: float = 1.0):
    """Deterministic inputs in [-scale, scale) from integer arithmetic (exact in float32 everywhere)."""
    import torch

    n = 1
    for size in shape:
        n *= size
    i = torch.arange(n, dtype=torch.int64)
    bits = (i * 2654435761 + (seed + 1) * 40503) % 65536
    return ((bits.to(torch.float32) / 32768.0 - 1.0) * scale).reshape(shape)


def _primitives():
    """name -> a zero-argument function that returns the tensor(s) to hash."""
    import torch
    import torch.nn.functional as F

    v = _values
    bf16 = torch.bfloat16

    def gemm(m, k, n, seed=0):
        return lambda: v(m, k, seed=seed) @ v(k, n, seed=seed + 1)

    cases = {
        # GEMM: small, odd, tall, one row (decode), and the layouts matmul folds or transposes
        "mm/1x64x64": gemm(1, 64, 64),
        "mm/7x33x65": gemm(7, 33, 65),
        "mm/128x256x192": gemm(128, 256, 192),
        "mm/3x1000x5": gemm(3, 1000, 5),
        "mm/96x24x1024": gemm(96, 24, 1024),
        "mm/transposed": lambda: v(40, 72, seed=2).t() @ v(40, 56, seed=3),
        "linear/bias_3d": lambda: F.linear(v(2, 17, 48, seed=4), v(80, 48, seed=5), v(80, seed=6)),
        "linear/noncontiguous": lambda: F.linear(v(2, 48, 17, seed=7).transpose(1, 2), v(32, 48, seed=8)),
        "bmm/4x9x32x11": lambda: torch.bmm(v(4, 9, 32, seed=9), v(4, 32, 11, seed=10)),
        "matmul/scores": lambda: v(1, 4, 13, 16, seed=11) @ v(1, 4, 16, 13, seed=12),
        "einsum/bhqd": lambda: torch.einsum("bhqd,bhkd->bhqk", v(2, 3, 5, 8, seed=13), v(2, 3, 7, 8, seed=14)),
        "mm/bf16": lambda: v(16, 64, seed=15).to(bf16) @ v(64, 48, seed=16).to(bf16),
        "linear/bf16": lambda: F.linear(v(3, 5, 96, seed=17).to(bf16), v(64, 96, seed=18).to(bf16),
                                        v(64, seed=19).to(bf16)),
        # convolutions: plain, dilated, strided, depthwise, wide, batched; transposed; 2-D; bf16
        "conv1d/plain": lambda: F.conv1d(v(1, 8, 200, seed=20), v(16, 8, 5, seed=21), v(16, seed=22), padding=2),
        "conv1d/dilated": lambda: F.conv1d(v(1, 8, 200, seed=23), v(8, 8, 3, seed=24), dilation=3),
        "conv1d/strided": lambda: F.conv1d(v(2, 6, 301, seed=25), v(12, 6, 4, seed=26), stride=2),
        "conv1d/depthwise": lambda: F.conv1d(v(1, 32, 120, seed=27), v(32, 1, 7, seed=28), groups=32, padding=3),
        "conv1d/wide": lambda: F.conv1d(v(1, 64, 100, seed=29), v(96, 64, 3, seed=30), padding=1),
        "conv1d/pointwise": lambda: F.conv1d(v(2, 80, 50, seed=31), v(40, 80, 1, seed=32)),
        "conv_transpose1d/up4": lambda: F.conv_transpose1d(v(1, 16, 50, seed=33), v(16, 8, 8, seed=34), stride=4,
                                                           padding=2),
        "conv_transpose1d/up2_batched": lambda: F.conv_transpose1d(v(2, 12, 31, seed=35), v(12, 6, 4, seed=36),
                                                                   v(6, seed=37), stride=2),
        "conv2d/3x3": lambda: F.conv2d(v(1, 4, 20, 30, seed=38), v(8, 4, 3, 3, seed=39), padding=1),
        "conv1d/bf16": lambda: F.conv1d(v(1, 16, 64, seed=40).to(bf16), v(16, 16, 3, seed=41).to(bf16)),
        # spectra: power-of-two and Whisper's odd 400-point frame
        "rfft/512": lambda: torch.view_as_real(torch.fft.rfft(v(3, 512, seed=42))),
        "rfft/400": lambda: torch.view_as_real(torch.fft.rfft(v(2, 400, seed=43))),
        "irfft/1024": lambda: torch.fft.irfft(torch.complex(v(513, seed=44), v(513, seed=45))),
        "stft/hann1024": lambda: torch.view_as_real(torch.stft(v(2, 6000, seed=46), 1024, 256,
                                                               window=torch.hann_window(1024), return_complex=True)),
        "istft/hann256": lambda: torch.istft(torch.complex(v(129, 40, seed=47), v(129, 40, seed=48)), 256, 64,
                                             window=torch.hann_window(256)),
        # norms and softmax
        "layer_norm": lambda: F.layer_norm(v(2, 17, 48, seed=49), (48,), v(48, seed=50), v(48, seed=51)),
        "group_norm": lambda: F.group_norm(v(2, 16, 33, seed=52), 4, v(16, seed=53), v(16, seed=54)),
        "rms_norm": lambda: F.rms_norm(v(2, 9, 64, seed=55), (64,), v(64, seed=56), eps=1e-6),
        "rms_norm/manual": lambda: (lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))(
            v(2, 9, 64, seed=57)),
        "softmax": lambda: torch.softmax(v(4, 13, 29, seed=58, scale=8.0), dim=-1),
        "log_softmax": lambda: torch.log_softmax(v(3, 1000, seed=59, scale=8.0), dim=-1),
        # vectorised elementwise functions
        **{f"unary/{name}": functools.partial(_unary, fn) for name, fn in {
            "exp": torch.exp, "log": lambda x: torch.log(x.abs() + 0.01), "tanh": torch.tanh, "sin": torch.sin,
            "cos": torch.cos, "sigmoid": torch.sigmoid, "erf": torch.erf, "gelu": F.gelu,
            "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu, "softplus": F.softplus,
            "pow": lambda x: x.abs().pow(2.5), "rsqrt": lambda x: torch.rsqrt(x.abs() + 0.01),
            "log1p": lambda x: torch.log1p(x.abs()), "atan2": lambda x: torch.atan2(x, x.flip(0)),
        }.items()},
        # reductions
        "sum/long": lambda: v(100003, seed=61).sum(),
        "mean/rows": lambda: v(64, 1001, seed=62).mean(-1),
        "cumsum": lambda: v(5000, seed=63).cumsum(0),
        "var": lambda: v(8, 333, seed=64).var(-1),
        # attention as the dispatcher's references call it (SDPA's CPU kernels)
        "sdpa/causal": lambda: F.scaled_dot_product_attention(v(1, 4, 37, 16, seed=65), v(1, 4, 37, 16, seed=66),
                                                              v(1, 4, 37, 16, seed=67), is_causal=True),
        "sdpa/mask_decode": lambda: F.scaled_dot_product_attention(
            v(2, 4, 1, 32, seed=68), v(2, 4, 64, 32, seed=69), v(2, 4, 64, 32, seed=70),
            attn_mask=(torch.arange(64) < 50).view(1, 1, 1, 64)),
        # resampling and recurrence
        "interpolate/linear": lambda: F.interpolate(v(1, 8, 77, seed=71), scale_factor=2.5, mode="linear"),
        "lstm": lambda: _lstm(),
        # random draws from a seeded generator (noise, sampling)
        "randn": lambda: torch.randn(1031, generator=torch.Generator().manual_seed(0)),
        "rand": lambda: torch.rand(1031, generator=torch.Generator().manual_seed(1)),
        "multinomial": lambda: torch.multinomial(torch.softmax(v(4, 300, seed=72, scale=4.0), -1), 3,
                                                 generator=torch.Generator().manual_seed(2)),
    }
    return cases


def _extended():
    """Primitives added after battery 1 was recorded by the committed sets: outside `id` (which would otherwise
    change for every set), recorded beside it and compared wherever both fingerprints hold one (same_floats).
    MKL's FFT picks its code by size and CPU: the 2048-point frames of GPT-SoVITS' spectrogram moved between two
    machines whose battery 1 agreed."""
    import torch

    v = _values
    return {
        "stft/hann2048": lambda: torch.view_as_real(torch.stft(v(1, 24000, seed=100), 2048, 640,
                                                               window=torch.hann_window(2048), return_complex=True)),
        "stft/hann1280": lambda: torch.view_as_real(torch.stft(v(1, 16000, seed=101), 1280, 320,
                                                               window=torch.hann_window(1280), return_complex=True)),
        "rfft/2048": lambda: torch.view_as_real(torch.fft.rfft(v(3, 2048, seed=102))),
    }


def _unary(fn):
    return fn(_values(4099, seed=60, scale=3.0))


def _lstm():
    import torch

    torch_lstm = torch.nn.LSTM(12, 16, batch_first=True)
    with torch.no_grad():
        for index, p in enumerate(torch_lstm.parameters()):
            p.copy_(_values(*p.shape, seed=80 + index, scale=0.3))
        return torch_lstm(_values(2, 9, 12, seed=90))[0]


def _digest(out) -> str:
    import torch

    t = out.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return hashlib.sha256(t.numpy().tobytes()).hexdigest()[:16]


def battery(primitives=_primitives) -> dict[str, str]:
    """name -> the first 16 hex digits of the sha256 of the primitive's output."""
    import torch

    with torch.inference_mode():
        return {name: _digest(fn()) for name, fn in primitives().items()}


def fingerprint() -> dict:
    """This process's fingerprint: `id` decides; the rest says what went into it."""
    import torch

    primitives = battery()
    record = {"battery": BATTERY_VERSION, "torch": torch.__version__, "pins": PINS,
              "num_threads": torch.get_num_threads(), "mkldnn": torch.backends.mkldnn.enabled,
              "capability": torch.backends.cpu.get_cpu_capability()}
    identity = hashlib.sha256(json.dumps({**record, "primitives": primitives}, sort_keys=True).encode())
    return {"id": identity.hexdigest()[:16], **record, "primitives": primitives, "extended": battery(_extended)}


def same_floats(recorded: dict | None, here: dict) -> bool:
    """Whether numbers written at fingerprint `recorded` are this machine's (`here`): the same id, and the same
    hash for every extended primitive both hold (a set written before one was added is judged without it)."""
    if not recorded or recorded.get("id") != here["id"]:
        return False
    theirs, ours = recorded.get("extended") or {}, here.get("extended") or {}
    return all(theirs[name] == ours[name] for name in theirs.keys() & ours.keys())


# Each pin lifted alone: an environment variable removed, or an in-process setting left at torch's default.
LIFTS = (*PINS, "threads", "onednn")


def lifted_battery(lift: str) -> dict[str, str]:
    """The battery with every pin but `lift` (one of LIFTS), in a fresh process."""
    import subprocess

    env = {**os.environ, **PINS, "FINGERPRINT_LIFTED": lift}
    env.pop(lift, None)
    done = subprocess.run([sys.executable, __file__, "--unpinned"], env=env, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout)["primitives"]


def lift_report() -> dict[str, list[str]]:
    """pin -> the primitives whose bits change on this machine when that pin alone is lifted."""
    import subprocess

    done = subprocess.run([sys.executable, __file__], capture_output=True, text=True, check=True)
    pinned = json.loads(done.stdout)["primitives"]
    return {lift: [n for n, h in lifted_battery(lift).items() if h != pinned[n]] for lift in LIFTS}


if __name__ == "__main__":
    lifted = os.environ.get("FINGERPRINT_LIFTED")
    if "--lift" in sys.argv:
        print(json.dumps(lift_report(), indent=1))
    elif "--unpinned" not in sys.argv:
        reexec_pinned()
        apply_in_process()
        print(json.dumps(fingerprint(), indent=1 if "--indent" in sys.argv else None))
    else:
        if lifted:  # a child of --lift: every in-process pin but the lifted one
            import torch

            torch.set_num_threads(os.cpu_count() if lifted == "threads" else 1)
            torch.backends.mkldnn.enabled = lifted == "onednn"
        print(json.dumps(fingerprint(), indent=1 if "--indent" in sys.argv else None))
