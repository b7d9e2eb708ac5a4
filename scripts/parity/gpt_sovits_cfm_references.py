#!/usr/bin/env python
"""Reference outputs of GPT-SoVITS v3/v4's flow-matching mel generator, written by upstream's own `CFM` and `DiT` from
an RVC-Boss/GPT-SoVITS checkout (GitHub only: tests/fallback.py compares on a machine whose floats differ).

    python scripts/parity/gpt_sovits_cfm_references.py OUTDIR --checkout PATH            # the set
    python scripts/parity/gpt_sovits_cfm_references.py OUTDIR --checkout PATH --spread   # how far it moves

The interpreter: scripts/parity/gpt_sovits_upstream_env.sh (module/models.py imports einops, f5_tts imports
x-transformers).

One tiny DiT (the released one is DiT(dim=1024, depth=22, heads=16, ff_mult=2, text_dim=512, conv_layers=4) for v3
and v4; here dim 64, depth 2, 4 heads of 16, so that the rotation of head 0 alone is observable), every parameter
from gpt_sovits_cfm_weights.cfm_fill (nothing left at upstream's zero init), wrapped in module/models.py's
CFM(100, dit) as SynthesizerTrnV3 wraps it. Recorded: the DiT's forward on a batch of two with a prompt part, with
full and with padded lengths (the key-padding mask and the zeroed padded frames), and with drop_audio_cond and
drop_text; CFM.inference after torch.manual_seed(seed) (the noise from the global generator) for one row at 4 and 8
steps, a batch of three with one x_lens entry and a (1, 100, P) prompt broadcast over the rows (as
TTS.using_vocoder_synthesis_batched_infer calls it), classifier-free guidance (inference_cfg_rate 0.7) and
temperature 0.875. OUTDIR/references.safetensors holds the inputs, upstream's inv_freq buffer and outputs;
OUTDIR/references.json the config, the parameters' names and shapes (the test rebuilds them), every state-dict
name (a checkpoint's, under cfm.) and the cases.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt_sovits_cfm_weights import cfm_state  # noqa: E402
from pinned import (  # noqa: E402
    checkout_writer_main,
    is_spread_child,
    lifted_runs,
    pin_process,
    save_spread,
    write_checkout_tensors,
)

if "--spread" not in sys.argv and not is_spread_child():
    pin_process()

import torch  # noqa: E402

CONFIG = {"dim": 64, "depth": 2, "heads": 4, "dim_head": 16, "ff_mult": 2, "text_dim": 32, "conv_layers": 2,
          "mel_dim": 100}
SEED = 500
MELS = 100
# the DiT's forward: batch 2 over FRAMES frames, the prompt's first PROMPT frames
FRAMES, PROMPT = 40, 12
FORWARDS = {  # name: (x_lens, drop_audio_cond, drop_text)
    "full": ([FRAMES, FRAMES], False, False),
    "padded": ([FRAMES, FRAMES - 9], False, False),
    "dropped": ([FRAMES, FRAMES], True, True),
}
# CFM.inference: (name, batch, frames, prompt frames, steps, temperature, inference_cfg_rate, seed)
CASES = (
    ("one_4", 1, 50, 15, 4, 1.0, 0.0, 1),
    ("one_8", 1, 50, 15, 8, 1.0, 0.0, 2),
    ("batch3", 3, 44, 10, 4, 1.0, 0.0, 3),
    ("cfg", 1, 36, 9, 4, 1.0, 0.7, 4),
    ("temperature", 1, 36, 9, 3, 0.875, 0.0, 5),
)


def upstream(checkout: Path):
    sys.path.insert(0, str(checkout / "GPT_SoVITS"))
    sys.path.insert(0, str(checkout))  # f5_tts imports itself as GPT_SoVITS.f5_tts
    from f5_tts.model import DiT  # as module/models.py imports it
    from module.models import CFM

    return CFM, DiT


def build(checkout: Path):
    """Upstream's CFM(100, DiT(...)) with the seeded parameters (the buffers as upstream computes them)."""
    cfm_class, dit_class = upstream(checkout)
    model = cfm_class(MELS, dit_class(**CONFIG)).eval()
    entries = [(k, list(v.shape)) for k, v in model.named_parameters()]
    with torch.no_grad():
        for name, value in cfm_state(entries, SEED).items():
            model.get_parameter(name).copy_(value)
    return model, entries


def outputs(checkout: Path) -> tuple[dict, dict]:
    model, entries = build(checkout)
    g = torch.Generator().manual_seed(21)
    refs = {"inv_freq": model.estimator.rotary_embed.inv_freq.clone()}
    info = {"config": CONFIG, "seed": SEED, "entries": entries, "state_dict": list(model.state_dict()), "forwards": {},
            "cases": {}}
    refs["forward/x"] = torch.randn(2, MELS, FRAMES, generator=g)
    cond = torch.zeros(2, MELS, FRAMES)
    cond[..., :PROMPT] = torch.randn(2, MELS, PROMPT, generator=g)
    refs["forward/cond"] = cond
    refs["forward/text"] = torch.randn(2, CONFIG["text_dim"], FRAMES, generator=g)
    refs["forward/time"] = torch.rand(2, generator=g)
    refs["forward/d"] = torch.tensor([1 / 8, 1 / 32])
    with torch.inference_mode():
        for name, (lengths, drop_audio, drop_text) in FORWARDS.items():
            refs[f"forward/{name}"] = model.estimator(
                refs["forward/x"], refs["forward/cond"], torch.LongTensor(lengths), refs["forward/time"],
                refs["forward/d"], refs["forward/text"], drop_audio_cond=drop_audio, drop_text=drop_text)
            info["forwards"][name] = {"x_lens": lengths, "drop_audio_cond": drop_audio, "drop_text": drop_text}
        for name, batch, frames, prompt, steps, temperature, cfg, seed in CASES:
            refs[f"{name}/mu"] = torch.randn(batch, frames, CONFIG["text_dim"], generator=g)
            refs[f"{name}/prompt"] = torch.randn(1, MELS, prompt, generator=g)
            torch.manual_seed(seed)
            refs[f"{name}/mel"] = model.inference(refs[f"{name}/mu"], torch.LongTensor([frames]),
                                                  refs[f"{name}/prompt"], steps, temperature=temperature,
                                                  inference_cfg_rate=cfg)
            info["cases"][name] = {"batch": batch, "frames": frames, "prompt": prompt, "steps": steps,
                                   "temperature": temperature, "inference_cfg_rate": cfg, "seed": seed}
    return {k: v.contiguous().clone() for k, v in refs.items()}, info


FLOATS = (*(f"forward/{n}" for n in FORWARDS), *(f"{c[0]}/mel" for c in CASES))


def write(out: Path, checkout: Path) -> None:
    refs, info = outputs(checkout)
    write_checkout_tensors(out, refs, info, checkout,
                           "module/models.py CFM.inference and f5_tts/model/backbones/dit.py DiT.forward",
                           ["torch", "einops", "x-transformers"])


def spread(out: Path, checkout: Path) -> None:
    """Max |difference| of each output between the pinned run and runs with a pin lifted: OUTDIR/spread.json."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = lifted_runs(__file__, ["--checkout", checkout], tmp)
    pinned = runs.pop("pinned")
    report = {label: {k: float((r[k] - pinned[k]).abs().max()) for k in FLOATS} for label, r in runs.items()}
    save_spread(out, report, FLOATS)


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
