#!/usr/bin/env python
"""Reference outputs of seed-vc 0.4.3's s2mel stack (the v1 DiT with its WaveNet tail, the length regulator and
the CFM sampler) for tests/nn/test_s2mel.py.

Usage, in upstream's venv (scripts/parity/seedvc_upstream_env.sh):
    python scripts/parity/seedvc_s2mel_references.py [OUTDIR]     # default tests/parity/data/nn/s2mel
(restarts itself under the parity pins: one thread, avx2, MKL_CBWR, oneDNN off)

Models: upstream's own `build_model(recursive_munch(model_params), stage='DiT')` then
`cfm.estimator.setup_caches(1, 8192)`, as seed-vc's inference builds them, for
- four tiny configurations, each with the flags of one preset or of a path no preset takes:
  `wavenet` (ENGINES.md §9's tiny build: whisper-small-wavenet's flags, U-ViT, long skip, WaveNet tail),
  `xlsr_tiny` (time and style as tokens, mlp tail, an even depth whose middle skip goes unused),
  `f0_44k` (128 mel channels, mlp tail, the F0-conditioned regulator),
  `causal` (is_causal, style_condition off, a dilated kernel-3 WaveNet, zero_prompt_speech_token, a regulator
  without sampling ratios);
- `real`: the whisper-small-wavenet preset's model_params as they are (512 x 13 x 8, WaveNet 512 x 8).
Every parameter is filled by `fill` (copied in the test: keep them equal) from its own seeded generator, zero-inits
included (mask tokens, the F0 mask); the weights are not stored, only each net's parameter names and shapes and
its buffers (the time embedders' frequencies; `input_pos` is checked to be arange(16384)).

Cases per configuration (inputs and outputs stored):
- regulator/*: the length regulator alone (stretching, shrinking or capped lengths; with F0 where conditioned);
- dit/*: one direct estimator call, batch 2 with padding (x_lens differing);
- cfm/*: `cfm.inference` with several step counts (1 included), guidance rates 0 and > 0, a prompt of length > 0
  (and 0), temperatures; upstream's global generator seeded with `torch.manual_seed(seed)` right before the call.

upstream's length_regulator imports `audiocodec.dac.nn.quantize.VectorQuantize`, whose package pulls audiotools'
missing dependencies: a stub module stands in for it (only `vector_quantize=True` builds one; no preset does).
"""

import copy
import json
import os
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import environment, pin_process, write_references  # noqa: E402  (beside this script)
from seedvc_weights import s2mel_fill as fill  # noqa: E402  (the test's too)

pin_process()

import numpy as np  # noqa: E402
import seed_vc  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

sys.path.insert(0, os.path.dirname(seed_vc.__file__))  # upstream imports itself as top-level `modules.*`
_stub = types.ModuleType("audiocodec.dac.nn.quantize")
_stub.VectorQuantize = type("VectorQuantize", (), {})  # never built: vector_quantize is False
sys.modules["audiocodec.dac.nn.quantize"] = _stub

from modules import length_regulator as upstream_regulator  # noqa: E402
from modules.commons import build_model, recursive_munch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/parity/data/nn/s2mel"
PRESETS = Path(seed_vc.__file__).parent / "configs" / "presets"
REFS, CASES = {}, {}


def put(name, tensor):
    assert name not in REFS, name
    t = tensor.detach()
    REFS[name] = (t.float() if t.is_floating_point() else t.long()).contiguous().numpy()
    return name


# ---------------------------------------------------------------------------------------------------------------


def base_params(dit, regulator, wavenet=None, style_dim=192):
    params = {"dit_type": "DiT", "reg_loss_type": "l1", "style_encoder": {"dim": style_dim},
              "length_regulator": {"is_discrete": False, "content_codebook_size": 2048,
                                   "sampling_ratios": [1, 1, 1, 1], "vector_quantize": False, "n_codebooks": 1,
                                   "quantizer_dropout": 0.0, "f0_condition": False, "n_f0_bins": 512, **regulator},
              "DiT": {"class_dropout_prob": 0.1, "block_size": 8192, "in_channels": 80, "style_condition": True,
                      "final_layer_type": "wavenet", "target": "mel", "content_codebook_size": 1024,
                      "content_type": "discrete", "f0_condition": False, "n_f0_bins": 512, "content_codebooks": 1,
                      "is_causal": False, "long_skip_connection": False, "zero_prompt_speech_token": False,
                      "time_as_token": False, "style_as_token": False, "uvit_skip_connection": True,
                      "add_resblock_in_transformer": False, **dit}}
    if wavenet is not None:
        params["wavenet"] = {"hidden_dim": 64, "num_layers": 2, "kernel_size": 5, "dilation_rate": 1,
                             "p_dropout": 0.2, "style_condition": True, **wavenet}
    return params


