#!/usr/bin/env python
"""Reference outputs of seed-vc 0.4.3's v2 CFM (modules/v2/cfm.py), its DiT (dit_wrapper.py + dit_model.py) and its
length regulator (modules/v2/length_regulator.py) for tests/engines/test_seedvc_dit_v2.py.

Usage, in upstream's venv (scripts/parity/seedvc_upstream_env.sh):
    python scripts/parity/seedvc_dit_v2_references.py [OUTDIR]     # default tests/parity/data/seedvc_dit_v2
(restarts itself under the parity pins: one thread, avx2, MKL_CBWR, oneDNN off)

Models: upstream's own classes built from yaml-style sections as vc_wrapper.yaml's hydra build calls them, eval():
- `tiny`: the tiny v2 model's `cfm.estimator` (scripts/parity/seedvc_v2_models.py: time and style tokens,
  block_size 8192) with its `cfm_length_regulator` (wide codes, ratios [1, 1, 1, 1]) and `ar_length_regulator`
  (narrow codes, no ratios);
- `flipped`: every flag the other way (no time token, no style token, uvit_skip_connection true: a no-op upstream),
  another width, 4 heads, 32 mel channels, block_size 256 whose rotary table is replaced by a perturbed float32
  one (loaded into upstream's bfloat16 buffer, so it is rounded there; the test hands the same float32 table to
  load_cfm), and a continuous regulator (in_channels, groups 2, out_channels differing: the 1x1 conv).
Every parameter is filled by `fill` (seedvc_weights.s2mel_fill, the test's too) from its own seeded generator,
zero-inits included (mask_token); only names, shapes and seeds are stored, plus the perturbed table and the sha256
of upstream's own (computed) `freqs_cis`.

Cases (inputs and outputs stored whole):
- <config>/dit/direct: one estimator call, batch 2 with padding (x_lens differing), under inference_mode; and
  <config>/dit/autocast_bfloat16 the same call under CPU bfloat16 autocast (its bfloat16 output stored as float32);
- <config>/regulator/<name>: the regulators (stretching, shrinking; no ratios; a (B, 1, T) id input);
- <config>/cfm/<name>: `cfm.inference` for step counts 1..10, every guidance branch (two rates, one zero, both
  zero, random_voice), prompts of 0 and more frames, temperatures; the global generator seeded with
  `torch.manual_seed(seed)` right before the call (the test seeds a torch.Generator the same); one case under
  float16 CPU autocast with a float16 style, as upstream's style path calls it.
Upstream's guided branches only run with a batch of one; the flipped config's unguided case runs a batch of two.
"""

import hashlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import environment, pin_process, write_references  # noqa: E402  (beside this script)
from seedvc_weights import s2mel_fill as fill  # noqa: E402  (the test's too)

pin_process()

import seed_vc  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(seed_vc.__file__))  # upstream imports itself as top-level `modules.*`

from modules.v2.cfm import CFM  # noqa: E402
from modules.v2.dit_wrapper import DiT  # noqa: E402
from modules.v2.length_regulator import InterpolateRegulator  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/parity/data/seedvc_dit_v2"
REFS, CASES = {}, {}
BIG_BUFFER = "estimator.transformer.causal_mask"  # never stored (the tiny model's file lacks it too)

