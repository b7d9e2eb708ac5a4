#!/usr/bin/env python
"""Reference outputs of upstream's flow-matching sampler (voxcpm 2.0.3 `UnifiedCFM`) and of its two small
heads, for tests/engines/test_voxcpm_cfm.py.

Usage, in upstream's venv (scripts/parity/voxcpm_upstream_env.sh):
    python scripts/parity/voxcpm_cfm_references.py [OUTDIR]     # default tests/parity/data/voxcpm/cfm
(restarts itself with ATEN_CPU_CAPABILITY=avx2; runs at one thread)

Writes OUTDIR/references.safetensors (C-contiguous float32 / bfloat16-as-float32 / int64 arrays) and
OUTDIR/references.json (cases, options, seeds, tensor names, environment):

- toy/*: `UnifiedCFM.forward` with a small closed-form estimator (`toy_velocity`, defined identically in
  the test) in place of the DiT, so the sampler's noise draw, grid, Euler steps, guidance batch and
  CFG-Zero* are checked without a DiT port. Each case: the estimator's weights, mu, cond, seed, options,
  the output and, for some, every estimator call's inputs. `toy/probe/*` pins the estimator itself.
- dit_v1/*, dit_v2/*: the same with upstream's own `VoxCPMLocDiT` / `VoxCPMLocDiTV2` on a tiny
  MiniCPM4Config (every parameter randomised, RMSNorm weights included): the state dict, the config,
  the sampler outputs, and one direct estimator call per DiT.
- heads/*: `ScalarQuantizationLayer` (eval) in float32 and bfloat16, and the stop predictor
  (stop_proj, SiLU, stop_head, argmax) as `VoxCPM2Model` builds and calls them.

Upstream draws the noise from the global generator: each case seeds it with `torch.manual_seed(seed)`
right before the call; ours is given `torch.Generator().manual_seed(seed)`.
"""

import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import environment, pin_process, write_references  # noqa: E402  (beside this script)

pin_process()

import torch  # noqa: E402
from voxcpm.modules.layers.scalar_quantization_layer import ScalarQuantizationLayer  # noqa: E402
from voxcpm.modules.locdit import CfmConfig, UnifiedCFM, VoxCPMLocDiT, VoxCPMLocDiTV2  # noqa: E402
from voxcpm.modules.minicpm4 import MiniCPM4Config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/parity/data/voxcpm/cfm"
REFS, CASES = {}, {}

FEAT, PATCH, MU_DIM = 4, 4, 6  # the toy sampler's feat_dim, patch size and mu width


def put(name, tensor):
    assert name not in REFS, name
    t = tensor.detach()
    REFS[name] = (t.float() if t.is_floating_point() else t.long()).contiguous().numpy()
    return name


# --- the toy estimator: a copy of tests/engines/test_voxcpm_cfm.py's `toy_velocity` (keep them equal) ---


def toy_velocity(weights, x, mu, t, cond, dt):
    """A smooth function of every input the sampler passes: noise x (N, C, P), mu (N, H), t (N,),
    cond (N, C, P'), dt (N,) -> (N, C, P)."""
    h = torch.matmul(weights["x"], x)
    h = h + torch.matmul(mu, weights["mu"].transpose(0, 1))[:, :, None]
    h = h + torch.matmul(weights["cond"], cond).mean(dim=2, keepdim=True)
    h = h + weights["t"][None, :, None] * t[:, None, None] + weights["dt"][None, :, None] * dt[:, None, None]
    return (torch.tanh(h) * 1.5 - 0.5 * x) * weights["gain"]


def toy_weights(seed: int, dtype=torch.float32, gain: float = 1.0) -> dict:
    g = torch.Generator().manual_seed(seed)
    shapes = {"x": (FEAT, FEAT), "mu": (FEAT, MU_DIM), "cond": (FEAT, FEAT), "t": (FEAT,), "dt": (FEAT,)}
    weights = {k: (torch.rand(s, generator=g) * 2 - 1).to(dtype) for k, s in shapes.items()}
    return {**weights, "gain": torch.tensor(gain, dtype=dtype)}


