#!/usr/bin/env python
"""Reference content tokens of seed-vc 0.4.3's v2 content extractors (HuBERT + the ASTRAL quantizers:
`modules/astral_quantization/default_model.py::AstralQuantizer` through
`modules/v2/vc_wrapper.py::VoiceConversionWrapper._process_content_features`), for
tests/engines/test_seedvc_astral.py.

Usage, in upstream's venv (scripts/parity/seedvc_upstream_env.sh):
    python scripts/parity/seedvc_astral_references.py [OUTDIR]     # default tests/parity/data/seedvc_astral
(restarts itself under the parity pins: one thread, avx2, MKL_CBWR, oneDNN off)

The model is the tiny v2 model of the seedvc_v2 set (tests/parity/data/seedvc_v2/model, written by
seedvc_v2_models.py), read in place, not copied: its vc_wrapper.yaml's content_extractor sections are instantiated
as seedvc_v2_models builds them (the tokenizer stubbed, HuBERT read from the folder), the ASTRAL files loaded as
`load_checkpoints` loads them (strict=False, checked to have taken every saved tensor), and
`_process_content_features` is upstream's own function, called on a stand-in for the wrapper that holds the two
extractors. references.json records the sha256 of every model file read, so a rewritten model is noticed.

Inputs: integer-built 16 kHz waves (`wave`: seeded torch.randint noise under a blockwise integer envelope, scaled by
a power of 2, so every machine builds the same float32 samples; the test builds them again and checks the digest):
odd lengths, the shortest one HuBERT takes (400 samples: one frame), exactly 30 s (one window), and 57.3 s (three
windows: the first 30 s, then 5 s + 25 s, then 5 s + 7.3 s). Per case, under `torch.manual_seed(seed)` and
`torch.inference_mode()` as convert_voice_with_streaming_arrays runs: the wide indices, then the narrow ones (each
computes HuBERT again, as upstream does), then `torch.rand(4)` from the global generator (`after`: it shows how
many draws HuBERT made); some cases also under `torch.autocast("cpu", dtype=torch.float16)` (upstream's default
dtype). Recorded per HuBERT call (per window): its input_values, the features the encoder got
(`last_hidden_state[:, :feature_lens.max()]`, as (batch, frames, hidden)) and the encoder's output the BSQ got
(batch, frames, dim): the indices are only its signs after the projection.
Storage as seedvc_references (whole tensors up to FULL_LIMIT elements, else digest + strided sample); indices
int64, whole.
"""

import contextlib
import hashlib
import json
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pinned import environment, pin_process, write_references  # noqa: E402  (beside this script)

pin_process()

import numpy as np  # noqa: E402
import seedvc_references as v1  # noqa: E402  (storage; imports upstream's stubs)
import seedvc_v2_models as models  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests/parity/data/seedvc_astral"
MODEL = ROOT / "tests/parity/data/seedvc_v2/model"
SECTIONS = ("content_extractor_wide", "content_extractor_narrow")
ENVELOPE_BLOCK = 4000  # samples per envelope step (a quarter second)

# name: (samples, wave seed, global seed, autocast float16)
CASES = {
    "odd_7777": (7777, 1, 301, False),
    "second_16001": (16001, 2, 302, False),
    "shortest_400": (400, 3, 303, False),
    "window_480000": (480000, 4, 304, False),
    "long_916801": (916801, 5, 305, False),
    "odd_7777_float16": (7777, 1, 306, True),
    "long_916801_float16": (916801, 5, 307, True),
}


