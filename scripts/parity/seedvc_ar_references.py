#!/usr/bin/env python
"""Reference generations of seed-vc 0.4.3's v2 style converter (modules/v2/ar.py: `NaiveWrapper.generate` over a
`NaiveTransformer` with KV caches) for tests/engines/test_seedvc_ar.py.

Usage, in upstream's venv (scripts/parity/seedvc_upstream_env.sh):
    python scripts/parity/seedvc_ar_references.py [OUTDIR]     # default tests/parity/data/seedvc_ar
(restarts itself under the parity pins: one thread, avx2, MKL_CBWR, oneDNN off)

Models: upstream's own classes built from yaml-style `ar` sections as vc_wrapper.yaml's hydra build calls them,
then `setup_caches(max_batch_size=1, max_seq_len=4096, dtype, cpu)` as the wrapper's setup_ar_caches, eval():
- `tiny`: the tiny v2 model's AR (scripts/parity/seedvc_v2_models.py: 4 query heads over 2 key/value heads, 2
  layers, vocabulary 65 with EOS 64; its yaml head_dim 16 is overridden by dim // n_head as upstream does);
- `wide`: no GQA (n_local_heads -1), attention_qkv_bias on, intermediate_size left to upstream's rule, another
  rope_base and norm_eps, 3 layers, vocabulary 97.
Every parameter is filled by `fill` (seedvc_weights.s2mel_fill, the test's too) from its own seeded generator in
sorted-name order; only names, shapes and seeds are stored.

Cases: `generate(cond, prompt, top_p, temperature, repetition_penalty)` for conditions of several lengths, prompts
of 0 (anonymization's call) and more tokens, the default sampling and others (top-p below 1, temperatures, the
repetition penalty that reads the first token only), in float32 with float32 caches and under float16 CPU autocast
with float16 caches and a float16 condition (the style path's call in upstream's default precision). The global
generator is seeded with `torch.manual_seed(seed)` right before each call (the test seeds a torch.Generator the
same). Recorded: the inputs, the tokens, every step's logits (a wrapper around `forward_generate`, what runs
unchanged), and the generator's state after (one torch.rand(4)).
"""

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

from modules.v2.ar import NaiveModelArgs, NaiveTransformer, NaiveWrapper  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/parity/data/seedvc_ar"
REFS, CASES = {}, {}

CONFIGS = {
    "tiny": {"dropout": 0.0, "rope_base": 10000.0, "dim": 64, "head_dim": 16, "n_local_heads": 2,
             "intermediate_size": 96, "n_head": 4, "n_layer": 2, "vocab_size": 65},
    "wide": {"dropout": 0.0, "rope_base": 5000.0, "dim": 48, "n_head": 3, "n_layer": 3, "vocab_size": 97,
             "attention_qkv_bias": True, "norm_eps": 1e-6},
}
# name: (config, condition tokens, prompt tokens, precision, seed, sampling keywords)
DEFAULT = {"top_p": 0.9, "temperature": 1.0, "repetition_penalty": 1.0}  # convert_voice's defaults
GENERATIONS = {
    "tiny/default": ("tiny", 37, 52, "float32", 11, DEFAULT),
    "tiny/anonymization": ("tiny", 23, 0, "float32", 12, DEFAULT),
    "tiny/sampling": ("tiny", 41, 30, "float32", 13, {"top_p": 0.7, "temperature": 0.7, "repetition_penalty": 1.5}),
    "tiny/top_p_1": ("tiny", 9, 5, "float32", 14, {"top_p": 1.0, "temperature": 1.3, "repetition_penalty": 0.6}),
    "tiny/float16": ("tiny", 37, 52, "float16", 11, DEFAULT),
    "tiny/float16_sampling": ("tiny", 29, 0, "float16", 15, {"top_p": 0.8, "temperature": 0.9,
                                                             "repetition_penalty": 1.3}),
    "wide/default": ("wide", 31, 44, "float32", 21, DEFAULT),
    "wide/float16": ("wide", 18, 27, "float16", 22, {"top_p": 0.95, "temperature": 1.1, "repetition_penalty": 1.2}),
}


