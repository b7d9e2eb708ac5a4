"""GPT-SoVITS's SoVITS synthesizer, v2 and v2ProPlus (engines/gpt_sovits/sovits.py, sovits_weights.py).

Against tests/parity/data/gpt_sovits_sovits (scripts/parity/gpt_sovits_sovits_references.py: upstream's own
SynthesizerTrn at RVC-Boss/GPT-SoVITS 48b1a01 under the parity pins). The weights files are rebuilt here from the names
and shapes the set records and the writer's seeded fill (scripts/parity/gpt_sovits_weights.py), as upstream's trainer
writes them (float16; v2ProPlus with its version tag over the zip magic), and read through `load_sovits`. In a pinned
subprocess: the references' spectrograms from their waveforms (upstream's spectrogram_torch against
reference.linear_spectrogram), then `decode` from ours with one and two references (their timbres averaged), speeds 1,
1.25 and 0.8, v2ProPlus with ERes2NetV2 embeddings, the noise drawn from the request's generator as upstream draws it
after set_seed; and `extract_latent` (the prompt's tokens). Bitwise where the set's floats are this machine's (its
fingerprint and census agree, and the spectrograms, the probe, are bitwise); elsewhere (tests/fallback.py) the
spectrograms and waveforms within TOLERANCE (measured spread: spread.json) and the latent tokens exactly (integers from
a nearest-codeword search; a tie moved by rounding would fail loudly). In process: the version is told as upstream tells
it (tag, md5, size, 322 symbols), an upstream HParams config reads as dicts while the load stays weights-only, and bad
files and inputs are one-line errors.
"""

import functools
import json
import sys
import types
from pathlib import Path

import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fallback import Comparison  # noqa: E402
from helpers import parity_module, reference_sets, run_pinned  # noqa: E402

from mizuoto.core.errors import CheckpointError, InputError  # noqa: E402
from mizuoto.engines.gpt_sovits import reference, sovits, sovits_weights  # noqa: E402

SET = "gpt_sovits_sovits"
TOLERANCE = 3e-5
weights = parity_module("gpt_sovits_weights")


def committed() -> Path:
    return reference_sets().SETS[SET].committed


def info() -> dict:
    return json.loads((committed() / "references.json").read_text())


def write_file(folder: Path, name: str) -> Path:
    """The set's model `name` as the weights file upstream's trainer would have written."""
    record = info()["models"][name]
    state = weights.sovits_state(record["entries"], record["seed"])
    path = folder / f"{name}.pth"
    path.write_bytes(weights.sovits_file_bytes(state, record["config"], record["version"]))
    return path


def ours(folder: Path, out: Path) -> dict:
    from safetensors.torch import load_file, save_file

    refs = load_file(str(folder / "references.safetensors"))
    recorded = json.loads((folder / "references.json").read_text())
    models = {name: sovits_weights.load_sovits(write_file(out.parent, name)) for name in recorded["models"]}
    data = recorded["models"]["v2"]["config"]["data"]
    results = {}
    with torch.inference_mode():
        for i in range(2):
            results[f"refer{i}"] = reference.linear_spectrogram(refs[f"wave{i}"], data["filter_length"],
                                                                data["hop_length"], data["win_length"])
        for name, case in recorded["cases"].items():
            model = models[case["model"]]
            refers = [results[f"refer{i}"] for i in range(case["references"])]  # ours, from the waveforms
            sv = [refs[f"sv{i}"] for i in range(case["references"])] if model.config.is_pro else None
            results[f"{name}/audio"] = model.decode(refs["codes"], refs["text"], refers,
                                                    torch.Generator().manual_seed(case["seed"]), speed=case["speed"],
                                                    sv=sv)
        results["latent"] = models["v2"].extract_latent(refs["ssl"])
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"saved": str(out), "versions": {n: m.config.version for n, m in models.items()}}


