"""Seed-VC v1 offline end to end, against upstream's own conversions.

Against tests/parity/data/seedvc (scripts/parity/seedvc_references.py: seed-vc 0.4.3's
`SeedVCWrapper.convert_voice(..., stream_output=False)` on tiny random upstream models stored in the released
files' layout under model/, and synthetic PCM16 recordings under audio/), compared bitwise in a pinned subprocess
(one thread, avx2, MKL_CBWR, oneDNN off) that loads model/ with `load_model("seedvc", ...)` in each precision and,
per case (six: upstream's defaults in float16 and float32; a 44.1 kHz source with length_adjust 0.8, 3 steps and no
guidance; a 30.5 s source through Whisper's chunked path and two CFM windows, in float32 and float16; a 30.5 s
reference cut to its first 25 s):
- runs the host's `convert()` on `files.read` of the case's files with the case's seed and parameters, and
  compares its waveform with upstream's output;
- runs `engine.convert_with_trace` on the same inputs and compares every intermediate upstream recorded under the
  same name (S_alt, S_ori, mel, mel2, style2, cond, prompt_condition, vc_target/i, vc_wave/i; and feat2,
  source_16k, reference_16k, source_22k, reference_22k where the trace has them), so a failure says where.
A stored tensor is compared whole where the set holds it whole, else by the SHA-256 of its float32 bytes (the
set's digest), with the max difference over the stored strided sample reported on a mismatch.

In process (no upstream, no pins): the set holds the cases and files this test expects, and its model folder
loads in both precisions.
"""

import functools
import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import reference_dir, run_pinned  # noqa: E402

REFERENCES = Path(__file__).resolve().parents[1] / "parity" / "data" / "seedvc"
CASES = ("default_float16", "default_float32", "source_44k_adjust0.8_float32", "long_source_float32",
         "long_source_float16", "long_reference_float32")
TRACED = ("S_alt", "S_ori", "mel", "mel2", "style2", "cond", "prompt_condition")  # and vc_target/i, vc_wave/i
OPTIONAL = ("feat2", "source_16k", "reference_16k", "source_22k", "reference_22k")  # compared where traced


def digest(array: np.ndarray) -> str:
    """The set's digest: SHA-256 of the float32 little-endian C-order bytes."""
    return hashlib.sha256(np.ascontiguousarray(array, dtype="<f4").tobytes()).hexdigest()


def diff(ours: torch.Tensor, entry: dict, refs: dict):
    """0.0 when bitwise equal to the stored tensor; else the max abs difference (over the stored sample where only
    a sample is stored), or a sentence when the shapes differ or the difference lies outside the sample."""
    array = ours.detach().float().contiguous().cpu().numpy()
    if list(array.shape) != entry["shape"]:
        return f"shape {list(array.shape)}, upstream {entry['shape']}"
    if digest(array) == entry["sha256"]:
        return 0.0
    if "tensor" in entry:
        return float(np.abs(array - refs[entry["tensor"]]).max())
    worst = float(np.abs(array.reshape(-1)[::entry["step"]] - refs[entry["sample"]]).max())
    return worst if worst != 0.0 else "differs outside the stored sample"


def conversion_diffs(folder: Path, rate: int, optional=(), special=None, params=None, cases=None) -> dict:
    """Every comparison of a Seed-VC set (this one, seedvc_realtime, seedvc_svc): per case, '<case>/output' (the
    host's convert() at `rate`), '<case>/trace_wave' (the traced conversion gives the same waveform) and
    '<case>/trace/<name>' for each stored intermediate -> diff(). Names in `optional` are compared only where the
    trace has them; `special` maps a name to (label, compare(ours, entry, refs)), reported as
    '<case>/<label>/<name>'. `params(case)` gives a case's convert() parameters (default: its "params"); `cases`
    limits the cases compared (default: all)."""
    from safetensors.numpy import load_file

    from mizuoto.audio import files
    from mizuoto.engines.seedvc import engine
    from mizuoto.host import convert, load_model
    from mizuoto.runtime.context import RequestContext

    special = special or {}
    refs = load_file(str(folder / "references.safetensors"))
    stored = json.loads((folder / "references.json").read_text())["cases"]
    params = params or (lambda case: case["params"])
    models, out = {}, {}
    for name, case in stored.items():
        if cases is not None and name not in cases:
            continue
        precision = case["precision"]
        if precision not in models:
            models[precision] = load_model("seedvc", str(folder / "model"), device="cpu", dtype="float32",
                                           overrides={"engines.seedvc.load_options.precision": precision})
        loaded = models[precision]
        source, reference = files.read(folder / case["source"]), files.read(folder / case["reference"])
        speech = convert(loaded, source, reference, seed=case["seed"], params=params(case))
        wave = speech.waveform
        if speech.sample_rate != rate or wave.dim() != 2 or wave.shape[0] != 1:
            out[f"{name}/output"] = f"rate {speech.sample_rate}, shape {list(wave.shape)}: want {rate}, (1, samples)"
        else:
            out[f"{name}/output"] = diff(wave[0], case["tensors"]["output"], refs)
        values = loaded.spec.check_speak_params(params(case))
        traced_wave, traced_rate, trace = engine.convert_with_trace(loaded.state, source, reference,
                                                                    RequestContext(case["seed"]), values)
        out[f"{name}/trace_wave"] = 0.0 if traced_rate == rate and torch.equal(traced_wave, wave) else "differs"
        for key, entry in case["tensors"].items():
            if key == "output" or (key in optional and key not in trace):
                continue
            label, compare = special.get(key, ("trace", diff))
            out[f"{name}/{label}/{key}"] = compare(trace[key], entry, refs) if key in trace else "not in the trace"
    return out


