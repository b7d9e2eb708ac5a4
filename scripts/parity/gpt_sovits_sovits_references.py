#!/usr/bin/env python
"""Reference outputs of GPT-SoVITS's SoVITS synthesizer (v2 and v2ProPlus), written by upstream's own
`SynthesizerTrn` from an RVC-Boss/GPT-SoVITS checkout (GitHub only: tests/fallback.py compares on a machine whose
floats differ).

    python scripts/parity/gpt_sovits_sovits_references.py OUTDIR --checkout PATH            # the set
    python scripts/parity/gpt_sovits_sovits_references.py OUTDIR --checkout PATH --spread   # how far it moves

The interpreter: scripts/parity/gpt_sovits_upstream_env.sh (module/models.py imports einops and x-transformers).

Per model (tiny sizes where upstream lets them be chosen; MRTE's 192/512, the 768-channel SSL projection and the
704-bin style input are hard-coded upstream and kept): the weights from gpt_sovits_weights.sovits_fill, written
as upstream's savee writes a file (float16, v2ProPlus with its version tag), read back as TTS.init_vits_weights
reads it (the magic restored, load_state_dict(strict=False) into the float32 model). Then `decode` as TTS.run
calls it (a list of reference spectrograms, noise_scale 0.5, seeded like set_seed) for one and two references
and speeds 1, 1.25 and 0.8, the references' spectrograms computed from waveforms by upstream's spectrogram_torch,
and `extract_latent` on CN-HuBERT-sized features. OUTDIR/references.safetensors
holds the inputs and upstream's outputs; OUTDIR/references.json the configs, the state dicts' names and shapes
(the test rebuilds the files from them) and the cases.
"""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt_sovits_weights import sovits_file_bytes, sovits_state  # noqa: E402
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

TINY = {"inter_channels": 32, "hidden_channels": 192, "filter_channels": 64, "n_heads": 2, "n_layers": 2,
        "kernel_size": 3, "p_dropout": 0.0, "resblock": "1", "resblock_kernel_sizes": [3, 5],
        "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5]], "upsample_rates": [4, 4], "upsample_initial_channel": 32,
        "upsample_kernel_sizes": [8, 8], "n_layers_q": 3, "use_spectral_norm": False,
        "semantic_frame_rate": "25hz", "freeze_quantizer": True}
MODELS = {
    "v2": {"version": "v2", "model": {**TINY, "gin_channels": 512}, "seed": 100},
    "v2ProPlus": {"version": "v2ProPlus", "model": {**TINY, "gin_channels": 96}, "seed": 200},
}
SPEC_BINS = 720  # the references' spectrogram bins (upstream's v2 has 1025; the style encoder reads 704)
DATA = {"data": {"filter_length": 2 * (SPEC_BINS - 1), "hop_length": 640, "sampling_rate": 32000,
                 "win_length": 2 * (SPEC_BINS - 1), "n_speakers": 300}, "train": {"segment_size": 20480}}
# (name, model, references, speed, seed)
CASES = (
    ("v2_one", "v2", 1, 1.0, 1),
    ("v2_two_fast", "v2", 2, 1.25, 2),
    ("pro_one", "v2ProPlus", 1, 1.0, 3),
    ("pro_two_slow", "v2ProPlus", 2, 0.8, 4),
)
TOKENS, PHONES, FRAMES = 12, 9, (30, 23)


def upstream(checkout: Path):
    sys.path.insert(0, str(checkout / "GPT_SoVITS"))
    sys.path.insert(0, str(checkout))  # f5_tts imports itself as GPT_SoVITS.f5_tts
    from module.models import SynthesizerTrn

    return SynthesizerTrn


def config_of(spec: dict) -> dict:
    return {**DATA, "model": {**spec["model"], "version": spec["version"]}}


