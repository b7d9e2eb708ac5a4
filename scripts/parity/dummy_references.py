#!/usr/bin/env python
"""Reference outputs for the dummy engine's code decoder, written by transformers' own Qwen3 (4.57.3): the first
user of the fallback comparison that GitHub-only upstreams get on a foreign machine (tests/fallback.py).

The dummy's decoder is the shared QwenDecoder; its upstream is transformers' Qwen3Model. This set is treated as
if that upstream could not be installed where the tests run (no oracle environment in reference_sets.py), so
on a machine whose fingerprint differs the test compares within measured tolerances instead of rewriting it.

    python scripts/parity/dummy_references.py OUTDIR            # the set (normally via reference_sets.py write dummy)
    python scripts/parity/dummy_references.py --spread OUTDIR   # how far the outputs move when the pins are lifted

Writes OUTDIR/model.safetensors (the dummy checkpoint: built-in weights, seed 0, norms and biases random),
OUTDIR/references.safetensors (prompt embeddings and upstream's outputs: prefill hidden states and logits, the
greedy tokens and each step's logits) and OUTDIR/references.json (what is where, versions, the pins, and with
--spread the measured spread the test's tolerances are set from).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import PINS, pin_process  # noqa: E402  (beside this script)

SPREAD = "--spread" in sys.argv
MEASURE = os.environ.get("DUMMY_REFERENCES_UNPINNED") == "1"  # a child of --spread: run as its env says
if not SPREAD and not MEASURE:
    pin_process()

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

TEXT = "fallback parity"
STEPS = 24  # greedy decode steps recorded after the prefill
OUTPUTS = ("prefill/hidden", "prefill/logits", "decode/logits")


def upstream_decoder(decoder):
    """transformers' Qwen3Model with the dummy decoder's sizes and weights."""
    import transformers

    c = decoder.config
    config = transformers.Qwen3Config(vocab_size=c.vocab_size, hidden_size=c.hidden_size,
                                      intermediate_size=c.intermediate_size, num_hidden_layers=c.num_layers,
                                      num_attention_heads=c.num_heads, num_key_value_heads=c.num_kv_heads,
                                      head_dim=c.head_dim, rope_theta=c.rope_theta, rms_norm_eps=c.rms_norm_eps,
                                      max_position_embeddings=4096, attention_bias=False, tie_word_embeddings=False)
    config._attn_implementation = "sdpa"
    model = transformers.Qwen3Model(config).eval()
    model.load_state_dict(decoder.state_dict(), strict=True)
    return model


def build_checkpoint(out: Path):
    """The dummy's built-in weights with every norm gain and bias off its usual start, saved as a checkpoint."""
    from mizuoto.engines.dummy import engine

    model = engine.build()
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=generator))
    engine.save(model, out / "model.safetensors")
    return model