ESTIMATOR = {"class_dropout_prob": 0.1, "dropout_rate": 0.0, "attn_dropout_rate": 0.0}
CONFIGS = {
    "tiny": {
        "estimator": {**ESTIMATOR, "time_as_token": True, "style_as_token": True, "uvit_skip_connection": False,
                      "block_size": 8192, "depth": 3, "num_heads": 2, "hidden_dim": 48, "in_channels": 80,
                      "content_dim": 40, "style_encoder_dim": 192},
        "regulators": {
            "cfm": {"channels": 40, "is_discrete": True, "codebook_size": 64, "sampling_ratios": [1, 1, 1, 1],
                    "f0_condition": False},
            "ar": {"channels": 64, "is_discrete": True, "codebook_size": 8, "sampling_ratios": [],
                   "f0_condition": False}},
    },
    "flipped": {
        "estimator": {**ESTIMATOR, "time_as_token": False, "style_as_token": False, "uvit_skip_connection": True,
                      "block_size": 256, "depth": 4, "num_heads": 4, "hidden_dim": 64, "in_channels": 32,
                      "content_dim": 24, "style_encoder_dim": 16},
        "regulators": {
            "continuous": {"channels": 24, "is_discrete": False, "in_channels": 12, "sampling_ratios": [1, 1],
                           "groups": 2, "out_channels": 20, "f0_condition": False}},
    },
}
# name: (regulator, input kind, frames in, ylens or None)
REGULATOR_CASES = {
    "tiny": {"stretch": ("cfm", "ids", 20, [37, 29]), "shrink": ("cfm", "ids", 30, [17, 30]),
             "ar_tokens": ("ar", "ids", 23, None), "ar_codebooks": ("ar", "ids3", 11, None)},
    "flipped": {"continuous_stretch": ("continuous", "features", 13, [25, 19]),
                "continuous_shrink": ("continuous", "features", 13, [7, 11])},
}
# name: (batch, frames, prompt frames, steps, (intelligibility, similarity), temperature, random_voice)
CFM_CASES = {
    "tiny": {"steps10_both": (1, 75, 20, 10, (0.7, 0.7), 1.0, False),
             "steps1_both": (1, 40, 12, 1, (0.7, 0.7), 1.0, False),
             "steps4_similarity": (1, 33, 9, 4, (0.0, 0.5), 1.0, False),
             "steps3_intelligibility_no_prompt": (1, 30, 0, 3, (0.5, 0.0), 0.6, False),
             "steps2_unguided": (1, 28, 7, 2, (0.0, 0.0), 1.0, False),
             "steps3_random_voice": (1, 31, 8, 3, (0.7, 0.3), 0.8, True),
             "steps3_both_autocast_float16": (1, 27, 8, 3, (0.7, 0.7), 1.0, False)},
    "flipped": {"steps5_both": (1, 29, 6, 5, (0.4, 0.9), 1.0, False),
                "b2_steps2_unguided": (2, 26, 5, 2, (0.0, 0.0), 1.0, False),
                "steps2_random_voice_no_rate": (1, 22, 0, 2, (0.0, 0.7), 1.0, True)},
}


def put(name, tensor):
    assert name not in REFS, name
    t = tensor.detach()
    REFS[name] = (t.float() if t.is_floating_point() else t.long()).contiguous().numpy()
    return name


def sha256(tensor) -> str:
    return hashlib.sha256(tensor.detach().float().contiguous().numpy().astype("<f4").tobytes()).hexdigest()


def fill_module(module, seed: int) -> dict:
    """Every parameter from `fill`, each from its own generator in sorted-name order; what the test needs to
    rebuild them."""
    parameters = dict(module.named_parameters())
    names = sorted(parameters)
    with torch.no_grad():
        for index, name in enumerate(names):
            parameters[name].copy_(fill(name, tuple(parameters[name].shape), seed + index))
    return {"seed": seed, "params": [[n, list(parameters[n].shape)] for n in names]}


def build(name: str, config: dict, seed: int):
    section = {k: v for k, v in config["estimator"].items()}
    cfm = CFM(DiT(**section))
    record = {"estimator": config["estimator"], "cfm": fill_module(cfm, seed)}
    table = cfm.estimator.transformer.freqs_cis
    assert table.dtype == torch.bfloat16, table.dtype
    record["cfm"]["computed_freqs_cis"] = {"shape": list(table.shape), "sha256": sha256(table)}
    if name == "flipped":  # a table of the file's own: float32 values, rounded into upstream's bf16 buffer
        g = torch.Generator().manual_seed(seed + 999)
        perturbed = table.float() * (1 + 0.05 * (torch.rand(table.shape, generator=g) * 2 - 1))
        missing, unexpected = cfm.load_state_dict({"estimator.transformer.freqs_cis": perturbed}, strict=False)
        assert not unexpected and cfm.estimator.transformer.freqs_cis.dtype == torch.bfloat16
        record["cfm"]["freqs_cis"] = put(f"{name}/freqs_cis", perturbed)
    record["cfm"]["state_keys"] = [k for k in cfm.state_dict() if k != BIG_BUFFER]
    regulators = {}
    for index, (reg_name, reg_section) in enumerate(config["regulators"].items()):
        kwargs = {k: v for k, v in reg_section.items()}
        regulator = InterpolateRegulator(**kwargs)
        record[f"regulator/{reg_name}"] = {"section": reg_section,
                                           **fill_module(regulator, seed + 5000 + 1000 * index),
                                           "state_keys": list(regulator.state_dict())}
        regulators[reg_name] = regulator.eval()
    return cfm.eval(), regulators, record


def regulator_cases(name, config, regulators, g):
    for case, (reg_name, kind, frames, ylens) in REGULATOR_CASES[name].items():
        section = config["regulators"][reg_name]
        batch = 2 if ylens is None or len(ylens) == 2 else 1
        if kind == "features":
            x = torch.randn(batch, frames, section["in_channels"], generator=g)
        elif kind == "ids3":
            x = torch.randint(0, section["codebook_size"], (batch, 2, frames), generator=g)
        else:
            x = torch.randint(0, section["codebook_size"], (batch, frames), generator=g)
        lens = None if ylens is None else torch.tensor(ylens, dtype=torch.long)
        with torch.inference_mode():
            out, olens = regulators[reg_name](x, ylens=lens)
        entry = {"regulator": reg_name, "x": put(f"{name}/regulator/{case}/x", x),
                 "out": put(f"{name}/regulator/{case}/out", out)}
        if lens is not None:
            entry["ylens"] = put(f"{name}/regulator/{case}/ylens", lens)
            assert olens is lens
        CASES[f"{name}/regulator/{case}"] = entry