def put(name, tensor):
    assert name not in REFS, name
    t = tensor.detach()
    REFS[name] = (t.float() if t.is_floating_point() else t.long()).contiguous().numpy()
    return name


def build(name: str, section: dict, seed: int, dtype: torch.dtype):
    wrapper = NaiveWrapper(NaiveTransformer(NaiveModelArgs(**section)))
    parameters = dict(wrapper.named_parameters())
    names = sorted(parameters)
    with torch.no_grad():
        for index, key in enumerate(names):
            parameters[key].copy_(fill(key, tuple(parameters[key].shape), seed + index))
    wrapper.eval()
    wrapper.setup_caches(max_batch_size=1, max_seq_len=4096, dtype=dtype, device=torch.device("cpu"))
    record = {"section": {"model": {"config": section}}, "seed": seed,
              "params": [[n, list(parameters[n].shape)] for n in names],
              "state_keys": list(wrapper.state_dict())}
    return wrapper, record


def generate(wrapper, case: str, spec: tuple, g: torch.Generator) -> dict:
    config, cond_len, prompt_len, precision, seed, sampling = spec
    dim, vocab = wrapper.model.config.dim, wrapper.model.config.vocab_size
    cond = torch.randn(1, cond_len, dim, generator=g)
    prompt = torch.randint(0, vocab - 1, (1, prompt_len), generator=g)
    float16 = precision == "float16"
    given = cond.half() if float16 else cond  # the AR regulator's output under float16 autocast
    for layer in wrapper.model.layers:  # a fresh cache per call (the wrapper reuses its own; generate overwrites)
        layer.attention.kv_cache.k_cache.zero_()
        layer.attention.kv_cache.v_cache.zero_()
    logits = []
    original = wrapper.model.forward_generate

    def recording(*args, **kwargs):
        out = original(*args, **kwargs)
        logits.append(out.logits[0, -1].detach().clone())
        return out

    wrapper.model.forward_generate = recording
    try:
        torch.manual_seed(seed)
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.float16, enabled=float16):
            tokens = wrapper.generate(given, prompt, **sampling)
        after = torch.rand(4)
    finally:
        del wrapper.model.forward_generate
    n = tokens.shape[-1]
    assert tokens.shape == (1, n) and len(logits) == n + (n <= 4000), (tokens.shape, len(logits))
    return {"config": config, "precision": precision, "seed": seed, "sampling": sampling,
            "cond": put(f"{case}/cond", cond), "prompt": put(f"{case}/prompt", prompt),
            "tokens": tokens[0].long().tolist(), "logits": put(f"{case}/logits", torch.stack(logits)),
            "logits_dtype": str(logits[0].dtype).removeprefix("torch."), "after": put(f"{case}/after", after)}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    configs, wrappers = {}, {}
    for index, (name, section) in enumerate(CONFIGS.items()):
        for precision, dtype in (("float32", torch.float32), ("float16", torch.float16)):
            wrappers[name, precision], configs[name] = build(name, section, 1000 * (index + 1), dtype)
    g = torch.Generator().manual_seed(7)
    for case, spec in GENERATIONS.items():
        CASES[case] = generate(wrappers[spec[0], spec[3]], case, spec, g)
        print(f"{case}: {len(CASES[case]['tokens'])} tokens", file=sys.stderr)
    write_references(REFS, OUT / "references.safetensors")
    info = {"configs": configs, "cases": CASES,
            "environment": environment(["seed-vc", "torch", "numpy", "safetensors"]),
            "note": "weights from `fill` (not stored); float tensors float32 (float16 logits widened), integers int64; "
                    "tokens as lists; compare bitwise"}
    (OUT / "references.json").write_text(json.dumps(info, indent=1) + "\n")
    size = (OUT / "references.safetensors").stat().st_size
    print(f"wrote {len(REFS)} tensors ({size} bytes), {len(CASES)} cases to {OUT}")


if __name__ == "__main__":
    main()
