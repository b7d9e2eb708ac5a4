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
    """Every comparison: '<case>/output', '<case>/trace_wave', '<case>/trace/<name>' (test_seedvc_engine's), and
    the streams' (stream_diffs)."""
    from test_seedvc_engine import conversion_diffs

    return {**conversion_diffs(folder, 22050), **stream_diffs(folder), **live_diffs(folder)}


def stream_pieces(loaded, folder: Path, case: dict):
    """The host's convert_stream over the case's source cut where upstream's chunks were cut: (pieces, report)."""
    from mizuoto.audio import files
    from mizuoto.host import convert_stream

    source, rate = files.read(folder / case["source"])
    chunks = ((source[..., start:end], rate) for start, end in case["bounds"])
    stream = convert_stream(loaded, chunks, files.read(folder / case["reference"]), seed=case["seed"],
                            params=case["params"])
    pieces = list(stream)
    return pieces, stream.report


def stream_diffs(folder: Path) -> dict:
    """Per stream case, '<case>/piece/<i>' (each chunk's playable piece against upstream's process_chunk return)
    and '<case>/chunks' (the report counts them) -> diff()."""
    from safetensors.numpy import load_file
    from test_seedvc_engine import diff

    from mizuoto.host import load_model

    refs = load_file(str(folder / "references.safetensors"))
    out = {}
    for name, case in json.loads((folder / "references.json").read_text())["streams"].items():
        loaded = load_model("seedvc", str(folder / "model"), device="cpu",
                            overrides={"engines.seedvc.load_options.precision": case["precision"]})
        pieces, report = stream_pieces(loaded, folder, case)
        expected = sorted(key for key in case["tensors"] if key.startswith("piece/"))
        out[f"{name}/chunks"] = 0.0 if report["stream_chunks"] == len(pieces) == len(expected) else \
            f"{report['stream_chunks']} reported, {len(pieces)} pieces, {len(expected)} upstream"
        for index, piece in enumerate(pieces[:len(expected)]):
            rate_ok = piece.sample_rate == 22050 and piece.waveform.shape[0] == 1
            out[f"{name}/piece/{index}"] = diff(piece.waveform[0], case["tensors"][f"piece/{index}"], refs) \
                if rate_ok else f"rate {piece.sample_rate}, shape {list(piece.waveform.shape)}"
    return out


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


def live_diffs(folder: Path) -> dict:
    """Per live case, '<case>/block/<i>' (each output block against the real-time app's audio_callback output) and
    '<case>/blocks' (as many blocks, the flush included) -> diff(). The source goes in as chunks of 0.3 s that do
    not fall on block boundaries: the stream re-blocks them."""
    from safetensors.numpy import load_file
    from test_seedvc_engine import diff

    from mizuoto.audio import files
    from mizuoto.host import convert_stream, load_model

    refs = load_file(str(folder / "references.safetensors"))
    out = {}
    for name, case in json.loads((folder / "references.json").read_text())["live"].items():
        loaded = load_model("seedvc", str(folder / "model"), device="cpu",
                            overrides={"engines.seedvc.load_options.precision": case["precision"]})
        source, rate = files.read(folder / case["source"])
        chunks = ((source[..., i:i + 6615], rate) for i in range(0, source.shape[-1], 6615))
        stream = convert_stream(loaded, chunks, files.read(folder / case["reference"]), seed=case["seed"],
                                params=case["params"], live=case["settings"])
        blocks = [piece.waveform for piece in stream]
        out[f"{name}/blocks"] = 0.0 if len(blocks) == case["blocks"] == stream.report["stream_chunks"] else \
            f"{len(blocks)} blocks, upstream {case['blocks']}"
        for index, block in enumerate(blocks[:case["blocks"]]):
            out[f"{name}/block/{index}"] = diff(block[0], case["tensors"][f"block/{index}"], refs)
    return out


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