def dit_case(name, config, cfm, g):
    section, frames = config["estimator"], 21
    x = torch.randn(2, section["in_channels"], frames, generator=g)
    prompt_x = torch.randn(2, section["in_channels"], frames, generator=g)
    prompt_x[0, :, 9:] = 0
    prompt_x[1, :, 5:] = 0
    x_lens = torch.tensor([frames, frames - 7])
    t = torch.rand(2, generator=g)
    style = torch.randn(2, section["style_encoder_dim"], generator=g)
    cond = torch.randn(2, frames, section["content_dim"], generator=g)
    with torch.inference_mode():
        out = cfm.estimator(x, prompt_x, x_lens, t, style, cond)
    args = [put(f"{name}/dit/direct/{arg}", value) for arg, value in
            zip(("x", "prompt_x", "x_lens", "t", "style", "cond"), (x, prompt_x, x_lens, t, style, cond), strict=True)]
    CASES[f"{name}/dit/direct"] = {"args": args, "out": put(f"{name}/dit/direct/out", out)}
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = cfm.estimator(x, prompt_x, x_lens, t, style, cond)
    assert out.dtype == torch.bfloat16
    CASES[f"{name}/dit/autocast_bfloat16"] = {"args": args, "autocast": "bfloat16",
                                              "out": put(f"{name}/dit/autocast_bfloat16/out", out)}


def cfm_cases(name, config, cfm, g, base_seed):
    section = config["estimator"]
    for index, (case, spec) in enumerate(CFM_CASES[name].items()):
        batch, frames, prompt_len, steps, rates, temperature, random_voice = spec
        mu = torch.randn(batch, frames, section["content_dim"], generator=g)
        x_lens = torch.tensor([frames] + [frames - 9] * (batch - 1))
        prompt = torch.randn(batch, section["in_channels"], prompt_len, generator=g)
        style = torch.randn(batch, section["style_encoder_dim"], generator=g)
        seed = base_seed + index
        autocast = case.endswith("_autocast_float16")
        if autocast:  # the style path's call: under float16 autocast, CAM++'s style float16 (stored as float32)
            style = style.half()
        torch.manual_seed(seed)
        with torch.autocast("cpu", dtype=torch.float16, enabled=autocast):
            out = cfm.inference(mu, x_lens, prompt, style, steps, temperature=temperature,
                                inference_cfg_rate=list(rates), random_voice=random_voice)
        assert out.dtype == torch.float32
        after = torch.rand(4)  # where the global generator stands: one randn of (B, C, T) drawn
        CASES[f"{name}/cfm/{case}"] = {
            "mu": put(f"{name}/cfm/{case}/mu", mu), "x_lens": put(f"{name}/cfm/{case}/x_lens", x_lens),
            "prompt": put(f"{name}/cfm/{case}/prompt", prompt), "style": put(f"{name}/cfm/{case}/style", style),
            "seed": seed, "steps": steps, "cfg_rates": list(rates), "temperature": temperature,
            "random_voice": random_voice, "autocast": "float16" if autocast else None,
            "out": put(f"{name}/cfm/{case}/out", out),
            "after": put(f"{name}/cfm/{case}/after", after)}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    configs = {}
    for index, (name, config) in enumerate(CONFIGS.items()):
        seed = 100 * (index + 1)
        cfm, regulators, record = build(name, config, seed)
        configs[name] = record
        g = torch.Generator().manual_seed(seed + 1)
        regulator_cases(name, config, regulators, g)
        dit_case(name, config, cfm, g)
        cfm_cases(name, config, cfm, g, seed + 10)
    for key, array in REFS.items():
        if array.dtype.kind == "f" and array.size:
            assert (abs(array) < 1e4).all(), key
    write_references(REFS, OUT / "references.safetensors")
    info = {"configs": configs, "cases": CASES,
            "environment": environment(["seed-vc", "torch", "numpy", "safetensors"]),
            "note": "weights from `fill` (not stored); float tensors float32, integers int64; compare bitwise"}
    (OUT / "references.json").write_text(json.dumps(info, indent=1) + "\n")
    size = (OUT / "references.safetensors").stat().st_size
    print(f"wrote {len(REFS)} tensors ({size} bytes), {len(CASES)} cases to {OUT}")


if __name__ == "__main__":
    main()
