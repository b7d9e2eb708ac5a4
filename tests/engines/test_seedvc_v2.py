"""Seed-VC v2 end to end, against upstream's own conversions (the timbre path and the AR style path).

Against tests/parity/data/seedvc_v2 (scripts/parity/seedvc_v2_references.py: seed-vc 0.4.3's
`VoiceConversionWrapper.convert_voice_with_streaming_arrays(..., stream_output=False)` on a tiny random v2 model
stored in the released files' layout under model/), compared bitwise in a pinned subprocess that loads model/ with
`load_model("seedvc", ...)` in each precision and, per case (the timbre path with both CFG rates, one rate, a
30.5 s source through HuBERT's chunked path and two CFM windows, anonymization's random voice; the style path with
upstream's sampling defaults, with top-p / temperature / repetition penalty / length_adjust, anonymization, in
float16, and a 50 s source whose content takes two AR windows):
- runs the host's `convert()` on the case's files with its seed and parameters, and compares the waveform;
- runs `engine.convert_with_trace` and compares every intermediate upstream recorded under the same name (the
  waves, the wide and narrow content indices, style, prompt_condition, cond/i, the AR's tokens ar/i, vc_mel/i,
  vc_wave/i), so a failure says where.

In process: the set holds what this test compares; parameters v2 does not read (or reads only with convert_style)
are refused in one line; a v2 folder and its checkpoint load as v2; streaming is refused.
"""

import functools
import json
import sys
from pathlib import Path

import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import reference_dir, run_pinned  # noqa: E402

REFERENCES = Path(__file__).resolve().parents[1] / "parity" / "data" / "seedvc_v2"
TIMBRE_CASES = ("timbre_float32", "timbre_one_rate_float32", "timbre_long_source_float32")
STYLE_CASES = ("style_float32", "style_sampling_float32", "anonymization_float32", "style_float16",
               "style_long_source_float32")
CASES = TIMBRE_CASES + STYLE_CASES + ("timbre_anonymization_float32",)
# upstream's keyword -> our parameter (upstream spells it "intelligebility")
PARAMS = {"intelligebility_cfg_rate": "intelligibility_cfg_rate"}


def params(case: dict) -> dict:
    return {PARAMS.get(k, k): v for k, v in case["options"].items()}


def token_diff(ours: torch.Tensor, entry: dict, refs: dict):
    """0.0 when the content indices (stored as token lists) are upstream's."""
    tokens = ours.reshape(-1).tolist()
    return 0.0 if tokens == entry["tokens"] and list(ours.shape) == entry["shape"] else \
        f"{len(tokens)} tokens {tokens[:8]}..., upstream {len(entry['tokens'])} {entry['tokens'][:8]}..."


def reference_diffs(folder: Path) -> dict:
    from test_seedvc_engine import conversion_diffs

    stored = json.loads((folder / "references.json").read_text())["cases"]
    ids = {key for case in stored.values() for key, entry in case["tensors"].items() if "tokens" in entry}
    assert {"wide/source", "narrow/source", "ar/0"} <= ids, sorted(ids)  # content indices and the AR's tokens
    return conversion_diffs(folder, 22050, special={name: ("trace", token_diff) for name in ids}, params=params,
                            cases=CASES)


@functools.cache
def pinned_diffs() -> dict:
    return run_pinned(__file__, reference_dir("seedvc_v2"), timeout=1800)


def test_every_conversion_is_upstreams_bit_for_bit():
    got = pinned_diffs()
    wanted = [f"{name}/{what}" for name in CASES for what in ("output", "trace_wave")]
    bad = {key: got.get(key, "missing") for key in wanted if got.get(key, "missing") != 0.0}
    assert not bad, bad


