"""GPT-SoVITS v3 and v4's vocoders (engines/gpt_sovits/vocoder.py; v3's BigVGAN is mizuoto/nn/bigvgan.py).

Against tests/parity/data/gpt_sovits_vocoder (scripts/parity/gpt_sovits_vocoder_references.py: upstream's vendored
BigVGAN through BigVGAN.from_pretrained + remove_weight_norm, and module/models.py's Generator + remove_weight_norm +
load_state_dict, as TTS.init_vocoder builds them at RVC-Boss/GPT-SoVITS 48b1a01, under the parity pins). The files are
rebuilt here from the names and shapes the set records, the seeded fill (scripts/parity/gpt_sovits_weights.py
sovits_fill, times the recorded scale) and the two recorded anti-alias filters: a from_pretrained folder (the released
24 kHz 100-band config.json at width 128, bigvgan_generator.pt with weight norm) read by `load_v3_vocoder`, and a
vocoder.pth (width 32, the released rates: 480 samples per frame) read by `load_v4_vocoder`. In a pinned subprocess
both run on one mel and a batch of two; bitwise where the set's fingerprint is this machine's, elsewhere
(tests/fallback.py) within TOLERANCE (five times the measured spread: spread.json). In process: the loaders' one-line
errors for missing, damaged and foreign files, and bad mels.
"""

import functools
import json
import sys
from pathlib import Path

import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fallback import Comparison  # noqa: E402
from helpers import parity_module, reference_sets, run_pinned  # noqa: E402

from mizuoto.core.errors import CheckpointError, InputError  # noqa: E402
from mizuoto.engines.gpt_sovits import vocoder  # noqa: E402
from mizuoto.nn import alias_free  # noqa: E402

SET = "gpt_sovits_vocoder"
TOLERANCE = {"v3": 2e-3, "v4": 3e-5}  # v3's random BigVGAN carries activations of ~50 into its sines: more spread
weights = parity_module("gpt_sovits_weights")


def committed() -> Path:
    return reference_sets().SETS[SET].committed


@functools.cache
def info() -> dict:
    return json.loads((committed() / "references.json").read_text())


@functools.cache
def refs() -> dict:
    from safetensors.torch import load_file

    return load_file(str(committed() / "references.safetensors"))


def state(version: str, recorded: dict | None = None, filters: dict | None = None) -> dict:
    """The writer's state for `version`: entry i from sovits_fill(seed + i) times its scale, filters as recorded."""
    record = (recorded or info())[version]
    filters = filters or refs()
    kinds = record.get("filters", {})
    out = {}
    for i, (name, shape) in enumerate(record["entries"]):
        kind = next((k for k, suffix in kinds.items() if name.endswith(suffix)), None)
        out[name] = (filters[f"filter/{kind}"].clone() if kind else
                     weights.sovits_fill(name, tuple(shape), record["seed"] + i) * record["scale"].get(name, 1.0))
    return out


def write_v3(folder: Path, recorded: dict | None = None, filters: dict | None = None) -> Path:
    """The set's BigVGAN as a from_pretrained folder (config.json, bigvgan_generator.pt with weight norm)."""
    record = (recorded or info())["v3"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(record["config"], indent=2))
    torch.save({"generator": state("v3", recorded, filters)}, folder / "bigvgan_generator.pt")
    return folder


