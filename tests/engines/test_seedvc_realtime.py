"""Seed-VC v1's real-time model (XLS-R content, HiFT vocoder) end to end, against upstream's own conversions.

Against tests/parity/data/seedvc_realtime (scripts/parity/seedvc_realtime_references.py: seed-vc 0.4.3's
`api.inference(...)` non-streaming path on a tiny random real-time model stored in the released files' layout
under model/, and synthetic PCM16 recordings under audio/), compared bitwise in a pinned subprocess (one thread,
avx2, MKL_CBWR, oneDNN off) that loads model/ with `load_model("seedvc", ...)` in each precision and, per case
(four: api's defaults with fp16=True and fp16=False; a 44.1 kHz source with length_adjust 0.8, 4 steps and no
guidance; a 30.5 s source through the content encoder's two 30 s windows and two CFM windows):
- runs the host's `convert()` on `files.read` of the case's files (upstream's `get_audio_numpy` gives the same
  float32 samples: int16 / 32768) with the case's seed and parameters, and compares its waveform with upstream's
  joined 22.05 kHz waveform (before api resamples it to the source's rate and casts it to int16);
- runs `engine.convert_with_trace` on the same inputs and compares every intermediate upstream recorded under the
  same name (source_16k, reference_16k, S_alt, S_ori, source_22k, reference_22k, mel, mel2, feat2, style2, cond,
  prompt_condition, vc_target/i, vc_wave/i), so a failure says where.
Our "float32" precision is upstream's fp16=False: the CFM without autocast, XLS-R still in float16 (upstream's
`.half()` is unconditional).

Under float16 autocast with guidance the DiT's mlp tail gets a non-contiguous float32 input: mizuoto/nn/ops.py's
`Linear` takes F.linear there (as upstream's nn.Linear, whose input autocast copies), and that case is compared on
its own (`test_float16_with_guidance_...`).

In process (no upstream, no pins): the set holds the cases and files this test expects; its model folder loads in
both precisions (XLS-R in float16 either way, HiFT's weight norm folded, the mel's fmax 8000); the released
hifigan.yml the set records is HiFTConfig's defaults; the real-time refusals are one line.
"""

import functools
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import parity_module, reference_dir, run_pinned  # noqa: E402

REFERENCES = Path(__file__).resolve().parents[1] / "parity" / "data" / "seedvc_realtime"
CASES = ("default_float16", "default_fp16_false", "source_44k_adjust0.8_cfg0_float16", "long_source_float16")
FLOAT16_GUIDED = ("default_float16", "long_source_float16")  # float16 autocast with inference_cfg_rate > 0
TRACED = ("source_16k", "reference_16k", "S_alt", "S_ori", "source_22k", "reference_22k", "mel", "mel2", "feat2",
          "style2", "cond", "prompt_condition")  # and vc_target/i, vc_wave/i
PRESET = "config_dit_mel_seed_uvit_xlsr_tiny.yml"
CHECKPOINT = "DiT_uvit_tat_xlsr_ema.pth"



def reference_diffs(folder: Path) -> dict:
    """Every comparison: '<case>/output', '<case>/trace_wave', '<case>/trace/<name>' (test_seedvc_engine's)."""
    from test_seedvc_engine import conversion_diffs

    return conversion_diffs(folder, 22050)


def real_size_inputs(entry: dict) -> dict:
    """The writer's real_inputs(): one seeded generator, the shapes in order, the prompt mel shifted by -3."""
    g = torch.Generator().manual_seed(entry["seed"] + 1)
    shapes = {"content": (1, 50, 1024), "prompt_content": (1, 14, 1024), "prompt": (1, 80, 16), "style": (1, 192)}
    inputs = {name: torch.randn(shape, generator=g) for name, shape in shapes.items()}
    inputs["prompt"] = inputs["prompt"] - 3
    return inputs