# ---------------------------------------------------------------------------------------------------


class Recorder(torch.nn.Module):
    """The estimator as upstream holds it, recording each call's inputs."""

    def __init__(self, fn):
        super().__init__()
        self.fn, self.calls = fn, []

    def forward(self, x, mu, t, cond, dt):
        self.calls.append([a.clone() for a in (x, mu, t, cond, dt)])
        return self.fn(x, mu, t, cond, dt)


def run_upstream(estimator, mu, cond, seed, options, mean_mode=False):
    cfm = UnifiedCFM(in_channels=cond.shape[1], cfm_params=CfmConfig(), estimator=estimator, mean_mode=mean_mode)
    torch.manual_seed(seed)
    return cfm(mu=mu, n_timesteps=options["n_timesteps"], patch_size=options["patch_size"], cond=cond,
               temperature=options["temperature"], cfg_value=options["cfg_value"],
               sway_sampling_coef=options["sway_sampling_coef"], use_cfg_zero_star=options["use_cfg_zero_star"])


def options_of(**changes):
    base = dict(n_timesteps=10, patch_size=PATCH, cfg_value=2.0, sway_sampling_coef=1.0, use_cfg_zero_star=True,
                temperature=1.0)
    return {**base, **changes}


TOY_CASES = {  # name: (batch, prefix, dtype, mean_mode, record calls, option changes)
    "default": (1, PATCH, "float32", False, True, {}),
    "batch2": (2, PATCH, "float32", False, True, {}),
    "steps7_cfg1.3": (1, PATCH, "float32", False, False, dict(n_timesteps=7, cfg_value=1.3)),
    "steps49": (1, PATCH, "float32", False, False, dict(n_timesteps=49)),  # two zero-velocity steps (int(50·0.04))
    "no_zero_star": (2, PATCH, "float32", False, True, dict(use_cfg_zero_star=False)),
    "mean_mode": (2, PATCH, "float32", True, True, {}),
    "sway0": (1, PATCH, "float32", False, False, dict(sway_sampling_coef=0.0)),
    "sway_negative": (1, PATCH, "float32", False, False, dict(sway_sampling_coef=-1.0)),
    "temperature": (1, PATCH, "float32", False, False, dict(temperature=0.7)),
    "cfg1": (1, PATCH, "float32", False, False, dict(cfg_value=1.0)),
    "cfg0": (1, PATCH, "float32", False, False, dict(cfg_value=0.0)),
    "one_step": (1, PATCH, "float32", False, False, dict(n_timesteps=1)),  # all steps zero velocity: the noise
    "prefix2": (2, 2, "float32", False, False, dict(patch_size=3)),  # cond shorter than, and patch unlike, 4
    "bfloat16": (2, PATCH, "bfloat16", False, True, dict(cfg_value=1.7)),
    "tiny_velocity": (2, PATCH, "float32", False, False, {}),  # |v|² near st*'s 1e-8 guard
}