def write_v4(path: Path, recorded: dict | None = None) -> Path:
    """The set's v4 vocoder as vocoder.pth (a plain state dict, weight norm removed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state("v4", recorded), path)
    return path


def ours(folder: Path, out: Path) -> dict:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / "references.safetensors"))
    recorded = json.loads((folder / "references.json").read_text())
    models = {"v3": vocoder.load_v3_vocoder(write_v3(out.parent / vocoder.V3_FOLDER, recorded, tensors)),
              "v4": vocoder.load_v4_vocoder(write_v4(out.parent.joinpath(*vocoder.V4_FILE), recorded))}
    results = {}
    with torch.inference_mode():
        for version, model in models.items():
            for name in recorded["mels"]:
                results[f"{version}/{name}"] = model(tensors[f"mel/{name}"])
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"saved": str(out), "widths": {"v3": models["v3"].config.upsample_initial_channel,
                                          "v4": models["v4"].config.upsample_initial_channel}}


def test_upstreams_waveforms(tmp_path, record_property):
    from safetensors.torch import load_file

    out = tmp_path / "ours.safetensors"
    reply = run_pinned(__file__, committed(), out)
    assert reply["widths"] == {"v3": 128, "v4": 32}
    comparison = Comparison.for_set(SET)
    mine = load_file(str(out))
    for version in ("v3", "v4"):
        for name in info()["mels"]:
            key = f"{version}/{name}"
            comparison.deterministic(f"{key}: waveform", mine[key], refs()[key], TOLERANCE[version])
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")


def test_the_set_has_the_released_shapes():
    recorded = info()
    assert recorded["upstream"]["commit"].startswith("48b1a01") and not recorded["upstream"]["modified"]
    v3 = recorded["v3"]["config"]
    # bigvgan_v2_24khz_100band_256x's options, only the width shrunk
    assert (v3["num_mels"], v3["activation"], v3["snake_logscale"], v3["resblock"]) == (100, "snakebeta", True, "1")
    assert (v3["use_tanh_at_final"], v3["use_bias_at_final"], v3["sampling_rate"]) == (False, False, 24000)
    assert v3["upsample_rates"] == [4, 4, 2, 2, 2, 2] and v3["upsample_kernel_sizes"] == [8, 8, 4, 4, 4, 4]
    args = recorded["v4"]["args"]
    released = vocoder.V4_RELEASED
    assert (args["gin_channels"], args["is_bias"], args["initial_channel"]) == (0, True, released.mels)
    assert tuple(args["upsample_rates"]) == released.upsample_rates and released.upsample_factor == 480
    assert tuple(args["upsample_kernel_sizes"]) == released.upsample_kernel_sizes
    assert tuple(map(tuple, args["resblock_dilation_sizes"])) == released.resblock_dilation_sizes
    assert tuple(args["resblock_kernel_sizes"]) == released.resblock_kernel_sizes
    # the v4 file has weight norm removed; the v3 file keeps it, as the released ones do
    assert "ups.0.weight" in dict(recorded["v4"]["entries"]) and "conv_post.bias" in dict(recorded["v4"]["entries"])
    assert "conv_pre.weight_g" in dict(recorded["v3"]["entries"])
    assert "conv_post.bias" not in dict(recorded["v3"]["entries"])
    for version in ("v3", "v4"):
        assert all(recorded["spread"]["max"][k] * 5 < TOLERANCE[version]
                   for k in recorded["spread"]["max"] if k.startswith(version))
    # the clamp and tanh bend some samples, and no output is flat
    assert (refs()["v3/one"].abs() == 1).any() and 0.2 < refs()["v3/one"].std() < 0.6
    assert 0.05 < refs()["v4/one"].std() and refs()["v4/one"].abs().max() > 0.9


def test_upstreams_filters_are_ours():
    """The released checkpoints carry their filters (loaded, not rebuilt); ours for a model built here agree."""
    for kind in ("upsample", "lowpass"):
        torch.testing.assert_close(alias_free.kaiser_sinc_filter(0.25, 0.3, 12), refs()[f"filter/{kind}"],
                                   rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------------------------------
# In process


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("assets")
    return {"v3": write_v3(folder / vocoder.V3_FOLDER), "v4": write_v4(folder.joinpath(*vocoder.V4_FILE))}


def test_lengths_dtypes_and_devices(files):
    mel = refs()["mel/batch"]
    v3 = vocoder.load_v3_vocoder(files["v3"], dtype=torch.bfloat16)
    v4 = vocoder.load_v4_vocoder(files["v4"], dtype=torch.bfloat16)
    assert not v3.training and not v4.training
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in (*v3.parameters(), *v4.parameters()))
    with torch.inference_mode():
        assert v3(mel.bfloat16()).shape == (2, 1, mel.shape[2] * vocoder.V3_UPSAMPLE)
        assert v4(mel.bfloat16()).shape == (2, 1, mel.shape[2] * vocoder.V4_UPSAMPLE)
    assert v3.config.upsample_factor == 256 and v4.config.upsample_factor == 480


def test_the_v4_file_is_loaded_strictly(files, tmp_path):
    good = torch.load(files["v4"], map_location="cpu", weights_only=True)
    cases = {
        "cut": ({k: v for k, v in good.items() if k != "resblocks.4.convs2.1.bias"},
                r"missing \['resblocks.4.convs2.1.bias'\]"),
        "extra": ({**good, "cond.weight": torch.zeros(32, 1, 1)}, r"unexpected \['cond.weight'\]"),
        "shape": ({**good, "conv_post.weight": torch.zeros(1, 1, 5)}, r"shapes differ for \['conv_post.weight'\]"),
        "normed": ({**{k: v for k, v in good.items() if k != "ups.0.weight"}, "ups.0.weight_g": torch.ones(32, 1, 1),
                    "ups.0.weight_v": good["ups.0.weight"]}, r"missing \['ups.0.weight'\]"),
        "ints": ({**good, "conv_pre.bias": good["conv_pre.bias"].long()}, "not a state dict of float tensors"),
        "foreign": ({"weight": good}, "not a state dict of float tensors"),
        "no_pre": ({k: v for k, v in good.items() if k != "conv_pre.weight"}, "no conv_pre.weight"),
    }
    for name, (data, message) in cases.items():
        torch.save(data, tmp_path / f"{name}.pth")
        with pytest.raises(CheckpointError, match=message) as caught:
            vocoder.load_v4_vocoder(tmp_path / f"{name}.pth")
        assert "\n" not in str(caught.value) and "lj1995/GPT-SoVITS" in str(caught.value)


def test_missing_and_damaged_files_name_what_to_download(files, tmp_path):
    with pytest.raises(CheckpointError, match=r"needs its vocoder gsv-v4-pretrained/vocoder.pth .* is missing"):
        vocoder.load_v4_vocoder(tmp_path / "nowhere" / "vocoder.pth")
    (tmp_path / "junk.pth").write_bytes(b"PK not a zip")
    with pytest.raises(CheckpointError, match="cannot read .*junk.pth .*download gsv-v4-pretrained/vocoder.pth"):
        vocoder.load_v4_vocoder(tmp_path / "junk.pth")
    folder = tmp_path / vocoder.V3_FOLDER
    with pytest.raises(CheckpointError, match=r"v3 needs the BigVGAN vocoder models--nvidia--bigvgan_v2_24khz_100band"
                                              r"_256x/config.json"):
        vocoder.load_v3_vocoder(folder)
    folder.mkdir()
    (folder / "config.json").write_text((files["v3"] / "config.json").read_text())
    with pytest.raises(CheckpointError, match="bigvgan_generator.pt; .* is missing"):
        vocoder.load_v3_vocoder(folder)
    (folder / "bigvgan_generator.pt").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="bigvgan_generator.pt is not a readable checkpoint"):
        vocoder.load_v3_vocoder(folder)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="cannot read .*config.json .*download models--nvidia"):
        vocoder.load_v3_vocoder(folder)
    (folder / "config.json").write_text(json.dumps({"num_mels": 100}))
    with pytest.raises(CheckpointError, match="BigVGAN config.json lacks upsample_rates"):
        vocoder.load_v3_vocoder(folder)


def test_another_bigvgan_is_refused(files, tmp_path):
    """Seed-VC's 22 kHz 80-band BigVGAN, say, is not v3's: the CFM makes 100 bands at hop 256."""
    config = json.loads((files["v3"] / "config.json").read_text())
    for change, message in (({"num_mels": 80}, "80-band, 256x"),
                            ({"upsample_rates": [8, 8, 2, 2, 2, 2]}, "100-band, 1024x")):
        folder = tmp_path / str(len(message)) / vocoder.V3_FOLDER
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({**config, **change}))
        (folder / "bigvgan_generator.pt").write_bytes((files["v3"] / "bigvgan_generator.pt").read_bytes())
        with pytest.raises(CheckpointError, match=f"holds a {message} BigVGAN; GPT-SoVITS v3 uses the 100-band"):
            vocoder.load_v3_vocoder(folder)
    data = torch.load(files["v3"] / "bigvgan_generator.pt", map_location="cpu", weights_only=True)
    del data["generator"]["conv_post.weight_v"]
    folder = tmp_path / "cut" / vocoder.V3_FOLDER
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    torch.save(data, folder / "bigvgan_generator.pt")
    with pytest.raises(CheckpointError, match="does not fit its config.json"):
        vocoder.load_v3_vocoder(folder)


def test_bad_mels_are_one_line_errors(files):
    v4 = vocoder.load_v4_vocoder(files["v4"])
    v3 = vocoder.load_v3_vocoder(files["v3"])
    for model, what in ((v4, "the v4 vocoder"), (v3, "BigVGAN")):
        for mel, message in ((torch.zeros(1, 80, 5), r"\(batch, 100, frames >= 1\), got \(1, 80, 5\)"),
                             (torch.zeros(1, 100, 0), r"got \(1, 100, 0\)"),
                             (torch.zeros(100, 5), r"got \(100, 5\)"),
                             (torch.zeros(1, 100, 5, dtype=torch.long), "float mel spectrogram tensor, got a "
                                                                         "torch.int64 tensor"),
                             ([[0.0]], "got a list")):
            with pytest.raises(InputError, match=f"{what} takes a .*{message}"):
                model(mel)


if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))