def real_size_diffs(folder: Path) -> dict:
    """The released real-time preset's DiT and regulator at their real sizes, weights refilled as the writer filled
    them (seedvc_weights.s2mel_fill over each net's sorted parameter names): 'real/<name>' -> diff()."""
    import math

    from safetensors.numpy import load_file
    from test_seedvc_engine import diff

    from mizuoto.nn.s2mel_cfm import S2Mel, S2MelConfig

    fill = parity_module("seedvc_weights").s2mel_fill
    refs = load_file(str(folder / "references.safetensors"))
    entry = json.loads((folder / "references.json").read_text())["real_size"]
    nets = {}
    for net in S2Mel.NETS:
        record = entry[net]
        nets[net] = {name: fill(name, tuple(shape), record["seed"] + index)
                     for index, (name, shape) in enumerate(record["params"])}
    half = 128  # the time embedder's frequency table and upstream's position buffer, as upstream computes them
    nets["cfm"]["estimator.t_embedder.freqs"] = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32)
                                                          / half)
    nets["cfm"]["estimator.input_pos"] = torch.arange(16384)
    assert sorted(entry["cfm"]["buffers"]) == ["estimator.input_pos", "estimator.t_embedder.freqs"]
    model = S2Mel(S2MelConfig.from_model_params(entry["model_params"]))
    model.load_nets(nets)
    model.eval()
    inputs = real_size_inputs(entry)
    lengths = entry["lengths"]
    with torch.inference_mode():
        cond = model.length_regulator(inputs["content"], ylens=torch.tensor([lengths["cond"]]))[0]
        prompt_condition = model.length_regulator(inputs["prompt_content"],
                                                  ylens=torch.tensor([lengths["prompt_condition"]]))[0]
        condition = torch.cat([prompt_condition, cond], dim=1)
        out = model.cfm.inference(condition, torch.tensor([condition.size(1)]), inputs["prompt"], inputs["style"],
                                  torch.Generator().manual_seed(entry["seed"] + 2), steps=entry["steps"],
                                  cfg_rate=entry["cfg_rate"])
    got = {"cond": cond, "prompt_condition": prompt_condition, "cfm": out}
    return {f"real/{name}": diff(got[name], stored, refs) for name, stored in entry["tensors"].items()}


# ---------------------------------------------------------------------------------------------------
# Against upstream's references (pinned subprocess)


@functools.cache
def pinned_diffs() -> dict:
    """One pinned subprocess for both reference tests (every case converted twice)."""
    return run_pinned(__file__, reference_dir("seedvc_realtime"), timeout=1800)


def test_the_real_size_dit_and_regulator_are_upstreams_bit_for_bit():
    """The released preset's sizes (DiT 384 x 9, 6 heads; XLS-R's 1024 channels into the regulator): defaults a
    tiny configuration could hide. Needs no loader, so it runs before the model is turned on too."""
    got = run_pinned(__file__, reference_dir("seedvc_realtime"), "real-size", timeout=900)
    assert set(got) == {"real/cond", "real/prompt_condition", "real/cfm"}
    assert all(value == 0.0 for value in got.values()), got


def expected_trace(case: dict) -> set:
    chunks = {f"{kind}/{i}" for kind in ("vc_target", "vc_wave") for i in range(case["chunks"])}
    return set(TRACED) | chunks


def after_the_cfm(key: str) -> bool:
    """Whether a comparison's tensor comes from the CFM or after it (the waveform, vc_target/i, vc_wave/i)."""
    what = key.split("/", 1)[1]
    return what in ("output", "trace_wave") or what.startswith(("trace/vc_target/", "trace/vc_wave/"))


def known_difference(key: str) -> bool:
    """The float16 cases with guidance, from the CFM on (see the module docstring: mizuoto/nn/ops.py's Linear)."""
    return key.split("/", 1)[0] in FLOAT16_GUIDED and after_the_cfm(key)


def test_every_conversion_is_upstreams_bit_for_bit():
    got = pinned_diffs()
    wanted = [f"{name}/{what}" for name in CASES for what in ("output", "trace_wave")]
    bad = {key: got.get(key, "missing") for key in wanted
           if got.get(key, "missing") != 0.0 and not known_difference(key)}
    assert not bad, bad


def test_every_intermediate_is_upstreams_bit_for_bit():
    got = pinned_diffs()
    cases = json.loads((REFERENCES / "references.json").read_text())["cases"]
    for name in CASES:
        compared = {key.split("/trace/", 1)[1] for key in got if key.startswith(f"{name}/trace/")}
        assert expected_trace(cases[name]) <= compared, (name, sorted(expected_trace(cases[name]) - compared))
    bad = {name: value for name, value in got.items()
           if "/trace/" in name and value != 0.0 and not known_difference(name)}
    assert not bad, bad


def test_float16_with_guidance_is_upstreams_bit_for_bit_from_the_cfm_on():
    got = pinned_diffs()
    known = {key: value for key, value in got.items() if known_difference(key)}
    assert known and all(value == 0.0 for value in known.values()), known


# ---------------------------------------------------------------------------------------------------
# In process