def test_every_intermediate_and_token_is_upstreams_bit_for_bit():
    got = pinned_diffs()
    cases = json.loads((REFERENCES / "references.json").read_text())["cases"]
    for name in CASES:
        wanted = {f"{name}/trace/{key}" for key in cases[name]["tensors"] if key != "output"}
        assert wanted <= set(got), (name, sorted(wanted - set(got)))
    bad = {name: value for name, value in got.items() if "/trace/" in name and value != 0.0}
    assert not bad, bad


# ---------------------------------------------------------------------------------------------------
# In process


def test_the_set_holds_the_cases_this_test_compares():
    cases = json.loads((REFERENCES / "references.json").read_text())["cases"]
    assert tuple(cases) == CASES
    for name, case in cases.items():
        assert (REFERENCES / case["source"]).is_file() and (REFERENCES / case["reference"]).is_file(), name
        keys = set(case["tensors"])
        assert {"output", "style", "prompt_condition", "wide/source", "wide/reference", "cond/0"} <= keys, name
        assert {f"vc_wave/{i}" for i in range(case["chunks"])} <= keys, name
        style = case["options"].get("convert_style", False)
        assert style == ({"ar/0", "narrow/source", "narrow/reference"} <= keys), name
    assert cases["timbre_long_source_float32"]["chunks"] == 2
    assert cases["style_long_source_float32"]["chunks"] == 2  # two AR windows, each its own CFM chunk
    assert {"ar/1", "cond/1"} <= set(cases["style_long_source_float32"]["tensors"])
    assert cases["timbre_long_source_float32"]["tensors"]["source_16k"]["shape"][-1] > 16000 * 30


@pytest.fixture(scope="module")
def loaded():
    from mizuoto.host import load_model

    return load_model("seedvc", str(REFERENCES / "model"), device="cpu",
                      overrides={"engines.seedvc.load_options.precision": "float32"})


def test_the_v2_folder_and_its_checkpoint_load_as_v2(loaded):
    from mizuoto.engines.seedvc.loaded_v2 import SeedVCV2Loaded
    from mizuoto.host import load_model

    assert isinstance(loaded.state, SeedVCV2Loaded) and loaded.state.mel.sample_rate == 22050
    by_file = load_model("seedvc", str(REFERENCES / "model" / "v2" / "cfm_small.pth"), device="cpu")
    assert isinstance(by_file.state, SeedVCV2Loaded) and by_file.state.float16


@pytest.mark.parametrize(("damage", "words"), [
    ("truncate", "not a readable checkpoint"), ("no_ar", "needs net.ar and net.length_regulator"),
    ("no_output", r"AR checkpoint does not match the config \(missing \['output.weight'\]"),
])
def test_a_damaged_ar_checkpoint_is_one_line_naming_it(tmp_path, damage, words):
    import shutil

    from mizuoto.core.errors import CheckpointError
    from mizuoto.host import load_model

    folder = tmp_path / "model"
    shutil.copytree(REFERENCES / "model", folder)
    path = folder / "v2" / "ar_base.pth"
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:1000])
    else:
        nets = torch.load(str(path), map_location="cpu", weights_only=True)["net"]
        if damage == "no_ar":
            del nets["ar"]
        else:
            del nets["ar"]["module.model.output.weight"]
        torch.save({"net": nets}, path)
    with pytest.raises(CheckpointError, match=words) as error:
        load_model("seedvc", str(folder), device="cpu")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("given", [{"inference_cfg_rate": 0.5}, {"pitch_shift": 2}, {"length_adjust": 0.8},
                                   {"top_p": 0.5}, {"temperature": 0.7}, {"repetition_penalty": 1.2}])
def test_parameters_v2_does_not_read_are_refused_in_one_line(loaded, given):
    from mizuoto.core.errors import InputError
    from mizuoto.host import convert

    tone = (torch.sin(torch.arange(22050) / 10.0)[None] * 0.3, 22050)
    with pytest.raises(InputError) as error:
        convert(loaded, tone, tone, seed=1, params={"diffusion_steps": 1, **given})
    assert "\n" not in str(error.value) and next(iter(given)) in str(error.value)