def wave(samples: int, seed: int) -> torch.Tensor:
    """(1, samples) float32, built from integers only (exact on every machine): noise in [-20000, 20000] times an
    envelope of 1..8 per ENVELOPE_BLOCK samples, over 2^18 (peaks about 0.6). The test keeps a copy: keep equal."""
    g = torch.Generator().manual_seed(seed)
    noise = torch.randint(-20000, 20001, (samples,), generator=g)
    envelope = torch.randint(1, 9, (-(-samples // ENVELOPE_BLOCK),), generator=g)
    envelope = envelope.repeat_interleave(ENVELOPE_BLOCK)[:samples]
    return ((noise * envelope).to(torch.float32) / 2 ** 18)[None]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def model_files() -> dict:
    """Every model file this writer reads -> its sha256 (keys relative to the model folder)."""
    astral = models.asset_folder(MODEL, models.ASTRAL_REPO)
    hubert = models.asset_folder(MODEL, models.HUBERT_REPO)
    files = [MODEL / "v2" / models.CONFIG, astral / models.WIDE_CHECKPOINT, astral / models.NARROW_CHECKPOINT,
             *sorted(p for p in hubert.iterdir() if p.is_file())]
    return {str(p.relative_to(MODEL)): sha256(p) for p in files}


def load_state(module, state: dict, what: str) -> None:
    """load_state_dict(strict=False) as upstream's load_checkpoints, checked to have taken every saved tensor."""
    module.load_state_dict(state, strict=False)
    kept = module.state_dict()
    for key, value in state.items():
        assert key in kept and torch.equal(kept[key], value), (what, key)


def build_extractors(config: dict) -> dict:
    models.no_downloads(MODEL)
    astral = models.asset_folder(MODEL, models.ASTRAL_REPO)
    extractors = {}
    with contextlib.redirect_stdout(sys.stderr):
        for section, path in zip(SECTIONS, (models.WIDE_CHECKPOINT, models.NARROW_CHECKPOINT), strict=True):
            extractor = models.instantiate(config[section])
            load_state(extractor, torch.load(str(astral / path), map_location="cpu"), section)
            extractors[section] = extractor.eval()  # as the wrapper's eval() leaves them
    assert extractors["content_extractor_narrow"].ssl_model is None  # skip_ssl: it reads the wide one's
    return extractors


@contextlib.contextmanager
def recording(extractors):
    """Per HuBERT call: its input_values, the features the ConvNeXt encoder gets and what the BSQ gets."""
    calls = []
    ssl = extractors["content_extractor_wide"].ssl_model

    def ssl_input(module, args, kwargs):
        calls.append({"input_values": args[0].detach().clone()})

    def encoder_input(module, args):
        calls[-1]["features"] = args[0].detach().transpose(1, 2).clone()

    def quantizer_input(module, args):
        calls[-1]["encoded"] = args[0].detach().clone()

    handles = [ssl.register_forward_pre_hook(ssl_input, with_kwargs=True)]
    handles += [extractors[s].encoder.register_forward_pre_hook(encoder_input) for s in SECTIONS]
    handles += [extractors[s].quantizer.register_forward_pre_hook(quantizer_input) for s in SECTIONS]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def run_case(wrapper, extractors, name: str, case: tuple) -> dict:
    from modules.v2.vc_wrapper import VoiceConversionWrapper

    samples, wave_seed, seed, float16 = case
    audio = wave(samples, wave_seed)
    precision = torch.autocast("cpu", dtype=torch.float16) if float16 else contextlib.nullcontext()
    entry = {"samples": samples, "wave_seed": wave_seed, "seed": seed, "float16": float16,
             "wave_sha256": v1.digest(audio.numpy())}
    with recording(extractors) as calls, torch.inference_mode():
        torch.manual_seed(seed)
        with precision:
            wide = VoiceConversionWrapper._process_content_features(wrapper, audio, is_narrow=False)
        wide_calls = len(calls)
        with precision:
            narrow = VoiceConversionWrapper._process_content_features(wrapper, audio, is_narrow=True)
        after = torch.rand(4)
    for side, indices in (("wide", wide), ("narrow", narrow)):
        assert indices.dtype == torch.int64 and indices.shape[0] == 1, (side, indices.dtype, indices.shape)
        v1.REFS[f"{name}/{side}"] = np.ascontiguousarray(indices.numpy())
        entry[side] = f"{name}/{side}"
    entry["after"] = v1.put(f"{name}/after", after)
    entry["calls"] = [{"side": "wide" if index < wide_calls else "narrow",
                       "input_values": v1.put(f"{name}/calls/{index}/input_values", call["input_values"]),
                       "features": v1.put(f"{name}/calls/{index}/features", call["features"]),
                       "encoded": v1.put(f"{name}/calls/{index}/encoded", call["encoded"])}
                      for index, call in enumerate(calls)]
    return entry


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    config = yaml.safe_load((MODEL / "v2" / models.CONFIG).read_text())
    extractors = build_extractors(config)
    wrapper = types.SimpleNamespace(**extractors)  # what _process_content_features reads of `self`
    cases = {name: run_case(wrapper, extractors, name, case) for name, case in CASES.items()}
    write_references(v1.REFS, OUT / "references.safetensors")
    info = {"model": "tests/parity/data/seedvc_v2/model", "model_files": model_files(),
            "sections": {s: config[s] for s in SECTIONS}, "cases": cases,
            "wave": {"envelope_block": ENVELOPE_BLOCK},
            "storage": {"full_limit": v1.FULL_LIMIT, "sample_size": v1.SAMPLE_SIZE,
                        "digest": "sha256 of the float32 little-endian C-order bytes"},
            "environment": environment(["seed-vc", "torch", "transformers", "numpy", "safetensors"]),
            "note": "_process_content_features on the tiny v2 model; float tensors float32, indices int64; "
                    "compare bitwise (torch.equal, or the digest where only a sample is stored)"}
    (OUT / "references.json").write_text(json.dumps(info, indent=1) + "\n")
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {len(v1.REFS)} tensors, {len(cases)} cases, {size} bytes in all to {OUT}")


if __name__ == "__main__":
    main()