def test_every_stream_piece_is_upstreams_bit_for_bit():
    """api.inference_v1_streaming (chunks of 0.5 s at 22.05 kHz in float16 with guidance; of 0.4 s at 44.1 kHz
    with fp16=False, length_adjust 0.9): every playable piece, cross-fades included."""
    got = pinned_diffs()
    streams = json.loads((REFERENCES / "references.json").read_text())["streams"]
    wanted = [f"{name}/chunks" for name in streams] + [
        f"{name}/{key}" for name, case in streams.items() for key in case["tensors"] if key.startswith("piece/")]
    bad = {key: got.get(key, "missing") for key in wanted if got.get(key, "missing") != 0.0}
    assert not bad, bad


def test_every_live_block_is_the_real_time_apps_bit_for_bit():
    """real-time-gui.py's audio_callback (its buffers, custom_infer, SOLA), with the README's settings in float16
    with guidance, and 0.3 s blocks with other contexts in float32 without guidance."""
    got = pinned_diffs()
    live = json.loads((REFERENCES / "references.json").read_text())["live"]
    wanted = [f"{name}/blocks" for name in live] + [
        f"{name}/{key}" for name, case in live.items() for key in case["tensors"]]
    bad = {key: got.get(key, "missing") for key in wanted if got.get(key, "missing") != 0.0}
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


def test_the_set_holds_the_streams_and_live_blocks_this_test_compares():
    from mizuoto.engines.seedvc.live import LiveSettings

    info = json.loads((REFERENCES / "references.json").read_text())
    streams, live = info["streams"], info["live"]
    assert len(streams) == 2 and {c["precision"] for c in streams.values()} == {"float16", "float32"}
    for name, case in streams.items():
        assert len(case["bounds"]) >= 4 and {f"piece/{i}" for i in range(len(case["bounds"]))} <= set(case["tensors"])
        assert case["bounds"][-1][1] - case["bounds"][-1][0] <= case["chunk_samples"], name
    readme = live["live_readme_float16"]
    # seed-vc's README row for the real-time model is our default (steps 10, cfg 0.7 are the engine's defaults)
    assert LiveSettings(**readme["settings"]) == LiveSettings()
    assert readme["params"] == {"diffusion_steps": 10, "inference_cfg_rate": 0.7} and readme["block_samples"] == 3969
    for name, case in live.items():
        assert set(case["tensors"]) == {f"block/{i}" for i in range(case["blocks"])}, name
    assert {c["precision"] for c in live.values()} == {"float16", "float32"}


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


@functools.cache
def _loaded():
    from mizuoto.host import load_model

    return load_model("seedvc", str(REFERENCES / "model"), device="cpu")


def _clip(name: str):
    from mizuoto.audio import files

    return files.read(REFERENCES / "audio" / f"{name}.wav")


def test_a_one_chunk_stream_is_the_whole_clip_conversion():
    """Upstream's stream encodes the reference before the source, its whole-clip conversion after; XLS-R's draws
    (LayerDrop coins) are the same count either way and the CFM's noise follows them, so one chunk converts to the
    same samples as convert() (same process, same floats)."""
    from mizuoto.host import convert, convert_stream

    source, reference = _clip("source_2s_22050"), _clip("reference_3s_16000")
    params = {"diffusion_steps": 3}
    whole = convert(_loaded(), source, reference, seed=5, params=params)
    stream = convert_stream(_loaded(), iter([source]), reference, seed=5, params=params)
    pieces = list(stream)
    assert len(pieces) == 1 and pieces[0].report["chunk"] == 0
    assert torch.equal(pieces[0].waveform, whole.waveform)
    assert stream.report["stream_chunks"] == 1 and stream.report["samples"] == whole.waveform.shape[-1]
    assert stream.report["source_seconds"] == 2.0 and stream.report["sample_rate"] == 22050


