"""Seed-VC v2's content tokens (engines/seedvc/astral.py: HuBERT + the ASTRAL quantizers), against upstream's own.

Against tests/parity/data/seedvc_astral (scripts/parity/seedvc_astral_references.py: seed-vc 0.4.3's
`_process_content_features` with its two `AstralQuantizer`s built from the tiny v2 model of the seedvc_v2 set,
which both read in place from tests/parity/data/seedvc_v2/model), compared bitwise in a pinned subprocess (one
thread, avx2, MKL_CBWR, oneDNN off) that loads that folder with `load_hubert` / `load_quantizer` and, per case
(odd lengths, the shortest input, exactly one 30 s window, three windows; two of them under float16 CPU autocast):
- rebuilds the writer's integer-made wave (`wave`, checked against its digest);
- runs `content_indices` for the wide, then the narrow quantizer with a CPU generator seeded as upstream's global
  one was, and compares both index sequences and the generator's next `torch.rand(4)` (HuBERT's LayerDrop draws);
- compares, per HuBERT call (per window, wide calls then narrow ones), the input_values, the features the
  ConvNeXt encoder got and the encoder's output the BSQ got (the indices are only its projected signs).
In process: the set reads the model files it was written from (their sha256), the released and tiny yaml sections
parse, and bad sections, checkpoints, HuBERT folders and inputs are one-line errors.
"""

import functools
import hashlib
import json
import shutil
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path

import pytest
import torch
import yaml

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import reference_dir, run_pinned  # noqa: E402

from engines.seedvc import astral  # noqa: E402
from mizuoto.core.errors import CheckpointError, InputError  # noqa: E402

REFERENCES = Path(__file__).resolve().parents[1] / "parity" / "data" / "seedvc_astral"
MODEL = Path(__file__).resolve().parents[1] / "parity" / "data" / "seedvc_v2" / "model"
HUBERT = MODEL / "hubert-large-ll60k"
WIDE = MODEL / "ASTRAL-quantization" / "bsq2048" / "bsq2048_light.pth"
NARROW = MODEL / "ASTRAL-quantization" / "bsq32" / "bsq32_light.pth"
SECTIONS = ("content_extractor_wide", "content_extractor_narrow")
CASES = ("odd_7777", "second_16001", "shortest_400", "window_480000", "long_916801", "odd_7777_float16",
         "long_916801_float16")
ENVELOPE_BLOCK = 4000

# configs/v2/vc_wrapper.yaml's two sections as seed-vc 0.4.3 releases them (the encoder is one yaml anchor)
RELEASED_ENCODER = {"_target_": "modules.astral_quantization.convnext.ConvNeXtV2Stage", "dim": 512,
                    "num_blocks": 12, "intermediate_dim": 1536, "dilation": 1, "input_dim": 1024}
RELEASED = {
    name: {"_target_": "modules.astral_quantization.default_model.AstralQuantizer",
           "tokenizer_name": "openai/whisper-small", "ssl_model_name": "facebook/hubert-large-ll60k",
           "ssl_output_layer": 18, **({"skip_ssl": True} if name.endswith("narrow") else {}),
           "encoder": RELEASED_ENCODER,
           "quantizer": {"_target_": "modules.astral_quantization.bsq.BinarySphericalQuantize",
                         "codebook_size": 32 if name.endswith("narrow") else 2048, "dim": 512,
                         "entropy_loss_weight": 0.1, "diversity_gamma": 1.0, "spherical": True,
                         "enable_entropy_loss": True, "soft_entropy_loss": True}}
    for name in SECTIONS}


