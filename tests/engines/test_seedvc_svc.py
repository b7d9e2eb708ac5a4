"""Seed-VC v1 singing conversion (44.1 kHz, F0 from RMVPE) end to end, against upstream's own conversions.

Against tests/parity/data/seedvc_svc (scripts/parity/seedvc_svc_references.py: seed-vc 0.4.3's
`SeedVCWrapper.convert_voice(..., f0_condition=True, stream_output=False)` on a tiny random singing model in the
released files' layout, rmvpe.pt included), compared in a pinned subprocess that loads model/ with
`load_model("seedvc", ...)` in each precision and, per case (five: upstream's defaults in float16 and float32;
auto_f0_adjust off with +3 semitones; auto on with -5 semitones, length_adjust 0.8 and no guidance from a 22.05 kHz
source; a 30.5 s source over two CFM windows with +2 semitones):
- runs the host's `convert()` (44.1 kHz out) and compares its waveform with upstream's, bitwise;
- runs `engine.convert_with_trace` and compares every intermediate upstream recorded: bitwise, except RMVPE's F0s
  and the shifted source F0 (float64), which are compared in ulps: numpy's float64 power in RMVPE's decoding
  (10 * 2 ** (cents / 1200)) rounds differently across numpy versions (ours 2.x, the oracle's 1.26); a few ulps
  never move an F0 bin, and the regulator's output, compared bitwise, says so.

In process: the set's cases, and what the engine refuses or reports around the F0 settings.
"""

import functools
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # test_seedvc_engine's comparison
from helpers import reference_dir, run_pinned  # noqa: E402

REFERENCES = Path(__file__).resolve().parents[1] / "parity" / "data" / "seedvc_svc"
CASES = ("default_float16", "default_float32", "no_adjust_up3_float32", "adjust_down5_length0.8_cfg0_float32",
         "long_source_float32")
TRACED = ("S_alt", "S_ori", "mel", "mel2", "style2", "cond", "prompt_condition", "feat2", "source_16k",
          "reference_16k", "source_22k", "reference_22k")  # and vc_target/i, vc_wave/i
F0S = ("F0_ori", "F0_alt", "shifted_f0_alt")
MAX_F0_ULPS = 8
RATE = 44100


def ulps(ours: torch.Tensor, theirs: np.ndarray):
    """The largest distance in float64 ulps (a sentence when dtypes or shapes differ)."""
    if ours.dtype != torch.float64:
        return f"dtype {ours.dtype}, upstream float64"
    mine = ours.cpu().numpy()
    if mine.shape != theirs.shape:
        return f"shape {list(mine.shape)}, upstream {list(theirs.shape)}"
    return float(np.max(np.abs(mine - theirs) / np.spacing(np.abs(theirs) + 1e-300), initial=0.0))


def reference_diffs(folder: Path) -> dict:
    """'<case>/output', '<case>/trace_wave', '<case>/trace/<name>' -> 0.0 when bitwise equal (test_seedvc_engine's),
    and '<case>/f0_ulps/<name>' for the F0s."""
    from test_seedvc_engine import conversion_diffs

    f0_ulps = ("f0_ulps", lambda ours, entry, refs: ulps(ours, refs[entry["tensor"]]))
    return conversion_diffs(folder, RATE, special={key: f0_ulps for key in F0S})


# ---------------------------------------------------------------------------------------------------
# Against upstream's references (pinned subprocess)


@functools.cache
def pinned_diffs() -> dict:
    return run_pinned(__file__, reference_dir("seedvc_svc"), timeout=1800)


def expected_trace(case: dict) -> set:
    chunks = {f"{kind}/{i}" for kind in ("vc_target", "vc_wave") for i in range(case["chunks"])}
    return set(TRACED) | chunks


