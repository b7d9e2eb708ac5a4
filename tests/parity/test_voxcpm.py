"""VoxCPM end to end against upstream, through the host (mizuoto.host.load_model / speak).

tests/parity/data/voxcpm/e2e holds tiny random VoxCPM 1 and VoxCPM2 folders in the published layout (one
VoxCPM2 in bfloat16, run in bfloat16 as upstream runs the released models) and 21 waveforms that
upstream's own `VoxCPM.generate` / `generate_streaming` (voxcpm 2.0.3) produced from them
(scripts/parity/voxcpm_references.py, one thread, ATEN_CPU_CAPABILITY=avx2): zero-shot, reference (v2),
continuation, reference + continuation (v2), several seeds, CFG values and step counts, a 24 kHz prompt
that v1 resamples with torchaudio and v2 with librosa (soxr), a 44.1 kHz stereo 24-bit FLAC that v2 reads
with librosa.load (mono, soxr) as reference and as both, and runs whose stop head never fires, so
upstream's bad-case retries draw two and three attempts. Each case is spoken here from the same folder,
text, audio files and seed, in a fresh process pinned the same way (this file run as a script), and must
be bit-identical; streamed cases are compared chunk by chunk.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import reference_dir, run_pinned  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "voxcpm" / "e2e"
MODES = {(True, False): "continuation", (False, True): "reference", (True, True): "both"}
KINDS = {"v1": "float32", "v2": "float32", "v2_bf16": "bfloat16"}  # folder -> the dtype its config.json names


def case_request(case: dict, data: Path) -> dict:
    """host.speak's keyword arguments for a recorded case."""
    from mizuoto.audio import files

    params = dict(case["options"])
    kwargs = dict(text=case["text"], seed=case["seed"], params=params)
    prompt, reference = case["prompt_wav"], case["reference_wav"]
    if prompt or reference:
        params["clone_mode"] = MODES[(bool(prompt), bool(reference))]
        kwargs["reference"] = files.read(data / (prompt or reference))
        if prompt:
            kwargs["reference_text"] = case["prompt_text"]
    return kwargs


def compare(data: Path) -> dict:
    from safetensors.torch import load_file

    from mizuoto import host
    from mizuoto.engines.voxcpm import engine
    from mizuoto.runtime.context import RequestContext

    info = json.loads((data / "references.json").read_text())
    tensors = load_file(str(data / "references.safetensors"))
    models = {kind: host.load_model("voxcpm", data / kind, device="cpu", dtype=dtype) for kind, dtype in KINDS.items()}
    out = {}
    for case in info["cases"]:
        if case["prompt_wav"] and case["reference_wav"] and case["prompt_wav"] != case["reference_wav"]:
            out[case["name"]] = two_recordings(models[case["kind"]], case, data, tensors)
            continue
        loaded, kwargs = models[case["kind"]], case_request(case, data)
        want = tensors[case["wave"]]
        if case["streaming"]:
            values = loaded.spec.check_speak_params(kwargs["params"])
            reference = kwargs.get("reference")
            if reference is not None:
                reference = (loaded.spec.reference.check(*reference), reference[1])
            pieces = list(engine.speak_stream(loaded.state, kwargs["text"], RequestContext(kwargs["seed"]), values,
                                              reference, kwargs.get("reference_text")))
            got = torch.cat(pieces, dim=-1)[0]
            lengths = [int(p.shape[-1]) for p in pieces]
            out[case["name"]] = dict(same=tuple(got.shape) == tuple(want.shape) and torch.equal(got, want),
                                     chunks_same=lengths == case["chunk_lengths"], samples=int(got.numel()),
                                     want=int(want.numel()))
        else:
            speech = host.speak(loaded, **kwargs)
            got = speech.waveform[0]
            out[case["name"]] = dict(same=tuple(got.shape) == tuple(want.shape) and torch.equal(got, want),
                                     rate=speech.sample_rate, samples=int(got.numel()), want=int(want.numel()),
                                     diff=float((got - want).abs().max()) if got.shape == want.shape else None)
    out["rates"] = {kind: m.state.sample_rate for kind, m in models.items()}
    return out


def two_recordings(loaded, case: dict, data: Path, tensors: dict) -> dict:
    """A case with a prompt and a reference from two files: below the host (which takes one recording),
    through the engine's `request` with both."""
    from mizuoto.audio import files
    from mizuoto.engines.voxcpm import engine
    from mizuoto.runtime.context import RequestContext

    values = loaded.spec.check_speak_params(case["options"])
    ctx = RequestContext(case["seed"])
    prompt_wave, prompt_rate = files.read(data / case["prompt_wav"])
    reference_wave, reference_rate = files.read(data / case["reference_wav"])
    request = engine.request(loaded.state, case["text"], ctx, values,
                             (prompt_wave.mean(0), prompt_rate, case["prompt_text"]),
                             (reference_wave.mean(0), reference_rate))
    got = engine.speak_request(loaded.state, request, ctx, values)[0][0]
    want = tensors[case["wave"]]
    return dict(same=tuple(got.shape) == tuple(want.shape) and torch.equal(got, want), samples=int(got.numel()),
                want=int(want.numel()))


@pytest.fixture(scope="module")
def results():
    info = json.loads((DATA / "references.json").read_text())
    environment = info["environment"]
    assert environment["num_threads"] == 1 and environment["ATEN_CPU_CAPABILITY"] == "avx2"
    return run_pinned(__file__, reference_dir("voxcpm/e2e"))


def test_every_case_is_compared(results):
    info = json.loads((DATA / "references.json").read_text())
    assert {case["name"] for case in info["cases"]} <= set(results)
    assert len(info["cases"]) == 21


def test_identical_to_upstream(results):
    different = {name: r for name, r in results.items() if name != "rates" and not r["same"]}
    assert not different


def test_streamed_chunks_are_upstreams(results):
    info = json.loads((DATA / "references.json").read_text())
    streamed = [case["name"] for case in info["cases"] if case["streaming"]]
    assert streamed and all(results[name]["chunks_same"] for name in streamed)


def test_output_rates(results):
    assert results["rates"] == {"v1": 16000, "v2": 48000, "v2_bf16": 48000}


if __name__ == "__main__":
    print(json.dumps(compare(Path(sys.argv[1]))))