def wave(samples: int, seed: int) -> torch.Tensor:
    """The writer's `wave` (scripts/parity/seedvc_astral_references.py): keep the two equal."""
    g = torch.Generator().manual_seed(seed)
    noise = torch.randint(-20000, 20001, (samples,), generator=g)
    envelope = torch.randint(1, 9, (-(-samples // ENVELOPE_BLOCK),), generator=g)
    envelope = envelope.repeat_interleave(ENVELOPE_BLOCK)[:samples]
    return ((noise * envelope).to(torch.float32) / 2 ** 18)[None]


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().float().contiguous().numpy().astype("<f4").tobytes()).hexdigest()


@functools.cache
def tiny_sections() -> dict:
    config = yaml.safe_load((MODEL / "v2" / "vc_wrapper.yaml").read_text())
    return {name: config[name] for name in SECTIONS}


@functools.cache
def tiny_model():
    wide_config, narrow_config = (astral.AstralConfig.from_section(tiny_sections()[s]) for s in SECTIONS)
    hubert = astral.load_hubert(HUBERT, "cpu", layers=wide_config.ssl_output_layer)
    return (hubert, astral.load_quantizer(WIDE, wide_config, "cpu"),
            astral.load_quantizer(NARROW, narrow_config, "cpu"))


# ---------------------------------------------------------------------------------------------------
# The pinned comparison


def stored_diff(ours: torch.Tensor, entry: dict, refs: dict):
    """0.0 when bitwise equal to a stored float entry (whole, or digest + sample); otherwise the max abs difference
    (of the sample where only one is stored); None when the shapes differ."""
    ours = ours.detach().float().contiguous()
    if list(ours.shape) != entry["shape"]:
        return None
    if "tensor" in entry:
        theirs = refs[entry["tensor"]]
        return 0.0 if torch.equal(ours, theirs) else (ours - theirs).abs().max().item()
    if digest(ours) == entry["sha256"]:
        return 0.0
    worst = (ours.reshape(-1)[:: entry["step"]] - refs[entry["sample"]]).abs().max().item()
    return worst if worst > 0 else -1.0  # -1: the digest differs outside the stored sample


def index_diff(ours: torch.Tensor, theirs: torch.Tensor):
    """0.0 when equal; the share of differing tokens otherwise; None for another shape or dtype."""
    if ours.shape != theirs.shape or ours.dtype != theirs.dtype:
        return None
    return 0.0 if torch.equal(ours, theirs) else (ours != theirs).float().mean().item()


@contextmanager
def recording(hubert, quantizers):
    """Per HuBERT call: its input_values, the features the quantizer's encoder gets and what its BSQ gets."""
    calls = []
    handles = [hubert.encoder.register_forward_pre_hook(
        lambda module, args, kwargs: calls.append({"input_values": args[0].clone()}), with_kwargs=True)]
    for quantizer in quantizers:
        handles.append(quantizer.register_forward_pre_hook(
            lambda module, args: calls[-1].__setitem__("features", args[0].clone())))
        handles.append(quantizer.quantizer.register_forward_pre_hook(
            lambda module, args: calls[-1].__setitem__("encoded", args[0].clone())))
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def reference_diffs(folder: Path) -> dict:
    from safetensors.torch import load_file

    refs = load_file(str(folder / "references.safetensors"))
    info = json.loads((folder / "references.json").read_text())
    hubert, wide, narrow = tiny_model()
    out = {}
    for name, case in info["cases"].items():
        audio = wave(case["samples"], case["wave_seed"])
        out[f"{name}/wave"] = 0.0 if digest(audio) == case["wave_sha256"] else None
        precision = torch.autocast("cpu", dtype=torch.float16) if case["float16"] else nullcontext()
        generator = torch.Generator().manual_seed(case["seed"])
        with recording(hubert, (wide, narrow)) as calls, torch.inference_mode():
            with precision:
                got = {"wide": astral.content_indices(hubert, wide, audio, generator)}
            with precision:
                got["narrow"] = astral.content_indices(hubert, narrow, audio, generator)
            after = torch.rand(4, generator=generator)
        for side, indices in got.items():
            out[f"{name}/{side}"] = index_diff(indices, refs[case[side]])
        out[f"{name}/after"] = stored_diff(after, case["after"], refs)
        out[f"{name}/calls"] = 0.0 if len(calls) == len(case["calls"]) else None
        for index, (call, recorded) in enumerate(zip(calls, case["calls"], strict=False)):
            for key in ("input_values", "features", "encoded"):
                out[f"{name}/calls/{index}/{key}"] = stored_diff(call[key], recorded[key], refs)
    return out


@functools.cache
def pinned_diffs() -> dict:
    return run_pinned(__file__, reference_dir("seedvc_astral"), timeout=600)


def test_every_token_and_feature_is_upstreams_bit_for_bit():
    got = pinned_diffs()
    for name in CASES:
        for key in ("wave", "wide", "narrow", "after", "calls", "calls/0/input_values", "calls/0/features",
                    "calls/1/encoded"):
            assert f"{name}/{key}" in got, (name, key)
    assert "long_916801/calls/5/encoded" in got  # three windows, wide then narrow
    bad = {name: value for name, value in got.items() if value != 0.0}
    assert not bad, bad


# ---------------------------------------------------------------------------------------------------
# In process: the set and the configuration


@functools.cache
def recorded() -> dict:
    return json.loads((REFERENCES / "references.json").read_text())


def test_the_set_was_written_from_these_model_files():
    for name, sha in recorded()["model_files"].items():
        assert hashlib.sha256((MODEL / name).read_bytes()).hexdigest() == sha, \
            f"{name} changed since the seedvc_astral set was written: rewrite it (reference_sets.py write)"
    assert set(recorded()["cases"]) == set(CASES)
    assert recorded()["sections"] == tiny_sections()


def test_the_released_sections_read():
    wide, narrow = (astral.AstralConfig.from_section(RELEASED[s]) for s in SECTIONS)
    assert (wide.ssl_output_layer, wide.skip_ssl, narrow.skip_ssl) == (18, False, True)
    assert wide.encoder == narrow.encoder == astral.EncoderConfig(512, 1536, 12, 1, 1024, None)
    assert (wide.quantizer.codebook_dim, narrow.quantizer.codebook_dim) == (11, 5)
    assert wide.quantizer.has_projections and wide.quantizer.dim == 512 and wide.quantizer.spherical
    with torch.device("meta"):
        model = astral.AstralQuantizer(wide)
    names = set(model.state_dict())
    assert {"encoder.input_projection.weight", "encoder.blocks.11.grn.gamma", "quantizer.project_in.weight",
            "quantizer.mask"} <= names and not any("output_projection" in n or "project_out" in n for n in names)


def section(**changes) -> dict:
    node = json.loads(json.dumps(tiny_sections()["content_extractor_wide"]))
    for path, value in changes.items():
        *parents, key = path.split("__")
        target = node
        for parent in parents:
            target = target[parent]
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    return node


@pytest.mark.parametrize(("changes", "words"), [
    (dict(ssl_output_layer=None), "ssl_output_layer"),
    (dict(ssl_output_layer=0), "ssl_output_layer"),
    (dict(encoder=None), "no encoder"),
    (dict(quantizer="bsq"), "no quantizer"),
    (dict(_target_="modules.other.Quantizer"), "AstralQuantizer"),
    (dict(quantizer__codebook_size=48), "power of 2"),
    (dict(quantizer__num_codebooks=2), "num_codebooks"),
    (dict(quantizer__cosine_sim_project_in=True), "cosine_sim_project_in"),
    (dict(quantizer__codebook_scale=-1.0), "codebook_scale"),
    (dict(encoder__downsample_layer_indices=[0], encoder__downsample_factors=[2]), "downsample_layer_indices"),
    (dict(encoder__gin_channels=8), "gin_channels"),
    (dict(encoder__num_blocks=0), "num_blocks"),
])
def test_bad_sections_are_one_line_errors(changes, words):
    with pytest.raises(CheckpointError, match=words) as error:
        astral.AstralConfig.from_section(section(**changes))
    assert "\n" not in str(error.value)


# ---------------------------------------------------------------------------------------------------
# In process: loading


def wide_config(**changes) -> astral.AstralConfig:
    return astral.AstralConfig.from_section(section(**changes))


def test_the_quantizer_loads_what_upstream_loads_and_ignores_the_rest(tmp_path):
    state = torch.load(str(WIDE), map_location="cpu", weights_only=True)
    model = astral.load_quantizer(WIDE, wide_config(), "cpu")
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    ours = model.state_dict()
    assert all(torch.equal(ours[k], state[k]) for k in ours) and "quantizer.project_out.weight" in state
    assert torch.equal(ours["quantizer.mask"], torch.tensor([32, 16, 8, 4, 2, 1]))
    del state["quantizer.mask"]  # upstream keeps the bit weights it starts with
    state["decoder.surprise"] = torch.zeros(2)
    torch.save(state, tmp_path / "other.pth")
    other = astral.load_quantizer(tmp_path / "other.pth", wide_config(), "cpu")
    assert torch.equal(other.state_dict()["quantizer.mask"], ours["quantizer.mask"])


def test_bad_quantizer_files_are_one_line_errors(tmp_path):
    state = torch.load(str(WIDE), map_location="cpu", weights_only=True)
    cases = {
        "missing": ({k: v for k, v in state.items() if k != "encoder.blocks.1.pwconv2.bias"}, wide_config(),
                    "lacks 1 tensors .*encoder.blocks.1.pwconv2.bias"),
        "no_projection": ({k: v for k, v in state.items() if not k.startswith("quantizer.project_in")},
                          wide_config(), "lacks 2 tensors"),
        "narrow_sizes": (state, astral.AstralConfig.from_section(tiny_sections()["content_extractor_narrow"]),
                         "quantizer.mask has shape \\(6,\\)"),
        "ssl_model": ({**state, "ssl_model.encoder.layers.0.attention.q_proj.weight": torch.zeros(2, 2)},
                      wide_config(), "ssl_model"),
        "mismatch": (state, wide_config(quantizer__dim=16), "encoder gives 24 channels .* dim 16"),
    }
    for name, (contents, config, words) in cases.items():
        torch.save(contents, tmp_path / f"{name}.pth")
        with pytest.raises(CheckpointError, match=words) as error:
            astral.load_quantizer(tmp_path / f"{name}.pth", config, "cpu")
        assert "\n" not in str(error.value), name
    (tmp_path / "bad.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        astral.load_quantizer(tmp_path / "bad.pth", wide_config(), "cpu")
    with pytest.raises(CheckpointError, match="does not exist"):
        astral.load_quantizer(tmp_path / "absent.pth", wide_config(), "cpu")


def test_hubert_loads_from_safetensors_or_pytorch_model_bin(tmp_path):
    from safetensors.torch import load_file

    hubert, _, _ = tiny_model()
    assert hubert.layers == 2 and isinstance(hubert.encoder.encoder.layer_norm, torch.nn.Identity)
    assert hubert.features.do_normalize and not any(p.requires_grad for p in hubert.parameters())
    folder = tmp_path / "hubert"
    folder.mkdir()
    shutil.copy(HUBERT / "config.json", folder)
    shutil.copy(HUBERT / "preprocessor_config.json", folder)
    torch.save(load_file(str(HUBERT / "model.safetensors")), folder / "pytorch_model.bin")
    other = astral.load_hubert(folder, "cpu", layers=2)
    audio = wave(3201, 9)
    with torch.inference_mode():
        assert torch.equal(other(audio), hubert(audio)) and hubert(audio).shape == (1, 9, 32)  # (3201 - 80) // 320


def test_bad_hubert_folders_are_one_line_errors(tmp_path):
    with pytest.raises(CheckpointError, match="no config.json"):
        astral.load_hubert(tmp_path, "cpu", layers=2)
    shutil.copy(HUBERT / "config.json", tmp_path)
    with pytest.raises(CheckpointError, match="neither model.safetensors nor pytorch_model.bin"):
        astral.load_hubert(tmp_path, "cpu", layers=2)
    shutil.copy(HUBERT / "model.safetensors", tmp_path)
    with pytest.raises(CheckpointError, match="keeps 4 HuBERT layers .* has 3"):
        astral.load_hubert(tmp_path, "cpu", layers=4)
    with pytest.raises(CheckpointError, match="positive"):
        astral.load_hubert(tmp_path, "cpu", layers=0)
    (tmp_path / "preprocessor_config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="preprocessor_config.json"):
        astral.load_hubert(tmp_path, "cpu", layers=2)
    (tmp_path / "preprocessor_config.json").unlink()  # absent: the feature extractor's defaults
    assert astral.load_hubert(tmp_path, "cpu", layers=3).features.do_normalize


# ---------------------------------------------------------------------------------------------------
# In process: content_indices


def test_bad_inputs_are_one_line_errors():
    hubert, wide, _ = tiny_model()
    with pytest.raises(InputError, match="one utterance"):
        astral.content_indices(hubert, wide, torch.zeros(2, 8000))
    with pytest.raises(InputError, match="one utterance"):
        astral.content_indices(hubert, wide, torch.zeros(8000))
    with pytest.raises(InputError, match="too few"):
        astral.content_indices(hubert, wide, wave(399, 1))
    with pytest.raises(InputError, match=r"\(batch, frames, 32\)"):
        wide(torch.zeros(1, 5, 16))


def test_each_window_draws_one_coin_per_kept_layer_and_none_without_a_generator():
    hubert, wide, narrow = tiny_model()
    for samples, windows in ((8000, 1), (480000 + 1, 2)):
        generator = torch.Generator().manual_seed(5)
        indices = astral.content_indices(hubert, narrow, wave(samples, 2), generator)
        want = torch.Generator().manual_seed(5)
        for _ in range(windows * hubert.layers):
            torch.rand((), generator=want)
        assert torch.equal(generator.get_state(), want.get_state())
        assert indices.dtype == torch.int64 and int(indices.max()) < 8
    state = torch.random.get_rng_state()
    astral.content_indices(hubert, wide, wave(8000, 2))
    assert torch.equal(torch.random.get_rng_state(), state)  # the global generator is never touched


if __name__ == "__main__":  # the pinned subprocess of the reference test
    torch.set_num_threads(1)
    print(json.dumps(reference_diffs(Path(sys.argv[1]))))