def test_every_singing_conversion_is_upstreams_bit_for_bit():
    got = pinned_diffs()
    wanted = [f"{name}/{what}" for name in CASES for what in ("output", "trace_wave")]
    bad = {key: got.get(key, "missing") for key in wanted if got.get(key, "missing") != 0.0}
    assert not bad, bad


def test_every_intermediate_is_upstreams_and_the_f0s_within_a_few_ulps():
    got = pinned_diffs()
    cases = json.loads((REFERENCES / "references.json").read_text())["cases"]
    for name in CASES:
        compared = {key.split("/trace/", 1)[1] for key in got if key.startswith(f"{name}/trace/")}
        assert expected_trace(cases[name]) <= compared, (name, sorted(expected_trace(cases[name]) - compared))
        assert {f"{name}/f0_ulps/{key}" for key in F0S} <= set(got), name
    bad = {name: value for name, value in got.items() if "/trace/" in name and value != 0.0}
    assert not bad, bad
    far = {name: value for name, value in got.items()
           if "/f0_ulps/" in name and not (isinstance(value, float) and value <= MAX_F0_ULPS)}
    assert not far, far


# ---------------------------------------------------------------------------------------------------
# In process


def cases() -> dict:
    return json.loads((REFERENCES / "references.json").read_text())["cases"]


def test_the_set_holds_the_cases_this_test_compares():
    stored = cases()
    assert tuple(stored) == CASES
    for name, case in stored.items():
        assert expected_trace(case) | set(F0S) | {"output"} <= set(case["tensors"]), name
        assert case["voiced_frames"]["reference"] > 0 and case["voiced_frames"]["source"] > 0, name
    assert stored["default_float16"]["params"] == {"diffusion_steps": 10, "length_adjust": 1.0,
                                                   "inference_cfg_rate": 0.7, "auto_f0_adjust": True,
                                                   "pitch_shift": 0}  # upstream's defaults
    short = stored["default_float32"]["voiced_frames"]
    assert short["source"] < short["frames"][1]  # unvoiced source frames too: they must stay unshifted
    assert stored["long_source_float32"]["chunks"] == 2


@functools.cache
def loaded_model():
    from mizuoto.host import load_model

    return load_model("seedvc", str(REFERENCES / "model"), device="cpu",
                      overrides={"engines.seedvc.load_options.precision": "float32"})


def test_the_singing_model_loads_at_44k_with_its_f0_estimator():
    state = loaded_model().state
    assert state.mel.sample_rate == RATE and state.mel.hop_length == 512 and state.mel.n_mels == 128
    assert state.rmvpe is not None and state.rmvpe.config.en_de_layers == 2  # the sizes read from rmvpe.pt
    assert all(p.dtype == torch.float32 for p in state.rmvpe.parameters())  # float16 on disk, float32 as upstream


def test_the_source_f0_is_moved_and_shifted_only_where_voiced():
    from mizuoto.engines.seedvc import pitch

    source = torch.tensor([[0.0, 100.0, 200.0, 0.0, 400.0]], dtype=torch.float64)
    reference = torch.tensor([[0.0, 300.0, 300.0]], dtype=torch.float64)
    moved = pitch.source_f0(source, reference, True, 0)
    voiced = source > 1
    # the source's median (lower middle of 100, 200, 400: 200) moves to the reference's 300
    assert torch.allclose(moved[voiced], source[voiced] * 1.5, rtol=1e-6)  # (the logs are of F0 + 1e-5)
    assert (moved[~voiced] < 1).all()  # unvoiced stays unvoiced (exp(log(1e-5)))
    up = pitch.source_f0(source, reference, False, 12)
    assert torch.allclose(up[voiced], (source[voiced] + 1e-5) * 2, rtol=1e-12)


