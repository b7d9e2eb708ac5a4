"""IndexTTS 2's MaskGCT semantic codec and IndexTTS 2.5's EnhancedCodec (mizuoto/nn/maskgct_codec.py).

Against tests/parity/data/indextts/codec (scripts/parity/indextts_codec_references.py: upstream's own RepCodec,
ResidualVQ / FactorizedVectorQuantize and EnhancedCodec at index-tts ee40fa7 under the parity pins, tiny codecs
with every parameter drawn, stored in the published layouts and loaded by upstream strictly). In a pinned
subprocess our loaders read the same files, then quantize, vq2emb, embed and decode run on the recorded inputs:
bitwise where the set's fingerprint and census are this machine's; elsewhere (tests/fallback.py) within
TOLERANCE, with the codes upstream's wherever upstream's top-2 score gap exceeds it. In process: one-line errors,
strict loading of truncated, misnamed and mismatched files.
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
from helpers import reference_sets, run_pinned  # noqa: E402

from mizuoto.core.errors import CheckpointError, InputError  # noqa: E402
from mizuoto.nn import maskgct_codec  # noqa: E402
from mizuoto.nn.maskgct_codec import CodecConfig, load_enhanced_codec, load_semantic_codec  # noqa: E402

SET = "indextts/codec"
TOLERANCE = 2e-5


def committed() -> Path:
    return reference_sets().SETS[SET].committed


@functools.cache
def info() -> dict:
    return json.loads((committed() / "references.json").read_text())


@functools.cache
def refs() -> dict:
    from safetensors.torch import load_file

    return load_file(str(committed() / "references.safetensors"))


def load(folder: Path, name: str, recorded: dict):
    file = folder / recorded["files"][name]
    config = CodecConfig.from_section(recorded["configs"][name], 2 if name == "enhanced" else 1)
    return (load_enhanced_codec if name == "enhanced" else load_semantic_codec)(file, config)


def ours(folder: Path, out: Path) -> dict:
    from safetensors.torch import load_file, save_file

    theirs = load_file(str(folder / "references.safetensors"))
    recorded = json.loads((folder / "references.json").read_text())
    results = {}
    with torch.inference_mode():
        for name in recorded["configs"]:
            model = load(folder, name, recorded)
            first = model.quantizer.quantizers[0]
            for key in (k for k in recorded["cases"] if k.startswith(name + "/")):
                if key.endswith("/random"):
                    codes = theirs[f"{key}/codes"]
                else:
                    codes, results[f"{key}/s_ref"] = model.quantize(theirs[f"{key}/features"])
                    results[f"{key}/codes"] = codes
                    latents = model.encode(theirs[f"{key}/features"])
                    results[f"{key}/latents"] = latents
                    results[f"{key}/z_e"] = z_e = first.project_in(latents)
                    results[f"{key}/scores"] = first.scores(z_e).view(z_e.shape[0], z_e.shape[2], -1)
                    codes = theirs[f"{key}/codes"]  # what follows runs on upstream's codes (the fallback's path)
                grouped = codes if codes.dim() == 3 else codes.unsqueeze(0)
                if f"{key}/vq2emb" in theirs:
                    results[f"{key}/vq2emb"] = model.vq2emb(grouped)
                if f"{key}/embed" in theirs:
                    results[f"{key}/embed"] = model.embed(codes)
                if f"{key}/decode" in theirs:
                    results[f"{key}/decode"] = model.decode(codes)
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"saved": str(out)}


def test_upstreams_codec(tmp_path, record_property):
    from safetensors.torch import load_file

    out = tmp_path / "ours.safetensors"
    run_pinned(__file__, committed(), out)
    comparison = Comparison.for_set(SET)
    theirs, mine = refs(), load_file(str(out))
    floats = {k for k in mine if mine[k].is_floating_point()}
    assert floats == set(info()["spread"]["max"]) - {"codes_differing"}  # every output the writer measured
    for name in sorted(floats):
        comparison.deterministic(name, mine[name], theirs[name], TOLERANCE)
    for name in sorted(set(mine) - floats):  # the codes: integers
        assert mine[name].dtype == theirs[name].dtype == torch.int64 and mine[name].shape == theirs[name].shape
        if comparison.exact:
            assert torch.equal(mine[name], theirs[name]), name
            comparison.checked.append(f"{name}: exact (integers)")
            continue
        scores = theirs[name.replace("/codes", "/scores")].double()  # the first quantizer's
        top2 = scores.topk(2, dim=-1).values
        decided = (top2[..., 0] - top2[..., 1]) > TOLERANCE
        first = mine[name] if mine[name].dim() == 2 else mine[name][0]
        upstream = theirs[name] if theirs[name].dim() == 2 else theirs[name][0]
        assert bool((first == upstream)[decided].all()), f"{name}: a code differs where upstream's gap is clear"
        comparison.checked.append(f"{name}: upstream's on {int(decided.sum())} of {decided.numel()} frames")
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")


def test_the_set_covers_every_path_and_every_parameter_is_drawn():
    recorded, theirs = info(), refs()
    assert recorded["upstream"]["commit"].startswith("ee40fa7")
    assert not recorded["upstream"]["modified"] or "absent" in recorded["checkout_note"]
    assert recorded["configs"]["repcodec"] == {"codebook_size": 32, "hidden_size": 48, "codebook_dim": 8,
                                               "vocos_dim": 16, "vocos_intermediate_dim": 32, "vocos_num_layers": 2}
    assert recorded["configs"]["rvq2"]["num_quantizers"] == 2
    assert recorded["configs"]["enhanced"]["downsample_scale"] == 2
    assert tuple(theirs["enhanced/odd/codes"].shape) == (1, 6)  # 11 frames -> 6 codes -> 12 frames
    assert tuple(theirs["enhanced/odd/decode"].shape) == (1, 12, 48)
    for name in ("repcodec", "rvq2", "enhanced"):  # every id of the codebook is looked up
        assert set(theirs[f"{name}/random/codes"].flatten().tolist()) == set(range(32))
    # the straight-through sum is not the plain row: vq2emb of quantize's codes differs from S_ref in its bits
    assert not torch.equal(theirs["repcodec/a/embed"], theirs["repcodec/a/s_ref"])
    assert (theirs["repcodec/a/embed"] - theirs["repcodec/a/s_ref"]).abs().max() < 1e-4
    for name in recorded["configs"]:  # our module names are upstream's; nothing left at upstream's init
        model = load(committed(), name, recorded)
        published = [k for k, _ in recorded["state_dict"][name]]
        assert set(model.state_dict()) == {k.replace("weight_v", "weight") for k in published if "weight_g" not in k}
        for key, value in model.state_dict().items():
            assert value.abs().min() > 0 and value.std() > 0 if value.numel() > 1 else True, key
    assert max(v for k, v in recorded["spread"]["max"].items() if k != "codes_differing") * 5 < TOLERANCE
    assert recorded["spread"]["max"]["codes_differing"] == 0


# ---------------------------------------------------------------------------------------------------
# In process


@pytest.fixture(scope="module")
def codec():
    return load(committed(), "repcodec", info())


def test_the_loaded_codec_reproduces_upstreams_codes_in_process(codec):
    with torch.inference_mode():
        codes, s_ref = codec.quantize(refs()["repcodec/a/features"])
    assert codes.dtype == torch.int64 and codes.shape == (1, 23)
    assert s_ref.shape == (1, 23, 48)


@pytest.mark.parametrize("bad, message", [
    (torch.zeros(1, 5, 47), "must be (batch, frames, 48)"),
    (torch.zeros(5, 48), "must be (batch, frames, 48)"),
    (torch.zeros(1, 0, 48), "no frames"),
    (torch.zeros(1, 5, 48, dtype=torch.int64), "floating point"),
    ([[0.0] * 48], "must be (batch, frames, 48)"),
])
def test_bad_features_are_one_line_input_errors(codec, bad, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")) as caught:
        codec.quantize(bad)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("call, bad, message", [
    ("embed", torch.tensor([[0, 32]]), r"in \[0, 32\), got values from 0 to 32"),
    ("embed", torch.tensor([[-1, 3]]), r"in \[0, 32\)"),
    ("embed", torch.tensor([[0.0, 1.0]]), "must be integers"),
    ("embed", torch.zeros(1, 0, dtype=torch.int64), "empty"),
    ("embed", torch.zeros(1, 1, 3, dtype=torch.int64), r"must be \(batch, frames\)"),
    ("vq2emb", torch.zeros(2, 1, 3, dtype=torch.int64), r"must be \(1, batch, frames\)"),
    ("decode", torch.zeros(1, 3, dtype=torch.int64), "EnhancedCodec's"),
])
def test_bad_codes_are_one_line_input_errors(codec, call, bad, message):
    with pytest.raises(InputError, match=message) as caught:
        getattr(codec, call)(bad)
    assert "\n" not in str(caught.value)


def published(name: str = "repcodec") -> dict:
    from safetensors.torch import load_file

    path = committed() / info()["files"][name]
    return torch.load(path, weights_only=True)["model"] if name == "enhanced" else load_file(str(path))


def expect_checkpoint_error(path, match, loader=load_semantic_codec, **kwargs):
    with pytest.raises(CheckpointError, match=match) as caught:
        loader(path, **kwargs)
    assert "\n" not in str(caught.value)


def test_the_loader_is_strict(tmp_path):
    from safetensors.torch import save_file

    state = published()
    missing = dict(state)
    missing.pop("decoder.0.final_layer_norm.bias")  # a key the codec never runs at inference is still required
    save_file(missing, str(tmp_path / "missing.safetensors"))
    expect_checkpoint_error(tmp_path / "missing.safetensors", r"missing \['decoder.0.final_layer_norm.bias'\]")
    extra = {**state, "encoder.0.extra.weight": torch.zeros(3)}
    save_file(extra, str(tmp_path / "extra.safetensors"))
    expect_checkpoint_error(tmp_path / "extra.safetensors", r"unexpected \['encoder.0.extra.weight'\]")
    renamed = {k.replace("in_project.weight_g", "in_project.g"): v for k, v in state.items()}
    save_file(renamed, str(tmp_path / "renamed.safetensors"))
    expect_checkpoint_error(tmp_path / "renamed.safetensors", "not a complete MaskGCT semantic codec")
    wrong = {**state, "encoder.0.convnext.0.gamma": torch.ones(17)}
    save_file(wrong, str(tmp_path / "wrong.safetensors"))
    expect_checkpoint_error(tmp_path / "wrong.safetensors", r"gamma has shape \(17,\)")
    foreign = {"model.weight": torch.ones(2)}
    save_file(foreign, str(tmp_path / "foreign.safetensors"))
    expect_checkpoint_error(tmp_path / "foreign.safetensors", "not a MaskGCT semantic codec file")
    expect_checkpoint_error(tmp_path / "absent.safetensors", "not found")


def test_a_truncated_file_is_refused(tmp_path):
    whole = (committed() / info()["files"]["repcodec"]).read_bytes()
    for size in (4, 200, len(whole) - 100):
        (tmp_path / "cut.safetensors").write_bytes(whole[:size])
        with pytest.raises(CheckpointError) as caught:
            load_semantic_codec(tmp_path / "cut.safetensors")
        assert "\n" not in str(caught.value)
    whole = (committed() / info()["files"]["enhanced"]).read_bytes()
    (tmp_path / "cut.pth").write_bytes(whole[: len(whole) // 2])
    expect_checkpoint_error(tmp_path / "cut.pth", "cannot read", loader=load_enhanced_codec)


def test_the_config_must_match_the_file(tmp_path):
    path = committed() / info()["files"]["repcodec"]
    expect_checkpoint_error(path, r"does not match the semantic_codec config.*codebook_size",
                            config=CodecConfig.from_section({**info()["configs"]["repcodec"], "codebook_size": 64}))
    with pytest.raises(CheckpointError, match="unknown key"):
        CodecConfig.from_section({"codebook_size": 8192, "hidden": 1024})
    assert CodecConfig.from_section({"codebook_size": 8192, "hidden_size": 1024, "codebook_dim": 8, "vocos_dim": 384,
                                     "vocos_intermediate_dim": 2048, "vocos_num_layers": 12}) == CodecConfig()
    # a RepCodec file is not 2.5's codec: its loader wants a torch file with a "model" state dict
    torch.save({"state": published()}, tmp_path / "codec.pth")
    expect_checkpoint_error(tmp_path / "codec.pth", "no 'model' state dict", loader=load_enhanced_codec)
    torch.save({"model": published()}, tmp_path / "codec.pth")  # loads, as a codec without down/up: decode refuses
    assert not load_enhanced_codec(tmp_path / "codec.pth").downsampled
    torch.save({"model": {**published("enhanced"), "up.weight": torch.zeros(48, 48, 5)}}, tmp_path / "codec.pth")
    expect_checkpoint_error(tmp_path / "codec.pth", r"up.weight has shape", loader=load_enhanced_codec)


def test_weight_norm_is_folded_once_as_upstream_computes_it():
    state = published()
    model = maskgct_codec.build_from_state(state, "x")
    g, v = state["quantizer.quantizers.0.in_project.weight_g"], state["quantizer.quantizers.0.in_project.weight_v"]
    assert torch.equal(model.quantizer.quantizers[0].in_project.weight, torch._weight_norm(v, g, 0))
    assert not any("weight_g" in k for k in model.state_dict())


if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))
