"""Live parity of Mizuoto's VoxCPM MiniCPM stacks, local encoder and local DiTs against voxcpm 2.0.3 at
VoxCPM2's attention shapes (dev only), and the cache-capacity measurement.

Run it with the Python of an environment that has upstream installed (scripts/parity/voxcpm_upstream_env.sh);
our modules are imported from the clone given by --ours (default: this clone):

    .venv-voxcpm-upstream/bin/python scripts/parity/voxcpm_minicpm_live.py [--ours CLONE] [--threads N] [--unpinned]

It pins ATEN_CPU_CAPABILITY=avx2 (re-executing itself; --unpinned keeps the machine's own level) and runs at
--threads intra-op threads (default 1). Random weights, every parameter re-randomised (norms too):
  - decode: an LM with VoxCPM2's attention shape (16 query / 2 key-value heads of 128, LongRoPE over 64 factors)
    at two widths, prefilled with prompts of 1 ... 700 positions (across the flash kernel's 512-key blocks),
    then 24 steps. Upstream runs with its static cache of 8192 (VoxCPM2) and 4096 (VoxCPM 0.5B / 1.5); ours
    at capacities from the exact number of positions up to 8192. Every step's output and the keys written
    are compared bit for bit with upstream's 8192 run; capacities that are multiples of the vector width
    (8 floats at avx2, 16 at avx512) must be identical, the others are reported (they are the trap: SDPA
    reduces over the whole cache, vectorised with a scalar tail);
  - a muP LM (scale_emb, scale_depth) with long factors, through its token embeddings;
  - the local encoder over 30 patches and one, and both DiT versions on the guided batch, at 1024 wide.
Exit status 1 when anything that must be identical is not.
"""

from __future__ import annotations

import argparse
import os
import sys

from pinned import add_ours_argument, pin_process  # beside this script


def _parse():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_ours_argument(parser)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--unpinned", action="store_true", help="keep the machine's own CPU kernel level")
    return parser.parse_args()


if "--unpinned" not in sys.argv:
    pin_process()
ARGS = _parse()
sys.path.insert(0, str(ARGS.ours.resolve()))

import torch  # noqa: E402
from voxcpm.modules.locdit import VoxCPMLocDiT, VoxCPMLocDiTV2  # noqa: E402
from voxcpm.modules.locenc import VoxCPMLocEnc  # noqa: E402
from voxcpm.modules.minicpm4 import MiniCPM4Config, MiniCPMModel  # noqa: E402

from mizuoto.engines.voxcpm.local import LocalDiT, LocalEncoder  # noqa: E402
from mizuoto.engines.voxcpm.minicpm import MiniCPM, MiniCPMConfig, capacity_for  # noqa: E402

torch.set_num_threads(ARGS.threads)
FAILED: list[str] = []
# floats per vector at this kernel level: a capacity that is a multiple of it reduces like upstream's 8192
LANES = 16 if torch.backends.cpu.get_cpu_capability() == "AVX512" else 8


def report(name: str, ours: torch.Tensor, theirs: torch.Tensor, must: bool = True) -> bool:
    same = ours.shape == theirs.shape and torch.equal(ours, theirs)
    diff = (ours - theirs).abs().max().item() if ours.shape == theirs.shape else float("nan")
    if must and not same:
        FAILED.append(name)
    if must or not same:
        print(f"{'ok  ' if same else ('FAIL' if must else 'diff')} {name}: max abs diff {diff:.3g}")
    return same


def randomise(module, seed):
    with torch.no_grad():
        for index, (name, p) in enumerate(sorted(module.named_parameters())):
            u = torch.rand(p.shape, generator=torch.Generator().manual_seed(seed * 1000 + index)) * 2 - 1
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.3 * u)
            elif name.endswith("bias"):
                p.copy_(0.1 * u)
            elif "embed_tokens" in name or name.endswith("special_token"):
                p.copy_(u * 1.7)
            else:
                p.copy_(u * (3.0 / p.shape[1]) ** 0.5)
    return module.eval()


FACTORS = [1.0 + 30.0 * (i / 63) ** 2 for i in range(64)]  # the shape of VoxCPM2's: 1 ... 31 over 64 entries


def lm_dict(**over):
    base = dict(bos_token_id=1, eos_token_id=2, hidden_size=1024, intermediate_size=512, max_position_embeddings=32768,
                num_attention_heads=16, num_hidden_layers=2, num_key_value_heads=2, rms_norm_eps=1e-5,
                kv_channels=128, vocab_size=0, use_mup=False, scale_emb=12, dim_model_base=256, scale_depth=1.4,
                rope_theta=10000, rope_scaling=dict(type="longrope", long_factor=FACTORS, short_factor=FACTORS,
                                                    original_max_position_embeddings=32768))
    base.update(over)
    return base


def pair(data: dict, seed: int):
    upstream = randomise(MiniCPMModel(MiniCPM4Config.model_validate(data)), seed)
    ours = MiniCPM(MiniCPMConfig.from_dict(data)).eval()
    ours.load_state_dict(upstream.state_dict())
    return upstream, ours


def randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def decode_case(label: str, upstream, ours, prompt: int, steps: int, lengths=(8192, 4096)):
    hidden = upstream.config.hidden_size
    x = randn(1, prompt, hidden, seed=prompt)
    xs = [randn(1, hidden, seed=10_000 + prompt + s) for s in range(steps)]
    up_out, kv = upstream(x, is_causal=True)
    our_out, our_kv = ours(x, causal=True)
    report(f"{label} prompt {prompt}: prefill", our_out, up_out)
    runs = {}
    for length in lengths:  # upstream's own cache lengths
        upstream.setup_cache(1, length, "cpu", torch.float32)
        upstream.kv_cache.fill_caches(kv)
        outs = [upstream.forward_step(xi, torch.tensor([upstream.kv_cache.step()])).clone() for xi in xs]
        runs[length] = (outs, upstream.kv_cache.kv_cache[:, :, :, :, : prompt + steps].clone())
    want, want_cache = runs[lengths[0]]
    for length in lengths[1:]:
        report(f"{label} prompt {prompt}: upstream max_length {length} vs {lengths[0]}", torch.stack(runs[length][0]),
               torch.stack(want))
    n = prompt + steps
    capacities = sorted({n, n + 1, n + 3, -(-n // 8) * 8, -(-n // 16) * 16, capacity_for(n), -(-n // 512) * 512,
                         4096, 8192} - set(range(ours.config.max_position_embeddings + 1, 8193)))
    for capacity in capacities:
        cache = ours.new_cache(1, capacity)
        cache.fill(our_kv)
        got = []
        for xi in xs:
            got.append(ours.step(xi, cache.position(), cache).clone())
            cache.advance()
        must = capacity % LANES == 0
        same = report(f"{label} prompt {prompt}: {steps} steps at capacity {capacity}", torch.stack(got),
                      torch.stack(want), must)
        if not same and not must:
            count = sum(not torch.equal(a, b) for a, b in zip(got, want, strict=True))
            print(f"     ({count} of {steps} steps differ)")
        report(f"{label} prompt {prompt}: keys at capacity {capacity}",
               torch.stack((cache.keys, cache.values))[:, :, :, :, :n], want_cache, must)


print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), kernels "
      f"{torch.backends.cpu.get_cpu_capability()} (ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY')})")

for width, seed in ((1024, 1), (256, 2)):
    upstream, ours = pair(lm_dict(hidden_size=width), seed)
    for prompt in (1, 7, 100, 509, 700):
        decode_case(f"LM {width} wide", upstream, ours, prompt, 24)

# muP, long factors (max 4096 > original 1024), token embeddings scaled by the model file's expression
data = lm_dict(use_mup=True, vocab_size=300, max_position_embeddings=4096,
               rope_scaling=dict(type="longrope", long_factor=FACTORS, short_factor=[1.0] * 64,
                                 original_max_position_embeddings=1024))
upstream, ours = pair(data, 3)
with torch.no_grad():
    ids = torch.randint(0, 300, (1, 40), generator=torch.Generator().manual_seed(3))
    embedded = upstream.embed_tokens(ids) * upstream.config.scale_emb
    report("muP LM: embeddings", ours.embed(ids), embedded)
    report("muP LM: LongRoPE cos", ours.rope.cos, upstream.rope_emb.cos_cached)
    report("muP LM: prefill", ours(embedded)[0], upstream(embedded)[0])
decode_case("muP LM", upstream, ours, 1020, 12, lengths=(4096,))  # decode positions past the original 1024

# the local stacks at VoxCPM2's widths (2 layers instead of 12), derived from the LM's config as upstream does
lm = lm_dict()
local = dict(hidden_size=1024, intermediate_size=512, num_attention_heads=16, num_hidden_layers=2, kv_channels=128,
             vocab_size=0)


def derived(**changes):
    config = MiniCPM4Config.model_validate(lm).model_copy(deep=True)
    for key, value in changes.items():
        setattr(config, key, value)
    return config


ours_config = MiniCPMConfig.from_dict(lm).local(1024, 512, 16, 2, 128)
with torch.no_grad():
    upstream = randomise(VoxCPMLocEnc(derived(**local), input_dim=64), 4)
    ours = LocalEncoder(ours_config, 64).eval()
    ours.load_state_dict(upstream.state_dict())
    feats = randn(1, 30, 4, 64, seed=4)
    report("local encoder, 30 patches", ours(feats), upstream(feats))
    patch = randn(1, 1, 4, 64, seed=5)
    report("local encoder, one patch", ours(patch), upstream(patch))
    for version, cls, width in ((1, VoxCPMLocDiT, 1024), (2, VoxCPMLocDiTV2, 2048)):
        upstream = randomise(cls(derived(**local), in_channels=64), 5 + version)
        ours = LocalDiT(ours_config, 64, version).eval()
        ours.load_state_dict(upstream.state_dict())
        x, cond, mu = randn(1, 64, 4, seed=7), randn(1, 64, 4, seed=8), randn(1, width, seed=9)
        args = (torch.cat((x, x)), torch.cat((mu, torch.zeros_like(mu))), torch.full((2,), 0.61),
                torch.cat((cond, cond)), torch.zeros(2))
        report(f"local DiT v{version}, guided batch", ours(*args), upstream(*args))
        args = args[:4] + (torch.full((2,), 0.13),)
        report(f"local DiT v{version}, mean-mode dt", ours(*args), upstream(*args))

print(f"{len(FAILED)} failed" + (f": {', '.join(FAILED)}" if FAILED else ""))
sys.exit(1 if FAILED else 0)
