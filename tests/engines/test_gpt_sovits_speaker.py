"""v2Pro / v2ProPlus's speaker encoder (engines/gpt_sovits/speaker.py): ERes2NetV2's forward3 on Kaldi filterbanks,
as sv.SV.compute_embedding3 runs it.

Against tests/parity/data/gpt_sovits_speaker (scripts/parity/gpt_sovits_speaker_references.py: upstream's own
eres2net/kaldi.py and eres2net/ERes2NetV2.py at RVC-Boss/GPT-SoVITS 48b1a01 under the parity pins), two narrow
ERes2NetV2s whose weights are rebuilt here from the names and shapes the set records and the writer's seeded fill
(every batch-norm statistic off its initial value). In a pinned subprocess: the filterbank (mizuoto/audio/kaldi_fbank,
against upstream's copy of torchaudio's) and the embeddings, bitwise where the set's fingerprint is this machine's,
within TOLERANCE elsewhere (tests/fallback.py; the measured spread is in spread.json). In process: the released
architecture's sizes and a file of another architecture refused in one line."""

import json
import sys
from pathlib import Path

import pytest
import torch

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fallback import Comparison  # noqa: E402
from helpers import parity_module, reference_sets, run_pinned  # noqa: E402

from mizuoto.audio.kaldi_fbank import fbank  # noqa: E402
from mizuoto.core.errors import CheckpointError  # noqa: E402
from mizuoto.engines.gpt_sovits import speaker  # noqa: E402

SET = "gpt_sovits_speaker"
TOLERANCE = 3e-4  # the embeddings move by up to 5.1e-5 when a pin is lifted (spread.json)
weights = parity_module("gpt_sovits_weights")


def committed() -> Path:
    return reference_sets().SETS[SET].committed


def info() -> dict:
    return json.loads((committed() / "references.json").read_text())


def model_of(record: dict) -> speaker.ERes2NetV2:
    args = record["args"]
    model = speaker.ERes2NetV2(base_width=args["baseWidth"], scale=args["scale"], expansion=args["expansion"],
                               m_channels=args["m_channels"], blocks=tuple(args["num_blocks"]))
    model.load_state_dict(weights.speaker_state(record["entries"], record["seed"]))
    return model.eval()


def ours(folder: Path, out: Path) -> dict:
    from safetensors.torch import load_file, save_file

    refs = load_file(str(folder / "references.safetensors"))
    recorded = json.loads((folder / "references.json").read_text())
    results = {}
    with torch.inference_mode():
        for case in recorded["cases"]:
            name, wave = case.split("/")
            results[f"{wave}/fbank"] = fbank(refs[f"{wave}/wave"], num_mel_bins=80, sample_frequency=16000,
                                             dither=0.0)[None]
            results[f"{case}/embedding"] = speaker.embedding(model_of(recorded["models"][name]), refs[f"{wave}/wave"])
    save_file({k: v.contiguous() for k, v in results.items()}, str(out))
    return {"cases": len(recorded["cases"])}


def test_upstreams_filterbanks_and_embeddings(tmp_path, record_property):
    from safetensors.torch import load_file

    out = tmp_path / "ours.safetensors"
    assert run_pinned(__file__, committed(), out)["cases"] == 4
    comparison = Comparison.for_set(SET)
    theirs, mine = load_file(str(committed() / "references.safetensors")), load_file(str(out))
    for case in info()["cases"]:
        wave = case.split("/")[1]
        comparison.deterministic(f"{wave}: fbank", mine[f"{wave}/fbank"], theirs[f"{wave}/fbank"], TOLERANCE)
        comparison.deterministic(f"{case}: embedding", mine[f"{case}/embedding"], theirs[f"{case}/embedding"],
                                 TOLERANCE)
    record_property("parity_mode", comparison.mode)
    print(f"{SET} parity: {comparison.mode} ({comparison.why})", *comparison.checked, sep="\n  ")


def test_the_set_is_upstreams_and_its_spread_is_well_inside_the_tolerance():
    recorded = info()
    assert recorded["upstream"]["commit"].startswith("48b1a01") and not recorded["upstream"]["modified"]
    assert max(recorded["spread"]["max"].values()) * 5 < TOLERANCE
    names = [n for n, _ in recorded["models"]["narrow"]["entries"]]
    assert "layer3.0.fuse_models.0.local_att.4.running_var" in names and "fuse34.local_att.0.weight" in names


def test_our_names_are_upstreams_and_the_released_size_gives_sovits_its_20480_features():
    for record in info()["models"].values():
        assert list(model_of(record).state_dict()) == [n for n, _ in record["entries"]]
    with torch.device("meta"):
        released = speaker.ERes2NetV2(**speaker.RELEASED)
    assert released.layer3_ds.out_channels * 80 // 8 == 20480  # SoVITS v2Pro's sv_emb input


def test_a_missing_or_foreign_checkpoint_is_a_one_line_error(tmp_path):
    with pytest.raises(CheckpointError, match="need the speaker encoder sv/pretrained_eres2netv2w24s4ep4.ckpt"):
        speaker.load_speaker_encoder(tmp_path / "missing.ckpt")
    torch.save({"conv1.weight": torch.zeros(3)}, tmp_path / "other.ckpt")
    with pytest.raises(CheckpointError, match="is not the ERes2NetV2 .w24 s4. GPT-SoVITS uses .missing"):
        speaker.load_speaker_encoder(tmp_path / "other.ckpt")
    (tmp_path / "broken.ckpt").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(CheckpointError, match="cannot read broken.ckpt"):
        speaker.load_speaker_encoder(tmp_path / "broken.ckpt")


if __name__ == "__main__":
    print(json.dumps(ours(Path(sys.argv[1]), Path(sys.argv[2]))))