def toy_cases():
    probe_w = toy_weights(99)
    g = torch.Generator().manual_seed(98)
    probe = [torch.randn(3, FEAT, PATCH, generator=g), torch.randn(3, MU_DIM, generator=g), torch.rand(3, generator=g),
             torch.randn(3, FEAT, 2, generator=g), torch.rand(3, generator=g)]
    for k, v in probe_w.items():
        put(f"toy/probe/w_{k}", v)
    for name, t in zip(("x", "mu", "t", "cond", "dt"), probe, strict=True):
        put(f"toy/probe/{name}", t)
    put("toy/probe/out", toy_velocity(probe_w, *probe))

    for index, (name, (batch, prefix, dtype_name, mean_mode, record, changes)) in enumerate(TOY_CASES.items()):
        dtype = getattr(torch, dtype_name)
        options = options_of(**changes)
        seed = 1000 + index
        w = toy_weights(index, dtype, 3e-5 if name == "tiny_velocity" else 1.0)
        g = torch.Generator().manual_seed(2000 + index)
        mu = torch.randn(batch, MU_DIM, generator=g).to(dtype)
        cond = torch.randn(batch, FEAT, prefix, generator=g).to(dtype)
        recorder = Recorder(lambda *a, w=w: toy_velocity(w, *a))
        out = run_upstream(recorder, mu, cond, seed, options, mean_mode)
        case = {"batch": batch, "dtype": dtype_name, "mean_mode": mean_mode, "seed": seed, "options": options,
                "calls": len(recorder.calls), "weights": {k: put(f"toy/{name}/w_{k}", v) for k, v in w.items()},
                "mu": put(f"toy/{name}/mu", mu), "cond": put(f"toy/{name}/cond", cond),
                "out": put(f"toy/{name}/out", out)}
        if record:
            case["recorded"] = [[put(f"toy/{name}/call{i}/{arg}", a)
                                 for arg, a in zip(("x", "mu", "t", "cond", "dt"), call, strict=True)]
                                for i, call in enumerate(recorder.calls)]
        CASES[f"toy/{name}"] = case


# ---------------------------------------------------------------------------------------------------
# Upstream's DiTs