def upstream_outputs(model) -> dict[str, torch.Tensor]:
    """Upstream's prefill on the dummy's prompt (the text's states and the start code), then STEPS greedy steps
    on its own KV cache; EOS is never chosen, so every step is recorded."""
    from mizuoto.engines.dummy import engine
    from mizuoto.runtime.context import RequestContext

    config = model.config
    loaded = engine.DummyLoaded(model, "parity", None, None)
    (states,) = engine.text_states(loaded, [TEXT], RequestContext())
    head = model.code_head
    with torch.inference_mode():
        start = model.decoder.embed(torch.full((1, 1), config.start_code))
        prompt = torch.cat([model.bridge(states[None]), start], dim=1)
        upstream = upstream_decoder(model.decoder)
        out = upstream(inputs_embeds=prompt, use_cache=True)
        hidden, cache = out.last_hidden_state, out.past_key_values
        logits = torch.nn.functional.linear(hidden[:, -1], head.weight, head.bias).float()
        refs = {"prompt": prompt[0], "prefill/hidden": hidden[0], "prefill/logits": logits[0]}
        tokens, step_logits = [], []
        for _ in range(STEPS):
            token = logits[:, : config.codes].argmax(-1, keepdim=True)
            tokens.append(token[0, 0])
            out = upstream(input_ids=token, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            logits = torch.nn.functional.linear(out.last_hidden_state[:, -1], head.weight, head.bias).float()
            step_logits.append(logits[0])
        refs["decode/tokens"] = torch.stack(tokens)
        refs["decode/logits"] = torch.stack(step_logits)
    return {k: v.contiguous().clone() for k, v in refs.items()}


def write(out: Path) -> None:
    from importlib import metadata

    from pinned import environment

    out.mkdir(parents=True, exist_ok=True)
    model = build_checkpoint(out)
    refs = upstream_outputs(model)
    save_file(refs, str(out / "references.safetensors"))
    back = load_file(str(out / "references.safetensors"))
    assert all(torch.equal(back[k], refs[k]) for k in refs)
    info = {"text": TEXT, "steps": STEPS, "tensors": {k: list(v.shape) for k, v in refs.items()},
            "upstream": {"transformers": metadata.version("transformers"), "model": "Qwen3Model (sdpa)"},
            "environment": environment(["transformers", "safetensors"])}
    spread_file = out / "spread.json"
    if spread_file.exists():  # measured earlier by --spread into this folder: keep it with the references
        info["spread"] = json.loads(spread_file.read_text())
    (out / "references.json").write_text(json.dumps(info, indent=1) + "\n")


# The environments --spread runs the same computation in: each lifts one pin (or all) on this machine.
LIFTED = {
    "no pins (machine defaults, 2 threads)": {"unset": list(PINS), "threads": 2, "mkldnn": True},
    "ATEN_CPU_CAPABILITY=avx512": {"set": {"ATEN_CPU_CAPABILITY": "avx512"}},
    "MKL_CBWR unset": {"unset": ["MKL_CBWR"]},
    "oneDNN on": {"mkldnn": True},
    "2 threads": {"threads": 2},
}


def spread(out: Path) -> None:
    """Max |difference| of each output between the pinned run and runs with pins lifted, written to
    OUTDIR/spread.json: the tolerances of tests/parity/test_dummy_fallback.py are set from it."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = {}
        for label, change in {"pinned": {}, **LIFTED}.items():
            env = {**os.environ, **PINS, "DUMMY_REFERENCES_UNPINNED": "1"}
            for name in change.get("unset", []):
                env.pop(name, None)
            env.update(change.get("set", {}))
            env["DUMMY_THREADS"] = str(change.get("threads", 1))
            env["DUMMY_MKLDNN"] = "1" if change.get("mkldnn") else "0"
            target = Path(tmp) / str(len(runs))
            subprocess.run([sys.executable, __file__, str(target)], env=env, check=True)
            runs[label] = load_file(str(target / "references.safetensors"))
    pinned = runs.pop("pinned")
    report = {label: {k: float((r[k] - pinned[k]).abs().max()) for k in OUTPUTS}
              | {"tokens_equal": bool(torch.equal(r["decode/tokens"], pinned["decode/tokens"]))}
              for label, r in runs.items()}
    report["max"] = {k: max(r[k] for r in report.values()) for k in OUTPUTS}
    out.mkdir(parents=True, exist_ok=True)
    (out / "spread.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    target = Path([a for a in sys.argv[1:] if not a.startswith("--")][0])
    if SPREAD:
        spread(target)
    elif MEASURE:
        torch.set_num_threads(int(os.environ["DUMMY_THREADS"]))
        torch.backends.mkldnn.enabled = os.environ["DUMMY_MKLDNN"] == "1"
        target.mkdir(parents=True, exist_ok=True)
        refs = upstream_outputs(build_checkpoint(target))
        save_file(refs, str(target / "references.safetensors"))
    else:
        write(target)