def test_the_stream_pieces_join_to_the_source_length():
    """Each piece but the last holds back its last 16 frames, which fade into the next chunk's first 16: the joined
    stream is 16 frames shorter per joint than its chunks' frames (upstream's overlap, not a gap)."""
    from mizuoto.host import convert_stream

    (source, rate), reference = _clip("source_2s_22050"), _clip("reference_3s_16000")
    chunks = [(source[..., i:i + 8820], rate) for i in range(0, source.shape[-1], 8820)]  # 0.4 s
    pieces = list(convert_stream(_loaded(), iter(chunks), reference, seed=1, params={"diffusion_steps": 2}))
    frames = sum(int(c[0].shape[-1] / rate * 22050) // 256 for c in chunks)  # each chunk's mel frames
    joined = (frames - 16 * (len(chunks) - 1)) * 256
    assert len(pieces) == len(chunks) and sum(p.waveform.shape[-1] for p in pieces) == joined
    assert pieces[0].waveform.shape[-1] == (8820 // 256 - 16) * 256  # the first holds its tail back


@pytest.mark.parametrize("chunk_seconds, message", [
    (0.1, "a stream chunk of 0.100 s gives 8 frames, fewer than the 16 its cross-fade shares; send chunks of at "
          "least 0.20 s"),
    (31.0, "a stream chunk is 31.0 s long; send chunks of at most 30 s"),
])
def test_a_stream_chunk_out_of_range_is_refused_in_one_line(chunk_seconds, message):
    from mizuoto.core.errors import InputError
    from mizuoto.host import convert_stream

    chunk = (torch.zeros(int(16000 * chunk_seconds)), 16000)
    with pytest.raises(InputError) as error:  # a chunk followed by another: not the last
        list(convert_stream(_loaded(), iter([chunk, chunk]), _clip("reference_3s_16000"), seed=1,
                            params={"diffusion_steps": 1}))
    assert str(error.value) == message


def test_the_last_chunk_may_be_short():
    """The last chunk holds nothing back: a frame is enough (an 0.1 s tail after a 0.5 s chunk converts)."""
    from mizuoto.core.errors import InputError
    from mizuoto.host import convert_stream

    (source, rate), reference = _clip("source_2s_22050"), _clip("reference_3s_16000")
    chunks = [(source[..., :11025], rate), (source[..., 11025:13230], rate)]
    pieces = list(convert_stream(_loaded(), iter(chunks), reference, seed=1, params={"diffusion_steps": 1}))
    assert [p.waveform.shape[-1] for p in pieces] == [(43 - 16) * 256, 8 * 256]
    with pytest.raises(InputError, match=r"^the last stream chunk of 0.010 s gives 0 frames; send chunks of at "
                                         r"least 0.02 s$"):
        list(convert_stream(_loaded(), iter([chunks[0], (source[..., :220], rate)]), reference, seed=1))


def test_live_blocks_do_not_depend_on_how_the_input_is_cut():
    """The live stream re-blocks its input: one chunk or many uneven ones give the same blocks; the count is the
    input's whole blocks, its padded last one and the flush (0.02 s right context + 0.04 s crossfade + 0.02 s
    search in one 0.18 s block)."""
    from mizuoto.host import convert_stream

    (source, rate), reference = _clip("source_2s_22050"), _clip("reference_3s_16000")
    params = {"diffusion_steps": 1}
    whole = [p.waveform for p in convert_stream(_loaded(), iter([(source, rate)]), reference, seed=2, params=params,
                                                live={})]
    cuts = (0, 1000, 1001, 9000, 30000, source.shape[-1])
    chunks = [(source[..., a:b], rate) for a, b in zip(cuts, cuts[1:], strict=False)]
    uneven = [p.waveform for p in convert_stream(_loaded(), iter(chunks), reference, seed=2, params=params, live={})]
    assert len(whole) == 44100 // 3969 + 1 + 1 and all(b.shape == (1, 3969) for b in whole)
    assert len(uneven) == len(whole) and all(torch.equal(a, b) for a, b in zip(whole, uneven, strict=True))


@pytest.mark.parametrize("live, params, message", [
    ({"block_time": 0.0}, {}, "^live setting block_time is 0.0 s; give at least 0.02 s$"),
    ({"extra_time": 3.0}, {}, r"^live setting extra_time \(3.0 s\) must be from 0 to extra_time_ce \(2.5 s\)"),
    ({"block": 0.2}, {}, "^live streaming has no setting 'block'; its settings are: block_time, "),
    ({"block_time": "fast"}, {}, "^live setting block_time must be a number of seconds, got 'fast'$"),
    ({}, {"length_adjust": 0.9}, "^length_adjust does not apply to live streaming"),
])
def test_live_settings_out_of_range_are_refused_in_one_line(live, params, message):
    from mizuoto.core.errors import InputError
    from mizuoto.host import convert_stream

    with pytest.raises(InputError, match=message):
        convert_stream(_loaded(), iter([]), _clip("reference_3s_16000"), params=params, live=live)


def test_live_input_at_another_rate_is_resampled_as_one_stream():
    """16 kHz chunks are brought to 22.05 kHz by one soxr stream: as many blocks as the resampled length gives,
    and any cut of the input gives the same blocks; a change of rate mid-stream is refused."""
    from mizuoto.core.errors import InputError
    from mizuoto.host import convert_stream

    (source, rate), reference = _clip("reference_3s_16000"), _clip("reference_3s_16000")
    assert rate == 16000
    params = {"diffusion_steps": 1}
    one = [p.waveform for p in convert_stream(_loaded(), iter([(source, rate)]), reference, seed=2, params=params,
                                              live={})]
    cut = [(source[..., i:i + 5000], rate) for i in range(0, source.shape[-1], 5000)]
    many = [p.waveform for p in convert_stream(_loaded(), iter(cut), reference, seed=2, params=params, live={})]
    assert len(one) == -(-66150 // 3969) + 1 and len(many) == len(one)
    assert all(torch.equal(a, b) for a, b in zip(one, many, strict=True))
    with pytest.raises(InputError, match="^a live stream's chunks come at one rate; this one is 22050 Hz after 16000"):
        list(convert_stream(_loaded(), iter([(source, rate), (source, 22050)]), reference, live={}))


def test_streaming_needs_the_real_time_model_and_no_pitch_shift():
    from mizuoto.core.errors import InputError
    from mizuoto.host import convert_stream, load_model

    reference = _clip("reference_3s_16000")
    with pytest.raises(InputError, match="pitch_shift needs Seed-VC's singing model"):
        convert_stream(_loaded(), iter([]), reference, params={"pitch_shift": 2})
    offline = load_model("seedvc", str(REFERENCES.parent / "seedvc" / "model"), device="cpu")
    with pytest.raises(InputError, match=r"^streaming conversion is for Seed-VC's real-time model "
                                         r"\(hf:Plachta/Seed-VC#realtime\); load it, or convert"):
        convert_stream(offline, iter([]), reference)
    assert list(convert_stream(_loaded(), iter([]), reference)) == []  # an empty source gives nothing


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("precision", ["float16", "float32"])
def test_on_cuda_live_blocks_are_the_same_with_graphs_on_and_off(precision):
    """The CFM of each block replays as one CUDA graph (the blocks share one shape): the same blocks as eager."""
    from mizuoto.host import convert_stream, load_model

    (source, rate), reference = _clip("source_2s_22050"), _clip("reference_3s_16000")
    runs = {}
    for graphs in (False, True):
        loaded = load_model("seedvc", str(REFERENCES / "model"), device="cuda",
                            overrides={"engines.seedvc.load_options.precision": precision,
                                       "compute.cuda_graphs": graphs})
        runs[graphs] = torch.cat([p.waveform for p in convert_stream(loaded, iter([(source, rate)]), reference,
                                                                      seed=3, params={"diffusion_steps": 4},
                                                                      live={})], dim=-1)
    assert runs[False].shape == runs[True].shape and torch.equal(runs[False], runs[True])


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