def reference_diffs(folder: Path) -> dict:
    return conversion_diffs(folder, 22050, optional=OPTIONAL)


# ---------------------------------------------------------------------------------------------------
# Against upstream's references (pinned subprocess)


@functools.cache
def pinned_diffs() -> dict:
    """One pinned subprocess for both reference tests (it converts every case twice: about a minute)."""
    return run_pinned(__file__, reference_dir("seedvc"), timeout=1800)


def expected_trace(case: dict) -> set:
    chunks = {f"{kind}/{i}" for kind in ("vc_target", "vc_wave") for i in range(case["chunks"])}
    return set(TRACED) | chunks


def test_every_conversion_is_upstreams_bit_for_bit():
    got = pinned_diffs()
    wanted = [f"{name}/{what}" for name in CASES for what in ("output", "trace_wave")]
    bad = {key: got.get(key, "missing") for key in wanted if got.get(key, "missing") != 0.0}
    assert not bad, bad


def test_every_intermediate_is_upstreams_bit_for_bit():
    got = pinned_diffs()
    cases = json.loads((REFERENCES / "references.json").read_text())["cases"]
    for name in CASES:
        compared = {key.split("/trace/", 1)[1] for key in got if key.startswith(f"{name}/trace/")}
        assert expected_trace(cases[name]) <= compared, (name, sorted(expected_trace(cases[name]) - compared))
    bad = {name: value for name, value in got.items() if "/trace/" in name and value != 0.0}
    assert not bad, bad


# ---------------------------------------------------------------------------------------------------
# In process


def test_the_set_holds_the_cases_this_test_compares():
    info = json.loads((REFERENCES / "references.json").read_text())
    cases = info["cases"]
    assert tuple(cases) == CASES
    for name, case in cases.items():
        assert (REFERENCES / case["source"]).is_file() and (REFERENCES / case["reference"]).is_file(), name
        assert expected_trace(case) | {"output"} <= set(case["tensors"]), name
        assert case["precision"] in ("float16", "float32") and name.endswith(case["precision"])
    assert cases["default_float16"]["params"] == {"diffusion_steps": 10, "length_adjust": 1.0,
                                                  "inference_cfg_rate": 0.7}  # upstream's defaults
    assert cases["long_source_float32"]["chunks"] == cases["long_source_float16"]["chunks"] == 2
    assert cases["long_source_float32"]["tensors"]["source_16k"]["shape"][-1] > 16000 * 30  # Whisper's chunked path
    assert cases["long_reference_float32"]["tensors"]["reference_22k"]["shape"][-1] == 22050 * 25  # cut at 25 s
    rates = {audio["rate"] for audio in info["audio"].values()}
    assert {22050, 16000, 44100} <= rates


def test_the_sets_audio_is_what_files_read_returns():
    from mizuoto.audio import files

    info = json.loads((REFERENCES / "references.json").read_text())
    for name, audio in info["audio"].items():
        wave, rate = files.read(REFERENCES / audio["file"])
        assert rate == audio["rate"] and wave.shape == (1, audio["frames"]) and wave.dtype == torch.float32, name
        assert 0.3 < wave.abs().max() <= 0.61, name  # synthetic, peaks at 0.6: no clipping


@pytest.mark.parametrize("precision", ["float16", "float32"])
def test_the_sets_model_folder_loads(precision):
    from mizuoto.host import load_model

    loaded = load_model("seedvc", str(REFERENCES / "model"), device="cpu",
                        overrides={"engines.seedvc.load_options.precision": precision})
    assert loaded.state.float16 == (precision == "float16")
    assert loaded.state.mel.sample_rate == 22050
    folded = [n for n, _ in loaded.state.vocoder.named_parameters() if n.endswith(("weight_g", "weight_v"))]
    assert not folded  # BigVGAN's legacy weight norm folded once at load


def test_a_preset_that_disagrees_with_the_checkpoint_is_refused_in_one_line(tmp_path):
    import yaml

    from mizuoto.core.errors import CheckpointError
    from mizuoto.host import load_model

    model = tmp_path / "model"
    shutil.copytree(REFERENCES / "model", model)
    preset_path = model / "config_dit_mel_seed_uvit_whisper_small_wavenet.yml"
    preset = yaml.safe_load(preset_path.read_text())
    preset["model_params"]["DiT"]["hidden_dim"] = 48
    preset_path.write_text(yaml.safe_dump(preset, sort_keys=False))
    with pytest.raises(CheckpointError) as error:
        load_model("seedvc", str(model), device="cpu")
    assert "\n" not in str(error.value)


if __name__ == "__main__":  # the pinned subprocess of the reference tests
    torch.set_num_threads(1)
    print(json.dumps(reference_diffs(Path(sys.argv[1]))))