def test_upstreams_waveforms_and_latent(tmp_path, record_property):
    from safetensors.torch import load_file

    out = tmp_path / "ours.safetensors"
    reply = run_pinned(__file__, committed(), out)
    assert reply["versions"] == {"v2": "v2", "v2ProPlus": "v2ProPlus"}  # told from the files themselves
    comparison = Comparison.for_set(SET)
    theirs, mine = load_file(str(committed() / "references.safetensors")), load_file(str(out))
    for name in ("refer0", "refer1"):  # the 2048-point frames: MKL's FFT rounds them by CPU model
        comparison.probe(f"{name}: spectrogram", mine[name], theirs[name], TOLERANCE)
    for name in info()["cases"]:
        comparison.deterministic(f"{name}: waveform", mine[f"{name}/audio"], theirs[f"{name}/audio"], TOLERANCE)
    assert torch.equal(mine["latent"], theirs["latent"]), "extract_latent's tokens differ from upstream's"
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")


def test_the_set_covers_both_models_speeds_and_reference_counts():
    recorded = info()
    cases = recorded["cases"].values()
    assert recorded["upstream"]["commit"].startswith("48b1a01") and not recorded["upstream"]["modified"]
    assert {c["model"] for c in cases} == {"v2", "v2ProPlus"}
    assert {c["references"] for c in cases} == {1, 2} and {c["speed"] for c in cases} >= {1.0, 1.25, 0.8}
    # nothing is left at upstream's init: the coupling layers' zero-initialised `post` is filled too
    names = [n for n, _ in recorded["models"]["v2"]["entries"]]
    assert "flow.flows.0.post.weight" in names
    assert weights.sovits_fill("flow.flows.0.post.weight", (16, 192, 1), 3).abs().min() > 0
    assert max(recorded["spread"]["max"].values()) * 5 < TOLERANCE


# ---------------------------------------------------------------------------------------------------
# In process


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sovits")
    return {name: write_file(folder, name) for name in info()["models"]}


@functools.cache
def inputs():
    from safetensors.torch import load_file

    return load_file(str(committed() / "references.safetensors"))


def test_versions_are_told_as_upstream_tells_them(files, tmp_path):
    assert files["v2ProPlus"].read_bytes()[:2] == b"06" and files["v2"].read_bytes()[:2] == b"PK"
    assert sovits_weights.read_sovits_weights(files["v2ProPlus"])[0] == "v2ProPlus"
    assert sovits_weights.read_sovits_weights(files["v2"])[0] == "v2"  # a small zip: v2 by its size rule
    assert sovits_weights.sovits_version(Path("x"), b"PK" + bytes(10), 10) == "v1"  # under 82978 KiB
    assert sovits_weights.sovits_version(Path("x"), b"PK" + bytes(10), 800 * 2 ** 20) == "v3"
    assert sovits_weights.sovits_version(Path("x"), b"05rest", 10) == "v2Pro"
    # a tag of v1 with v2's 732 symbols is v2, as TTS.init_vits_weights decides; 322 symbols are v1
    tagged = tmp_path / "tagged_v1.pth"
    tagged.write_bytes(b"00" + files["v2"].read_bytes()[2:])
    assert sovits_weights.load_sovits(tagged).config.version == "v2"
    data = torch.load(str(files["v2"]), map_location="cpu", weights_only=True)
    data["weight"]["enc_p.text_embedding.weight"] = data["weight"]["enc_p.text_embedding.weight"][:322]
    torch.save(data, tmp_path / "v1.pth")
    with pytest.raises(CheckpointError, match="v1 model; this loader reads v2, v2Pro, v2ProPlus"):
        sovits_weights.load_sovits(tmp_path / "v1.pth")
    # the load option overrides what the file says (here to a model the file then does not fit)
    with pytest.raises(CheckpointError, match="as a v2ProPlus model"):
        sovits_weights.load_sovits(files["v2"], version="v2ProPlus")


def test_an_upstream_hparams_config_reads_as_dicts(tmp_path, monkeypatch):
    """Upstream's trainer saves its utils.HParams object as the config; a stand-in module makes one here."""
    fake = types.ModuleType("utils")

    class HParams:
        def __init__(self, **entries):
            for key, value in entries.items():
                setattr(self, key, HParams(**value) if isinstance(value, dict) else value)

    HParams.__module__, HParams.__qualname__ = "utils", "HParams"
    fake.HParams = HParams
    monkeypatch.setitem(sys.modules, "utils", fake)
    record = info()["models"]["v2"]
    state = weights.sovits_state(record["entries"], record["seed"])
    path = tmp_path / "hparams.pth"
    path.write_bytes(weights.sovits_file_bytes(state, HParams(**record["config"]), "v2"))
    version, config, _ = sovits_weights.read_sovits_weights(path)
    assert version == "v2" and config["model"]["gin_channels"] == 512 and config["data"]["hop_length"] == 640
    assert sovits_weights.load_sovits(path).config.gin_channels == 512


