#!/usr/bin/env python
"""Reference outputs of v2Pro / v2ProPlus's speaker encoder, written by upstream's own code from an
RVC-Boss/GPT-SoVITS checkout (GitHub only: tests/fallback.py compares on a machine whose floats differ): the Kaldi
filterbank of eres2net/kaldi.py and eres2net/ERes2NetV2.py's `forward3`, as sv.SV.compute_embedding3 runs them.

    python scripts/parity/gpt_sovits_speaker_references.py OUTDIR --checkout PATH            # the set
    python scripts/parity/gpt_sovits_speaker_references.py OUTDIR --checkout PATH --spread   # how far it moves

Two small ERes2NetV2s (the released w24 s4 e4 blocks at narrower widths, so the test runs in seconds; the
released model is the same code at m_channels 64 and blocks 3-4-6-3), weights from gpt_sovits_weights.speaker_fill
(every batch-norm statistic moved off its initial value), on two 16 kHz recordings. OUTDIR/references.safetensors
holds the recordings, upstream's filterbanks and embeddings; OUTDIR/references.json the configs, the state dicts'
names and shapes (the test rebuilds the weights from them) and the cases.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt_sovits_weights import speaker_state  # noqa: E402
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

# ERes2NetV2's constructor arguments (upstream's names); sv.SV builds baseWidth 24, scale 4, expansion 4
MODELS = {
    "narrow": {"args": {"baseWidth": 24, "scale": 4, "expansion": 4, "m_channels": 8, "num_blocks": [2, 1, 2, 1]},
               "seed": 300},
    "wider": {"args": {"baseWidth": 24, "scale": 4, "expansion": 4, "m_channels": 16, "num_blocks": [1, 2, 1, 1]},
              "seed": 400},
}
WAVES = {"speech": 1.3, "short": 0.7}  # seconds at 16 kHz


def upstream(checkout: Path):
    sys.path.insert(0, str(checkout / "GPT_SoVITS" / "eres2net"))  # sv.py puts this folder on sys.path too
    import kaldi
    from ERes2NetV2 import ERes2NetV2

    return ERes2NetV2, kaldi


def build(checkout: Path, name: str):
    network, _ = upstream(checkout)
    model = network(**MODELS[name]["args"]).eval()
    entries = [(k, list(v.shape)) for k, v in model.state_dict().items()]
    model.load_state_dict(speaker_state(entries, MODELS[name]["seed"]))
    return model, entries


def outputs(checkout: Path) -> tuple[dict, dict]:
    _, kaldi = upstream(checkout)
    g = torch.Generator().manual_seed(12)
    refs, info = {}, {"models": {}, "cases": []}
    for wave, seconds in WAVES.items():
        samples = int(16000 * seconds)
        t = torch.arange(samples) / 16000
        refs[f"{wave}/wave"] = (0.3 * torch.sin(2 * torch.pi * 180 * t) * torch.sin(2 * torch.pi * 3 * t)
                                + 0.05 * torch.randn(samples, generator=g))[None]
        # compute_embedding3: Kaldi.fbank of each recording (wav0.unsqueeze(0)), stacked
        refs[f"{wave}/fbank"] = torch.stack([kaldi.fbank(w.unsqueeze(0), num_mel_bins=80, sample_frequency=16000,
                                                         dither=0) for w in refs[f"{wave}/wave"]])
    with torch.no_grad():
        for name in MODELS:
            model, entries = build(checkout, name)
            info["models"][name] = {**MODELS[name], "entries": entries}
            for wave in WAVES:
                refs[f"{name}/{wave}/embedding"] = model.forward3(refs[f"{wave}/fbank"].clone())
                info["cases"].append(f"{name}/{wave}")
    return {k: v.contiguous().clone() for k, v in refs.items()}, info


FLOATS = (*(f"{w}/fbank" for w in WAVES), *(f"{m}/{w}/embedding" for m in MODELS for w in WAVES))


def write(out: Path, checkout: Path) -> None:
    refs, info = outputs(checkout)
    write_checkout_tensors(out, refs, info, checkout,
                           "eres2net/kaldi.py fbank and eres2net/ERes2NetV2.py forward3 (sv.SV.compute_embedding3)",
                           ["torch"])


def spread(out: Path, checkout: Path) -> None:
    """Max |difference| of each output between the pinned run and runs with a pin lifted: OUTDIR/spread.json."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = lifted_runs(__file__, ["--checkout", checkout], tmp)
    pinned = runs.pop("pinned")
    report = {label: {k: float((r[k] - pinned[k]).abs().max()) for k in FLOATS} for label, r in runs.items()}
    save_spread(out, report, FLOATS)


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