def test_the_set_holds_the_cases_this_test_compares():
    info = json.loads((REFERENCES / "references.json").read_text())
    cases = info["cases"]
    assert tuple(cases) == CASES
    for name, case in cases.items():
        assert (REFERENCES / case["source"]).is_file() and (REFERENCES / case["reference"]).is_file(), name
        assert expected_trace(case) | {"output"} <= set(case["tensors"]), name
        assert case["precision"] == ("float16" if case["fp16"] else "float32"), name
    assert cases["default_float16"]["params"] == {"diffusion_steps": 30, "length_adjust": 1.0,
                                                  "inference_cfg_rate": 0.7}  # api.inference's defaults
    assert cases["default_fp16_false"]["fp16"] is False
    guided = {n for n, c in cases.items() if c["precision"] == "float16" and c["params"]["inference_cfg_rate"] > 0}
    assert guided == set(FLOAT16_GUIDED)
    assert cases["long_source_float16"]["chunks"] == 2
    assert cases["long_source_float16"]["tensors"]["source_16k"]["shape"][-1] > 16000 * 30  # two content windows
    assert {22050, 16000, 44100} <= {audio["rate"] for audio in info["audio"].values()}
    params = info["models"]["preset"]["model_params"]
    assert params["speech_tokenizer"]["type"] == "xlsr" and params["vocoder"]["type"] == "hifigan"


def test_the_released_hifigan_yml_is_hift_configs_defaults():
    """Upstream's loader reads seed-vc's configs/hifigan.yml for CosyVoice-300M's hift.pt; ours takes HiFTConfig()
    where no hifigan.yml lies beside hift.pt."""
    from mizuoto.nn import hift

    released = json.loads((REFERENCES / "references.json").read_text())["released_hifigan_yml"]
    assert hift.HiFTConfig.from_dict(released) == hift.HiFTConfig()


@pytest.mark.parametrize("precision", ["float16", "float32"])
def test_the_sets_model_folder_loads(precision):
    from mizuoto.engines.seedvc.content import XLSRContent
    from mizuoto.host import load_model
    from mizuoto.nn import hift

    loaded = load_model("seedvc", str(REFERENCES / "model"), device="cpu",
                        overrides={"engines.seedvc.load_options.precision": precision})
    state = loaded.state
    assert state.float16 == (precision == "float16") and state.source.endswith(CHECKPOINT)
    assert isinstance(state.content, XLSRContent) and len(state.content.encoder.encoder.layers) == 2
    assert {p.dtype for p in state.content.parameters()} == {torch.float16}  # upstream's .half(), either way
    assert isinstance(state.vocoder, hift.HiFTGenerator)
    assert not [n for n, _ in state.vocoder.named_parameters() if n.endswith(("weight_g", "weight_v"))]
    assert (state.mel.sample_rate, state.mel.f_min, state.mel.f_max) == (22050, 0.0, 8000.0)


def _copy_model(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    shutil.copytree(REFERENCES / "model", model)
    return model


def _edit_preset(model: Path, edit) -> None:
    import yaml

    path = model / PRESET
    preset = yaml.safe_load(path.read_text())
    edit(preset["model_params"])
    path.write_text(yaml.safe_dump(preset, sort_keys=False))


@pytest.mark.parametrize("edit, message", [
    (lambda p: p["speech_tokenizer"].update(output_layer=5), "keeps 5 XLS-R layers; .* has 3"),
    (lambda p: p["speech_tokenizer"].update(output_layer=0), "output_layer must be a positive layer count"),
    (lambda p: p["speech_tokenizer"].update(type="cnhubert"), "uses the cnhubert content encoder; only Whisper"),
    (lambda p: p["vocoder"].update(type="vocos"), "uses the vocos vocoder; only BigVGAN .* and HiFT"),
    (lambda p: p["DiT"].update(f0_condition=True), "takes F0 with the xlsr content encoder"),
])
def test_real_time_presets_we_cannot_run_are_refused_in_one_line(tmp_path, edit, message):
    from mizuoto.core.errors import CheckpointError
    from mizuoto.host import load_model

    model = _copy_model(tmp_path)
    _edit_preset(model, edit)
    with pytest.raises(CheckpointError, match=message) as error:
        load_model("seedvc", str(model), device="cpu")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("missing, message", [
    ("wav2vec2-xls-r-300m", "Seed-VC needs its XLS-R content encoder \\(facebook/wav2vec2-xls-r-300m\\): put its "
                            "files in .*facebook--wav2vec2-xls-r-300m"),
    ("CosyVoice-300M", "Seed-VC needs its HiFT vocoder \\(FunAudioLLM/CosyVoice-300M\\): put its files in "
                       ".*FunAudioLLM--CosyVoice-300M \\(with hift.pt\\)"),
])
def test_a_missing_asset_is_named_with_where_it_goes(tmp_path, missing, message):
    from mizuoto.core.errors import CheckpointError
    from mizuoto.host import load_model

    model = _copy_model(tmp_path)
    shutil.rmtree(model / missing)
    with pytest.raises(CheckpointError, match=message):
        load_model("seedvc", str(model), device="cpu")


if __name__ == "__main__":  # the pinned subprocess of the reference tests
    torch.set_num_threads(1)
    folder = Path(sys.argv[1])
    print(json.dumps(real_size_diffs(folder) if sys.argv[2:] == ["real-size"] else reference_diffs(folder)))