def test_bad_files_are_one_line_errors(files, tmp_path):
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"PKnot a zip at all")
    with pytest.raises(CheckpointError, match="not a readable SoVITS weights file"):
        sovits_weights.load_sovits(junk)
    junk.write_bytes(b"zzz")
    with pytest.raises(CheckpointError, match="neither a zip header nor a GPT-SoVITS version tag"):
        sovits_weights.load_sovits(junk)
    gpt = reference_sets().SETS["gpt_sovits_t2s"].committed / "gpt.ckpt"
    with pytest.raises(CheckpointError, match="is a GPT weights file, not a SoVITS weights file"):
        sovits_weights.load_sovits(gpt)
    data = torch.load(str(files["v2"]), map_location="cpu", weights_only=True)
    del data["weight"]["dec.ups.0.weight_v"]
    torch.save(data, tmp_path / "cut.pth")
    with pytest.raises(CheckpointError, match=r"missing \[.dec.ups.0.weight.\]"):
        sovits_weights.load_sovits(tmp_path / "cut.pth")
    data = torch.load(str(files["v2"]), map_location="cpu", weights_only=True)
    data["config"]["model"]["resblock"] = "2"
    torch.save(data, tmp_path / "rb2.pth")
    with pytest.raises(CheckpointError, match="resblock '2'"):
        sovits_weights.load_sovits(tmp_path / "rb2.pth")


def test_bad_inputs_are_one_line_errors(files):
    model = sovits_weights.load_sovits(files["v2ProPlus"])
    refs = inputs()
    codes, text, refer, sv = refs["codes"], refs["text"], refs["refer0"], refs["sv0"]
    g = torch.Generator()
    for args, kwargs, message in (
            ((codes[0], text, [refer]), {"sv": [sv]}, r"semantic tokens \(1, 1, T\)"),
            ((codes + 2000, text, [refer]), {"sv": [sv]}, "1024-entry codebook"),
            ((codes, text + 1000, [refer]), {"sv": [sv]}, "outside the SoVITS model's 732 phones"),
            ((codes, text, [refer[:, :100]]), {"sv": [sv]}, ">= 704 bins"),
            ((codes, text, [refer]), {}, r"one ERes2NetV2 embedding \(1, 20480\) per reference"),
            ((codes, text, [refer]), {"sv": [sv], "speed": 0.0}, "speed must be above 0")):
        with pytest.raises(InputError, match=message):
            model.decode(*args, g, **kwargs)


def test_the_noise_is_the_one_draw(files):
    """Two decodes from equally seeded generators agree; the generator advances by exactly m_p's numel."""
    model = sovits_weights.load_sovits(files["v2"])
    refs = inputs()
    g = torch.Generator().manual_seed(5)
    with torch.inference_mode():
        a = model.decode(refs["codes"], refs["text"], [refs["refer0"]], g)
    reference = torch.Generator().manual_seed(5)
    torch.randn(1, model.config.inter_channels, 2 * refs["codes"].shape[2], generator=reference)
    assert torch.equal(torch.rand(3, generator=g), torch.rand(3, generator=reference))
    with torch.inference_mode():
        b = model.decode(refs["codes"], refs["text"], [refs["refer0"]], torch.Generator().manual_seed(5))
    assert torch.equal(a, b) and a.shape == (1, 1, 2 * refs["codes"].shape[2] * model.config.hop)


def test_the_mrte_site_is_declared():
    from mizuoto.engines.gpt_sovits.vits_attention import MRTE_SITE

    assert MRTE_SITE.name == "gpt_sovits.mrte" and MRTE_SITE.approx_ok
    assert sovits.MRTE_HIDDEN == 512


if __name__ == "__main__":  # the pinned subprocess
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))