TINY = {
    "wavenet": base_params(dict(hidden_dim=64, num_heads=2, depth=3, content_dim=64, long_skip_connection=True),
                           dict(channels=64, in_channels=32), wavenet={}),
    "xlsr_tiny": base_params(dict(hidden_dim=48, num_heads=2, depth=4, content_dim=48, final_layer_type="mlp",
                                  time_as_token=True, style_as_token=True),
                             dict(channels=48, in_channels=40, n_codebooks=2, content_codebook_size=1024)),
    "f0_44k": base_params(dict(hidden_dim=64, num_heads=4, depth=5, in_channels=128, content_dim=64,
                               final_layer_type="mlp", f0_condition=True, n_f0_bins=256),
                          dict(channels=64, in_channels=48, f0_condition=True, n_f0_bins=256),
                          wavenet=dict(hidden_dim=64, num_layers=8)),  # present in the preset, unused by mlp
    "causal": base_params(dict(hidden_dim=32, num_heads=2, depth=2, content_dim=32, is_causal=True,
                               style_condition=False, uvit_skip_connection=False, zero_prompt_speech_token=True),
                          dict(channels=32, in_channels=24, sampling_ratios=[]),
                          wavenet=dict(hidden_dim=32, num_layers=3, kernel_size=3, dilation_rate=2,
                                       style_condition=False)),
}

# name: (frames in, ylens, F0 frames or None); per configuration the ones that apply
REGULATOR_CASES = {"stretch": (20, [37, 29], None), "shrink": (30, [17, 30], None), "capped": (20, [25, 14], None),
                   "f0": (20, [37, 29], 41), "real_stretch": (10, [19, 14], None)}
# name: (batch, frames, prompt frames, steps, cfg rate, temperature)
CFM_CASES = {
    "wavenet": {"steps10_cfg0.7": (1, 75, 20, 10, 0.7, 1.0), "steps1": (1, 75, 20, 1, 0.7, 1.0),
                "b2_cfg0": (2, 75, 12, 4, 0.0, 1.0), "temperature_no_prompt": (1, 40, 0, 3, 0.5, 0.6)},
    "xlsr_tiny": {"steps5_cfg0.7": (1, 31, 10, 5, 0.7, 1.0), "steps2_cfg0": (1, 31, 0, 2, 0.0, 1.0)},
    "f0_44k": {"steps4_cfg0.7": (1, 29, 7, 4, 0.7, 0.8), "steps1_cfg0": (1, 29, 7, 1, 0.0, 1.0)},
    "causal": {"steps3_cfg0.7": (1, 26, 6, 3, 0.7, 1.0), "b2_steps2_cfg0": (2, 26, 6, 2, 0.0, 1.0)},
    "real": {"steps2_cfg0.7": (1, 24, 8, 2, 0.7, 1.0)},
}


def build(params, seed):
    nets = build_model(recursive_munch(copy.deepcopy(params)), stage="DiT")
    cfm, regulator = nets.cfm.eval(), nets.length_regulator.eval()
    cfm.estimator.setup_caches(max_batch_size=1, max_seq_length=8192)
    record = {}
    for net_name, net, net_seed in (("cfm", cfm, seed), ("length_regulator", regulator, seed + 5000)):
        with torch.no_grad():
            names = sorted(name for name, _ in net.named_parameters())
            parameters = dict(net.named_parameters())
            for index, name in enumerate(names):
                parameters[name].copy_(fill(name, tuple(parameters[name].shape), net_seed + index))
        buffers = {}
        for name, buffer in net.named_buffers():
            if name.endswith("input_pos"):
                assert torch.equal(buffer, torch.arange(16384)), name
                continue
            buffers[name] = put(f"buffers/{seed}/{net_name}/{name}", buffer)
        record[net_name] = {"seed": net_seed, "params": [[n, list(parameters[n].shape)] for n in names],
                            "buffers": buffers, "state_keys": list(net.state_dict())}
    return cfm, regulator, record


def regulator_cases(name, params, regulator, g):
    section = params["length_regulator"]
    if name == "real":  # one case: real-size tensors are large to store
        wanted = ["real_stretch"]
    else:
        wanted = ["capped"] if not section["sampling_ratios"] else ["stretch", "shrink"]
    if section["f0_condition"]:
        wanted.append("f0")
    for case in wanted:
        frames, ylens, f0_frames = REGULATOR_CASES[case]
        x = torch.randn(len(ylens), frames, section["in_channels"], generator=g)
        lens = torch.tensor(ylens, dtype=torch.long)
        f0 = None
        if f0_frames:
            f0 = torch.rand(len(ylens), f0_frames, generator=g) * 1300 + 30  # 30 .. 1330 Hz: below and above range
            f0[:, ::5] = 0.0  # unvoiced frames
        with torch.inference_mode():
            out, olens, *_ = regulator(x, ylens=lens, n_quantizers=3, f0=f0)
        entry = {"x": put(f"{name}/regulator/{case}/x", x), "ylens": put(f"{name}/regulator/{case}/ylens", lens),
                 "out": put(f"{name}/regulator/{case}/out", out), "olens": put(f"{name}/regulator/{case}/olens", olens)}
        if f0 is not None:
            entry["f0"] = put(f"{name}/regulator/{case}/f0", f0)
            entry["coarse"] = put(f"{name}/regulator/{case}/coarse",
                                  upstream_regulator.f0_to_coarse(f0, section["n_f0_bins"]))
        CASES[f"{name}/regulator/{case}"] = entry


