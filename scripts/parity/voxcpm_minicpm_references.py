#!/usr/bin/env python
"""Build tiny random upstream MiniCPM stacks, local encoder and local DiTs (voxcpm 2.0.3) and write their
inputs, weights and outputs for tests/engines/test_voxcpm_minicpm.py, with upstream's own modules.

Usage, in a venv holding upstream (scripts/parity/voxcpm_upstream_env.sh):
    python scripts/parity/voxcpm_minicpm_references.py [OUTDIR]     (default tests/parity/data/voxcpm/minicpm)
It re-executes itself with ATEN_CPU_CAPABILITY=avx2 and runs at one thread.

Writes OUTDIR/references.safetensors (every tensor, C-contiguous float32 / int64) and OUTDIR/references.json
(the configs exactly as upstream's pydantic models received them, the cases, the environment).

Models (every parameter re-randomised, norms and the special token included: upstream starts norms at one):
  lm_mup_long    base-LM-like: 32 wide, 4/2 heads (GQA), head dim 8, 2 layers, vocab 40, muP on (scale_emb 12,
                 scale_depth 1.4), max_position_embeddings 160 > original 32: long factors and a scale != 1;
                 decode positions run past the original context
  lm_plain_short residual-LM-like with RoPE (v1): 24 wide, 2/1 heads, kv_channels 16 (!= 24 / 2), muP off,
                 max == original: short factors (a single factor, broadcast as upstream does), scale 1; batch 2
  lm_no_rope     lm_mup_long's residual LM as VoxCPM2 derives it (1 layer, vocab 0, no_rope)
  encoder        VoxCPMLocEnc on lm_mup_long's config derived as upstream derives it (16 wide, 2 heads over the
                 LM's 2 key/value heads, kv_channels 8), feat_dim 4, patches of 3
  dit_v1, dit_v2 VoxCPMLocDiT / VoxCPMLocDiTV2, 16 wide, 4 heads over 2 (GQA), kv_channels 8, 2 layers, muP
                 inherited; the solver's guided batch (mu zeroed in its second half), dt zero and non-zero
Decoding uses upstream's StaticKVCache with max_length 128 (the tests run ours at smaller capacities).
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import environment, pin_process, write_references  # noqa: E402

pin_process()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from voxcpm.modules.locdit import VoxCPMLocDiT, VoxCPMLocDiTV2  # noqa: E402
from voxcpm.modules.locenc import VoxCPMLocEnc  # noqa: E402
from voxcpm.modules.minicpm4 import MiniCPM4Config, MiniCPMModel  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parents[2] / "tests/parity/data/voxcpm/minicpm"
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT
OUT.mkdir(parents=True, exist_ok=True)
CACHE_LENGTH = 128  # upstream's StaticKVCache max_length here (4096 / 8192 in the released configs)
REFS = {}


def put(name, t):
    a = t.detach().cpu().contiguous().numpy() if torch.is_tensor(t) else np.asarray(t)
    assert name not in REFS, name
    REFS[name] = np.ascontiguousarray(a)


def randomise(module, seed):
    """Every parameter from its own generator, in name order: weights of variance 1/fan_in, norms around
    one, biases small, embeddings and the special token of unit scale."""
    with torch.no_grad():
        for index, (name, p) in enumerate(sorted(module.named_parameters())):
            u = torch.rand(p.shape, generator=torch.Generator().manual_seed(seed * 1000 + index)) * 2 - 1
            if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                p.copy_(1 + 0.3 * u)
            elif name.endswith("bias"):
                p.copy_(0.1 * u)
            elif "embed_tokens" in name or name.endswith("special_token"):
                p.copy_(u * 1.7)
            else:
                p.copy_(u * (3.0 / p.shape[1]) ** 0.5)


def weights(model_name, module):
    for name, t in module.state_dict().items():
        put(f"{model_name}/weights/{name}", t)


def randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def lm_config(**over):
    base = dict(bos_token_id=1, eos_token_id=2, hidden_size=32, intermediate_size=48, max_position_embeddings=160,
                num_attention_heads=4, num_hidden_layers=2, num_key_value_heads=2, rms_norm_eps=1e-5,
                rope_scaling=dict(type="longrope", long_factor=[1.0, 1.3, 2.1, 4.7], short_factor=[1.0, 1.1, 1.4, 1.9],
                                  original_max_position_embeddings=32),
                vocab_size=40, use_mup=True, scale_emb=12, dim_model_base=256, scale_depth=1.4, rope_theta=10000)
    base.update(over)
    return base


CONFIGS = {
    "lm_mup_long": lm_config(),
    "lm_plain_short": lm_config(hidden_size=24, num_attention_heads=2, num_key_value_heads=1, kv_channels=16,
                                vocab_size=0, use_mup=False, max_position_embeddings=128,
                                rope_scaling=dict(type="longrope", long_factor=[3.0], short_factor=[1.25],
                                                  original_max_position_embeddings=128)),
}
CASES = {}


def derived(base, **changes):
    """upstream's derivation: model_copy(deep=True), then plain attribute assignment."""
    config = MiniCPM4Config.model_validate(base).model_copy(deep=True)
    for key, value in changes.items():
        setattr(config, key, value)
    return config


# --------------------------------------------------------------------------------------------------
# The LMs: prefill (causal and bidirectional), the prefill's keys/values, decode steps on the static cache