def dit_config(kv_channels):
    head_dim = kv_channels or 32 // 4
    g = torch.Generator().manual_seed(head_dim)
    long_factor = [round(1 + 3 * float(v), 4) for v in torch.rand(head_dim // 2, generator=g)]
    short_factor = [round(1 + float(v), 4) for v in torch.rand(head_dim // 2, generator=g)]
    config = dict(bos_token_id=1, eos_token_id=2, hidden_size=32, intermediate_size=64, max_position_embeddings=64,
                num_attention_heads=4, num_hidden_layers=2, num_key_value_heads=2, rms_norm_eps=1e-5,
                rope_scaling=dict(type="longrope", original_max_position_embeddings=32,
                                  long_factor=long_factor, short_factor=short_factor),
                vocab_size=0, use_mup=True, scale_emb=12.0, dim_model_base=16, scale_depth=1.4, rope_theta=10000.0,
                no_rope=False)
    if kv_channels is not None:  # pydantic refuses None: a config without it is what the checkpoints have
        config["kv_channels"] = kv_channels
    return config


def randomise(module, seed):
    """Every parameter from its own generator (name order): weights ~ U(±sqrt(3/fan_in)), biases small,
    RMSNorm weights around 1 (upstream starts them at 1)."""
    with torch.no_grad():
        for index, (name, p) in enumerate(sorted(module.named_parameters())):
            g = torch.Generator().manual_seed(seed + index)
            u = torch.rand(p.shape, generator=g) * 2 - 1
            if "norm" in name:
                p.copy_(1 + 0.3 * u)
            elif name.endswith("bias"):
                p.copy_(0.1 * u)
            else:
                p.copy_(u * math.sqrt(3.0 / (p[0].numel() if p.dim() > 1 else p.numel())))


DIT_CASES = {  # name: (batch, seed, mean_mode, option changes)
    "b1": (1, 21, False, {}),
    "b2_cfg1.5": (2, 22, False, dict(cfg_value=1.5)),
    "mean_mode": (1, 23, True, dict(n_timesteps=6)),
}


def dit_cases():
    for version, cls, kv_channels in (("v1", VoxCPMLocDiT, None), ("v2", VoxCPMLocDiTV2, 12)):
        config = dit_config(kv_channels)
        dit = cls(MiniCPM4Config(**config), in_channels=FEAT).eval()
        randomise(dit, 500 if version == "v1" else 600)
        prefix = f"dit_{version}"
        state = {k: put(f"{prefix}/state/{k}", v) for k, v in dit.state_dict().items()}
        mu_dim = 32 if version == "v1" else 64  # v2's mu is [lm_to_dit, res_to_dit] concatenated
        g = torch.Generator().manual_seed(7 if version == "v1" else 8)
        # one direct call, batch 2·2, as the sampler makes it
        args = [torch.randn(4, FEAT, PATCH, generator=g), torch.randn(4, mu_dim, generator=g),
                torch.rand(4, generator=g), torch.randn(4, FEAT, PATCH, generator=g), torch.rand(4, generator=g) * 0.2]
        with torch.inference_mode():
            direct = dit(*args)
        CASES[f"{prefix}/direct"] = {"args": [put(f"{prefix}/direct/{n}", a) for n, a in
                                              zip(("x", "mu", "t", "cond", "dt"), args, strict=True)],
                                     "out": put(f"{prefix}/direct/out", direct)}
        for name, (batch, seed, mean_mode, changes) in DIT_CASES.items():
            options = options_of(**changes)
            mu = torch.randn(batch, mu_dim, generator=g)
            cond = torch.randn(batch, FEAT, PATCH, generator=g)
            out = run_upstream(dit, mu, cond, seed, options, mean_mode)
            CASES[f"{prefix}/{name}"] = {"batch": batch, "dtype": "float32", "mean_mode": mean_mode, "seed": seed,
                                         "options": options, "mu": put(f"{prefix}/{name}/mu", mu),
                                         "cond": put(f"{prefix}/{name}/cond", cond),
                                         "out": put(f"{prefix}/{name}/out", out)}
        CASES[prefix] = {"version": int(version[1]), "class": f"{cls.__module__}.{cls.__name__}", "in_channels": FEAT,
                         "config": config, "state": state}


# ---------------------------------------------------------------------------------------------------
# Heads


def heads_cases():
    g = torch.Generator().manual_seed(40)
    for dtype_name in ("float32", "bfloat16"):
        dtype = getattr(torch, dtype_name)
        fsq = ScalarQuantizationLayer(32, 24, latent_dim=16, scale=9).eval()
        randomise(fsq, 700)
        fsq = fsq.to(dtype)
        hidden = (torch.randn(3, 5, 32, generator=g) * 2).to(dtype)
        with torch.inference_mode():
            out = fsq(hidden)
        CASES[f"heads/fsq_{dtype_name}"] = {
            "dtype": dtype_name, "in_dim": 32, "out_dim": 24, "latent_dim": 16, "scale": 9,
            "state": {k: put(f"heads/fsq_{dtype_name}/state/{k}", v) for k, v in fsq.state_dict().items()},
            "hidden": put(f"heads/fsq_{dtype_name}/hidden", hidden), "out": put(f"heads/fsq_{dtype_name}/out", out)}

    # the stop predictor as VoxCPM2Model holds it
    stop_proj, stop_head = torch.nn.Linear(32, 32), torch.nn.Linear(32, 2, bias=False)
    holder = torch.nn.Module()
    holder.stop_proj, holder.stop_actn, holder.stop_head = stop_proj, torch.nn.SiLU(), stop_head
    randomise(holder, 800)
    hidden = torch.randn(6, 32, generator=g) * 2
    with torch.inference_mode():
        logits = holder.stop_head(holder.stop_actn(holder.stop_proj(hidden)))
        flags = logits.argmax(dim=-1)
    assert 0 < int(flags.sum()) < len(flags), "want both decisions among the rows"
    CASES["heads/stop"] = {
        "state": {k: put(f"heads/stop/state/{k}", v) for k, v in holder.state_dict().items()},
        "hidden": put("heads/stop/hidden", hidden), "logits": put("heads/stop/logits", logits),
        "argmax": put("heads/stop/argmax", flags)}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    toy_cases()
    dit_cases()
    heads_cases()
    write_references(REFS, OUT / "references.safetensors")
    info = {"cases": CASES, "environment": environment(["voxcpm", "torch", "safetensors"]),
            "note": "float tensors stored as float32 (bfloat16 cases convert exactly); compare bitwise"}
    (OUT / "references.json").write_text(json.dumps(info, indent=1) + "\n")
    size = (OUT / "references.safetensors").stat().st_size
    print(f"wrote {len(REFS)} tensors ({size} bytes), {len(CASES)} cases to {OUT}")


if __name__ == "__main__":
    main()