def build(checkout: Path, name: str):
    """Upstream's model with the seeded weights, read back from the file upstream's trainer would write."""
    spec = MODELS[name]
    config = config_of(spec)
    model = upstream(checkout)(DATA["data"]["filter_length"] // 2 + 1,
                               DATA["train"]["segment_size"] // DATA["data"]["hop_length"],
                               n_speakers=DATA["data"]["n_speakers"], **config["model"]).eval()
    entries = [(k, list(v.shape)) for k, v in model.state_dict().items()]
    data = sovits_file_bytes(sovits_state(entries, spec["seed"]), config, spec["version"])
    loaded = torch.load(io.BytesIO(b"PK" + data[2:]), map_location="cpu", weights_only=False)  # load_sovits_new
    model.load_state_dict(loaded["weight"], strict=False)
    return model, entries


def inputs() -> dict:
    g = torch.Generator().manual_seed(11)
    refs = {"codes": torch.randint(0, 1024, (1, 1, TOKENS), generator=g),
            "text": torch.randint(0, 732, (1, PHONES), generator=g),
            "ssl": torch.randn(1, 768, 40, generator=g)}
    for i, frames in enumerate(FRAMES):
        refs[f"wave{i}"] = torch.randn(1, frames * DATA["data"]["hop_length"], generator=g) * 0.3
        refs[f"sv{i}"] = torch.randn(1, 20480, generator=g)
    return refs


def spectrogram(checkout: Path, wave: torch.Tensor) -> torch.Tensor:
    """Upstream's mel_processing.spectrogram_torch as TTS._get_ref_spec calls it (center=False). The module imports
    librosa's mel filters at the top, which this function never reaches: a stand-in module satisfies the import."""
    import types

    upstream(checkout)
    if "librosa" not in sys.modules:
        librosa = types.ModuleType("librosa")
        librosa.filters = types.ModuleType("librosa.filters")
        librosa.filters.mel = None
        sys.modules["librosa"], sys.modules["librosa.filters"] = librosa, librosa.filters
    from module.mel_processing import spectrogram_torch

    d = DATA["data"]
    return spectrogram_torch(wave, d["filter_length"], d["sampling_rate"], d["hop_length"], d["win_length"],
                             center=False)


def outputs(checkout: Path) -> tuple[dict, dict]:
    data = inputs()
    for i in range(len(FRAMES)):
        data[f"refer{i}"] = spectrogram(checkout, data[f"wave{i}"])
    refs, info = dict(data), {"models": {}, "cases": {}}
    models = {}
    for name in MODELS:
        models[name], entries = build(checkout, name)
        info["models"][name] = {**MODELS[name], "config": config_of(MODELS[name]), "entries": entries}
    with torch.no_grad():
        for name, model_name, count, speed, seed in CASES:
            model = models[model_name]
            refers = [data[f"refer{i}"] for i in range(count)]
            sv = [data[f"sv{i}"] for i in range(count)] if model.is_v2pro else None
            torch.manual_seed(seed)
            refs[f"{name}/audio"] = model.decode(data["codes"], data["text"], refers, noise_scale=0.5, speed=speed,
                                                 sv_emb=sv)
            info["cases"][name] = {"model": model_name, "references": count, "speed": speed, "seed": seed}
        refs["latent"] = models["v2"].extract_latent(data["ssl"]).long()
    return {k: v.contiguous().clone() for k, v in refs.items()}, info


FLOATS = ("refer0", "refer1", *(f"{c[0]}/audio" for c in CASES))


def write(out: Path, checkout: Path) -> None:
    refs, info = outputs(checkout)
    write_checkout_tensors(out, refs, info, checkout,
                           "module/models.py SynthesizerTrn.decode and extract_latent (as TTS.run calls them)",
                           ["torch", "einops", "x-transformers"])


def spread(out: Path, checkout: Path) -> None:
    """Max |difference| of each waveform between the pinned run and runs with a pin lifted: OUTDIR/spread.json."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = lifted_runs(__file__, ["--checkout", checkout], tmp)
    pinned = runs.pop("pinned")
    report = {label: {k: float((r[k] - pinned[k]).abs().max()) for k in FLOATS}
              | {"latent_equal": bool(torch.equal(r["latent"], pinned["latent"]))} for label, r in runs.items()}
    save_spread(out, report, FLOATS)


if __name__ == "__main__":
    checkout_writer_main(__doc__.split("\n\n")[0], write, spread, outputs)