def lm_case(name, config, seed, batch, prompt, steps, bidirectional_length):
    model = MiniCPMModel(config).eval()
    randomise(model, seed)
    weights(name, model)
    if model.rope_emb is not None:
        put(f"{name}/rope_cos", model.rope_emb.cos_cached)
        put(f"{name}/rope_sin", model.rope_emb.sin_cached)
    hidden = config.hidden_size
    with torch.no_grad():
        x = randn(batch, prompt, hidden, seed=seed + 1)
        if config.vocab_size > 0:  # the base LM's text embeddings, scaled as the model files scale them
            ids = torch.randint(0, config.vocab_size, (batch, prompt), generator=torch.Generator().manual_seed(seed))
            put(f"{name}/ids", ids)
            scale = config.scale_emb if config.use_mup else 1.0
            x = model.embed_tokens(ids) * scale
            put(f"{name}/embedded", x)
        put(f"{name}/prefill_in", x)
        out, kv = model(x, is_causal=True)
        put(f"{name}/prefill_out", out)
        for i, (k, v) in enumerate(kv):
            put(f"{name}/prefill_k{i}", k)
            put(f"{name}/prefill_v{i}", v)
        xb = randn(batch, bidirectional_length, hidden, seed=seed + 2)
        put(f"{name}/bidirectional_in", xb)
        put(f"{name}/bidirectional_out", model(xb, is_causal=False)[0])
        model.setup_cache(batch, CACHE_LENGTH, "cpu", torch.float32)
        model.kv_cache.fill_caches(kv)
        for s in range(steps):
            xs = randn(batch, hidden, seed=seed + 10 + s)
            put(f"{name}/step{s}_in", xs)
            position = torch.tensor([model.kv_cache.step()])
            put(f"{name}/step{s}_out", model.forward_step(xs, position).clone())
        n = prompt + steps
        put(f"{name}/cache_k", model.kv_cache.kv_cache[0][:, :, :, :n])
        put(f"{name}/cache_v", model.kv_cache.kv_cache[1][:, :, :, :n])
    CASES[name] = dict(kind="lm", config=config.model_dump(), batch=batch, prompt=prompt, steps=steps,
                       cache_length=CACHE_LENGTH, bidirectional_length=bidirectional_length)


lm_case("lm_mup_long", MiniCPM4Config.model_validate(CONFIGS["lm_mup_long"]), seed=11, batch=1, prompt=29, steps=7,
        bidirectional_length=40)
lm_case("lm_plain_short", MiniCPM4Config.model_validate(CONFIGS["lm_plain_short"]), seed=23, batch=2, prompt=6,
        steps=5, bidirectional_length=7)
lm_case("lm_no_rope", derived(CONFIGS["lm_mup_long"], num_hidden_layers=1, vocab_size=0, no_rope=True), seed=37,
        batch=1, prompt=9, steps=4, bidirectional_length=5)

# --------------------------------------------------------------------------------------------------
# The local encoder and the DiTs, on configs derived from lm_mup_long as voxcpm2.py derives them

LOCAL = dict(hidden_size=16, intermediate_size=32, num_attention_heads=2, num_hidden_layers=1, kv_channels=8,
             vocab_size=0)
DIT = dict(hidden_size=16, intermediate_size=32, num_attention_heads=4, num_hidden_layers=2, kv_channels=8,
           vocab_size=0)
FEAT, PATCH = 4, 3

with torch.no_grad():
    config = derived(CONFIGS["lm_mup_long"], **LOCAL)
    encoder = VoxCPMLocEnc(config, input_dim=FEAT).eval()
    randomise(encoder, 51)
    weights("encoder", encoder)
    feats = randn(2, 3, PATCH, FEAT, seed=52)
    put("encoder/in", feats)
    put("encoder/out", encoder(feats))
    # what the decode loop encodes: one fresh (1, 1, P, D) patch. A fresh tensor, not a view into feats: on the
    # CPU small matrix products round differently for data at another alignment (1e-7 here), so every input
    # is fresh (64-byte aligned) memory, and the tests copy what they read from the file into fresh memory too.
    patch = feats[:1, -1:].clone()
    put("encoder/one_patch_in", patch)
    put("encoder/one_patch_out", encoder(patch))
    CASES["encoder"] = dict(kind="encoder", config=config.model_dump(), feat_dim=FEAT, patch=PATCH)

    for name, cls, mu_width, seed in (("dit_v1", VoxCPMLocDiT, 16, 61), ("dit_v2", VoxCPMLocDiTV2, 32, 71)):
        config = derived(CONFIGS["lm_mup_long"], **DIT)
        dit = cls(config, in_channels=FEAT).eval()
        randomise(dit, seed)
        weights(name, dit)
        b = 2  # the solver's guided batch: [conditional rows, the same rows with mu zeroed]
        x = randn(b, FEAT, PATCH, seed=seed + 1)
        mu = randn(b, mu_width, seed=seed + 2)
        cond = randn(b, FEAT, PATCH, seed=seed + 3)
        x_in, cond_in = torch.cat([x, x]), torch.cat([cond, cond])
        mu_in = torch.cat([mu, torch.zeros_like(mu)])
        for call, (t, dt) in enumerate(((0.7, 0.0), (0.35, 0.2))):
            t_in, dt_in = torch.full((2 * b,), t), torch.full((2 * b,), dt)
            for key, value in (("x", x_in), ("mu", mu_in), ("t", t_in), ("cond", cond_in), ("dt", dt_in)):
                put(f"{name}/call{call}_{key}", value)
            put(f"{name}/call{call}_out", dit(x_in, mu_in, t_in, cond_in, dt_in))
        CASES[name] = dict(kind="dit", version=1 if name == "dit_v1" else 2, config=config.model_dump(),
                           in_channels=FEAT, calls=2)

write_references(REFS, OUT / "references.safetensors")
info = {"cases": CASES, "tensors": sorted(REFS), "environment": environment(["voxcpm", "numpy", "safetensors"])}
(OUT / "references.json").write_text(json.dumps(info, indent=1) + "\n")
print(f"{len(REFS)} tensors, {sum(a.nbytes for a in REFS.values())} bytes -> {OUT}")