def test_an_unvoiced_reference_is_refused_when_it_is_needed():
    from mizuoto.core.errors import InputError
    from mizuoto.engines.seedvc import pitch

    source = torch.tensor([[0.0, 150.0]], dtype=torch.float64)
    silent = torch.zeros(1, 4, dtype=torch.float64)
    with pytest.raises(InputError) as error:
        pitch.source_f0(source, silent, True, 0)
    assert "auto_f0_adjust" in str(error.value) and "\n" not in str(error.value)
    assert torch.isfinite(pitch.source_f0(source, silent, False, 0)).all()  # nothing to match: fine
    unvoiced = torch.zeros(1, 3, dtype=torch.float64)
    assert (pitch.source_f0(unvoiced, silent, True, 0) < 1).all()  # nothing to move: fine


def test_pitch_shift_on_a_model_without_f0_is_refused_in_one_line():
    from mizuoto.core.errors import InputError
    from mizuoto.engines.seedvc.engine import _pitch

    class NoF0:
        rmvpe = None

    assert _pitch(NoF0(), {"pitch_shift": 0, "auto_f0_adjust": True}) is None
    with pytest.raises(InputError) as error:
        _pitch(NoF0(), {"pitch_shift": 2, "auto_f0_adjust": True})
    assert "#singing" in str(error.value) and "\n" not in str(error.value)


def test_a_singing_model_without_rmvpe_names_where_to_put_it(tmp_path):
    from mizuoto.core.errors import CheckpointError
    from mizuoto.host import load_model

    model = tmp_path / "model"
    shutil.copytree(REFERENCES / "model", model)
    shutil.rmtree(model / "VoiceConversionWebUI")
    with pytest.raises(CheckpointError) as error:
        load_model("seedvc", str(model), device="cpu")
    assert "rmvpe.pt" in str(error.value) and "lj1995--VoiceConversionWebUI" in str(error.value)


if __name__ == "__main__":  # the pinned subprocess of the reference tests
    torch.set_num_threads(1)
    print(json.dumps(reference_diffs(Path(sys.argv[1]))))


def test_the_singing_example_workflow_runs_on_the_node_classes():
    """workflows/api/seedvc_singing.json on the node classes: its model choice (hf:Plachta/Seed-VC#singing) pointed
    at the set's tiny singing model, LoadAudio standing in with the set's recordings, 2 steps instead of 10 for
    time. SaveAudio gets what the library gives for the same request, at 44.1 kHz."""
    from helpers import load_pack, saved_audio

    from mizuoto.audio import files
    from mizuoto.host import convert

    pack = load_pack("mizuoto_pack_seedvc_singing")
    graph = json.loads((Path(__file__).resolve().parents[2] / "workflows" / "api" / "seedvc_singing.json").read_text())
    loader = next(n for n in graph.values() if n["class_type"] == "MizuotoSeedVCLoader")
    converter = next(n for n in graph.values() if n["class_type"] == "MizuotoSeedVCConvert")
    assert loader["inputs"]["model"] == "hf:Plachta/Seed-VC#singing"
    assert {k: converter["inputs"][k] for k in ("auto_f0_adjust", "pitch_shift", "diffusion_steps")} == {
        "auto_f0_adjust": True, "pitch_shift": 0, "diffusion_steps": 10}  # upstream's app_svc defaults
    loader["inputs"].update(model=str(REFERENCES / "model"), device="cpu", precision="float32")
    converter["inputs"]["diffusion_steps"] = 2
    clips = {"song.wav": files.read(REFERENCES / "audio" / "source_1.5s_22050.wav"),
             "reference.wav": files.read(REFERENCES / "audio" / "reference_3s_16000.wav")}
    saved = saved_audio(pack, graph, clips.__getitem__)
    params = {k: converter["inputs"][k] for k in ("diffusion_steps", "length_adjust", "inference_cfg_rate",
                                                 "auto_f0_adjust", "pitch_shift")}
    want = convert(loaded_model(), clips["song.wav"], clips["reference.wav"], seed=converter["inputs"]["seed"],
                   params=params).waveform
    assert saved["sample_rate"] == RATE and torch.equal(saved["waveform"][0], want)