def dit_case(name, params, cfm, g, frames):
    dit, channels = params["DiT"], params["DiT"]["in_channels"]
    x = torch.randn(2, channels, frames, generator=g)
    prompt_x = torch.randn(2, channels, frames, generator=g)
    prompt_x[0, :, 9:] = 0
    prompt_x[1, :, 5:] = 0
    x_lens = torch.tensor([frames, frames - 7])
    t = torch.rand(2, generator=g)
    style = torch.randn(2, params["style_encoder"]["dim"], generator=g)
    cond = torch.randn(2, frames, dit["content_dim"], generator=g)
    with torch.inference_mode():
        out = cfm.estimator(x, prompt_x, x_lens, t, style, cond)
    args = [put(f"{name}/dit/direct/{arg}", value) for arg, value in
            zip(("x", "prompt_x", "x_lens", "t", "style", "cond"), (x, prompt_x, x_lens, t, style, cond), strict=True)]
    CASES[f"{name}/dit/direct"] = {"args": args, "out": put(f"{name}/dit/direct/out", out)}


def cfm_cases(name, params, cfm, g, base_seed):
    channels = params["DiT"]["in_channels"]
    for index, (case, (batch, frames, prompt_len, steps, rate, temperature)) in enumerate(CFM_CASES[name].items()):
        mu = torch.randn(batch, frames, params["length_regulator"]["channels"], generator=g)
        x_lens = torch.tensor([frames] + [frames - 9] * (batch - 1))
        prompt = torch.randn(batch, channels, prompt_len, generator=g)
        style = torch.randn(batch, params["style_encoder"]["dim"], generator=g)
        stored_mu = put(f"{name}/cfm/{case}/mu", mu)  # before the call: zero_prompt_speech_token writes into mu
        seed = base_seed + index
        torch.manual_seed(seed)
        out = cfm.inference(mu, x_lens, prompt, style, None, steps, temperature=temperature,
                            inference_cfg_rate=rate)
        CASES[f"{name}/cfm/{case}"] = {
            "mu": stored_mu, "x_lens": put(f"{name}/cfm/{case}/x_lens", x_lens),
            "prompt": put(f"{name}/cfm/{case}/prompt", prompt), "style": put(f"{name}/cfm/{case}/style", style),
            "seed": seed, "steps": steps, "cfg_rate": rate, "temperature": temperature,
            "out": put(f"{name}/cfm/{case}/out", out)}


def check_outputs():
    for key, array in REFS.items():
        if array.dtype.kind == "f" and array.size:
            assert np.isfinite(array).all() and np.abs(array).max() < 1e4, (key, np.abs(array).max())


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    configs = {}
    real = yaml.safe_load((PRESETS / "config_dit_mel_seed_uvit_whisper_small_wavenet.yml").read_text())
    everything = {**TINY, "real": real["model_params"]}
    for index, (name, params) in enumerate(everything.items()):
        seed = 100 * (index + 1)
        cfm, regulator, record = build(params, seed)
        configs[name] = {"model_params": params, **record}
        g = torch.Generator().manual_seed(seed + 1)
        regulator_cases(name, params, regulator, g)
        dit_case(name, params, cfm, g, 16 if name == "real" else 21)
        cfm_cases(name, params, cfm, g, seed + 10)
    check_outputs()
    presets = {path.name: yaml.safe_load(path.read_text())["model_params"] for path in sorted(PRESETS.glob("*.yml"))}
    write_references(REFS, OUT / "references.safetensors")
    info = {"configs": configs, "cases": CASES, "presets": presets,
            "f0_mel_range": [float(upstream_regulator.f0_mel_min), float(upstream_regulator.f0_mel_max)],
            "environment": environment(["seed-vc", "torch", "numpy", "safetensors"]),
            "note": "weights from `fill` (not stored); float tensors float32, integers int64; compare bitwise"}
    (OUT / "references.json").write_text(json.dumps(info, indent=1) + "\n")
    size = (OUT / "references.safetensors").stat().st_size
    print(f"wrote {len(REFS)} tensors ({size} bytes), {len(CASES)} cases to {OUT}")


if __name__ == "__main__":
    main()