def test_streaming_is_refused_for_v2(loaded):
    from mizuoto.core.errors import InputError
    from mizuoto.host import convert_stream

    tone = (torch.sin(torch.arange(22050) / 10.0)[None] * 0.3, 22050)
    with pytest.raises(InputError, match="real-time model"):
        list(convert_stream(loaded, iter([tone]), tone, seed=1))


def test_a_cancel_inside_the_style_converter_stops_it_and_the_seed_still_decides(loaded):
    """The AR checks for a cancel before every token: a request cancelled there stops (Cancelled), and the same
    seed afterwards gives what it gave before."""
    from mizuoto.host import convert
    from mizuoto.runtime.context import Cancelled, RequestContext

    tone = (torch.sin(torch.arange(22050) / 10.0)[None] * 0.3, 22050)
    params = {"diffusion_steps": 1, "convert_style": True}
    before = convert(loaded, tone, tone, seed=4, params=params).waveform
    calls = []

    def interrupted():  # the host's hook, asked at every step: three before the AR (content, narrow content, chunk)
        calls.append(1)
        if len(calls) == 8:
            ctx.cancel()

    ctx = RequestContext(4, interrupted=interrupted)
    with pytest.raises(Cancelled):
        convert(loaded, tone, tone, params=params, ctx=ctx)
    assert len(calls) == 8
    assert torch.equal(convert(loaded, tone, tone, seed=4, params=params).waveform, before)


def test_the_v2_example_workflow_runs_on_the_node_classes(loaded):
    """workflows/api/seedvc_v2.json on the node classes: its model choice (hf:Plachta/Seed-VC#v2) pointed at the
    set's tiny v2 model in float32, LoadAudio standing in with the set's recordings, 2 steps instead of 30 for time.
    SaveAudio gets what the library gives for the same request: the style converter's conversion."""
    from helpers import load_pack, saved_audio

    from mizuoto.audio import files
    from mizuoto.host import convert

    pack = load_pack("mizuoto_pack_seedvc_v2")
    graph = json.loads((Path(__file__).resolve().parents[2] / "workflows" / "api" / "seedvc_v2.json").read_text())
    loader = next(n for n in graph.values() if n["class_type"] == "MizuotoSeedVCLoader")
    converter = next(n for n in graph.values() if n["class_type"] == "MizuotoSeedVCConvert")
    assert loader["inputs"]["model"] == "hf:Plachta/Seed-VC#v2"
    keys = ("convert_style", "diffusion_steps", "intelligibility_cfg_rate", "similarity_cfg_rate", "top_p")
    assert {k: converter["inputs"][k] for k in keys} == {  # upstream's app_vc_v2 defaults, convert_style on
        "convert_style": True, "diffusion_steps": 30, "intelligibility_cfg_rate": 0.5, "similarity_cfg_rate": 0.5,
        "top_p": 0.9}
    loader["inputs"].update(model=str(REFERENCES / "model"), device="cpu", precision="float32")
    converter["inputs"]["diffusion_steps"] = 2
    clips = {"source.wav": files.read(REFERENCES / "audio" / "source_2s_22050.wav"),
             "reference.wav": files.read(REFERENCES / "audio" / "reference_3s_16000.wav")}
    saved = saved_audio(pack, graph, clips.__getitem__)
    names = ("diffusion_steps", "intelligibility_cfg_rate", "similarity_cfg_rate", "convert_style",
             "anonymization_only", "top_p", "temperature", "repetition_penalty", "length_adjust")
    want = convert(loaded, clips["source.wav"], clips["reference.wav"], seed=converter["inputs"]["seed"],
                   params={k: converter["inputs"][k] for k in names}).waveform
    assert saved["sample_rate"] == 22050 and torch.equal(saved["waveform"][0], want)


if __name__ == "__main__":  # the pinned subprocess of the reference tests
    torch.set_num_threads(1)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    print(json.dumps(reference_diffs(Path(sys.argv[1]))))
