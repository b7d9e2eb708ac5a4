"""A CosyVoice release folder read by engines/cosyvoice/checkpoint.py: the yaml as data, llm.pt / flow.pt / hift.pt
loaded strictly onto the meta-built modules, and what a bad folder says.

The folder is the tiny release of scripts/parity/cosyvoice_release.py, built from the committed CosyVoice sets'
recipes (tests/cosyvoice_parts.release_parts). What it loads must be the very modules the sets' tests build by
hand (cosyvoice_parts.lm / flows / vocoder): the same outputs bit for bit on any machine, so every parity result of
those sets holds for a loaded release.
"""

import json
from pathlib import Path

import cosyvoice_parts
import pytest
import torch
from helpers import parity_module, reference_sets

from mizuoto.core.errors import CheckpointError
from mizuoto.engines.cosyvoice import checkpoint
from mizuoto.nn import hift_causal

release = parity_module("cosyvoice_release")


def sets() -> Path:
    return reference_sets().SETS["cosyvoice_model"].committed.parent


def write(folder: Path, version: str, **changes) -> Path:
    parts = {**cosyvoice_parts.release_parts(sets(), version), **changes}
    tokenizer = folder.parent / "tokenizer_files"
    tokenizer.mkdir(exist_ok=True)
    (tokenizer / "vocab.json").write_text("{}")
    stub = folder.parent / "stub.onnx"
    stub.write_bytes(b"")
    return release.write_release(folder, version, tokenizer_files=tokenizer, speech_tokenizer=stub, campplus=stub,
                                 **parts)


def loaded(folder: Path):
    files = checkpoint.find_files(folder)
    doc = checkpoint.read_yaml(files.yaml)
    return files, doc, [load(files, doc, "cpu", torch.float32) for load in
                        (checkpoint.load_lm, checkpoint.load_flow, checkpoint.load_vocoder)]


@pytest.mark.parametrize("version", ["cv2", "cv3"])
def test_a_release_loads_the_modules_the_sets_check(tmp_path, version):
    files, doc, (lm, flow, vocoder) = loaded(write(tmp_path / version, version))
    assert files.version == int(version[2]) and checkpoint.sample_rate(files, doc) == 24000
    assert checkpoint.sampling(files, doc) == checkpoint.RasParams(0.8, 25, 10, 0.1)
    root = sets()
    llm_info = json.loads((root / "cosyvoice_llm" / "references.json").read_text())
    model_info = json.loads((root / "cosyvoice_model" / "references.json").read_text())
    from safetensors.torch import load_file

    flow_info = json.loads((root / "cosyvoice_flow" / "references.json").read_text())
    flow_refs = load_file(str(root / "cosyvoice_flow" / "references.safetensors"))
    want_lm = cosyvoice_parts.lm(llm_info, version)
    want_flow = cosyvoice_parts.flows(flow_info, flow_refs)[version]
    want_hift, _ = cosyvoice_parts.vocoder(model_info["hift"][version])
    for module, name in ((lm, "llm.pt"), (flow, "flow.pt"), (vocoder, "hift.pt")):
        checkpoint.check_materialised(module, name)

    g = torch.Generator().manual_seed(3)
    text = torch.cat([torch.randint(0, 1000, (1, 5), generator=g), torch.tensor([[151646]])], dim=1)
    lm_input = lm.prompt(text, text[:, :0], torch.zeros(1, 0, dtype=torch.long))
    assert torch.equal(lm_input, want_lm.prompt(text, text[:, :0], torch.zeros(1, 0, dtype=torch.long)))
    steps = [int(t) for t in torch.randint(0, 6561, (6,), generator=g)]
    assert torch.equal(lm.teacher_forced(lm_input, steps), want_lm.teacher_forced(lm_input, steps))

    token = torch.randint(0, 6561, (1, 7), generator=g, dtype=torch.int32)
    prompt = torch.randint(0, 6561, (1, 3), generator=g, dtype=torch.int32)
    feat, embedding = torch.randn(1, 6, 80, generator=g), torch.randn(1, 192, generator=g)
    args = (token, torch.tensor([7]), prompt, torch.tensor([3]), feat, embedding)
    mel = flow.inference(*args)
    assert torch.equal(mel, want_flow.inference(*args))

    if version == "cv2":
        wave, _ = vocoder.inference(mel, torch.Generator().manual_seed(5), cache_source=torch.zeros(1, 1, 0))
        want, _ = want_hift.inference(mel, torch.Generator().manual_seed(5), cache_source=torch.zeros(1, 1, 0))
        assert torch.equal(wave, want)
    else:  # the noise tables are the yaml's: what upstream's CosyVoice3 builds from its flow's seed 0
        want_noise = hift_causal.cosyvoice3_noise(vocoder.config, {"vocab_size": 6561, "input_size": 80,
                                                           "spk_embed_dim": 192, "output_size": 80})
        assert torch.equal(vocoder.noise.state, want_noise.state)
        want_hift.m_source.noise = want_noise
        assert torch.equal(vocoder.inference(mel)[0], want_hift.inference(mel)[0])


def test_what_a_bad_folder_says(tmp_path):
    with pytest.raises(CheckpointError, match="neither cosyvoice2.yaml nor cosyvoice3.yaml"):
        checkpoint.find_files(tmp_path)
    (tmp_path / "cosyvoice.yaml").write_text("a: 1")
    with pytest.raises(CheckpointError, match="CosyVoice 1"):
        checkpoint.find_files(tmp_path)
    folder = write(tmp_path / "cv2", "cv2")
    (folder / "hift.pt").unlink()
    with pytest.raises(CheckpointError, match="lacks hift.pt; download the whole CosyVoice 2 folder"):
        checkpoint.find_files(folder / "llm.pt")
    (folder / "cosyvoice3.yaml").write_text("a: 1")
    with pytest.raises(CheckpointError, match="both"):
        checkpoint.find_files(folder)


@pytest.mark.parametrize("change,match", [
    ("drop", "llm.pt lacks 1 tensors the yaml's model needs"),
    ("extra", "llm.pt holds 1 tensors the yaml's model has no place for"),
    ("shape", "llm_decoder.weight has shape"),
])
def test_an_llm_pt_that_does_not_fit_the_yaml_is_one_line(tmp_path, change, match):
    state = cosyvoice_parts.release_parts(sets(), "cv2")["llm"]
    if change == "drop":
        state.pop("llm_embedding.weight")
    elif change == "extra":
        state["llm.model.model.extra"] = torch.zeros(1)
    else:
        state["llm_decoder.weight"] = state["llm_decoder.weight"][:-1]
    files = checkpoint.find_files(write(tmp_path / "cv2", "cv2", llm=state))
    with pytest.raises(CheckpointError, match=match):
        checkpoint.load_lm(files, checkpoint.read_yaml(files.yaml), "cpu", torch.float32)


def test_a_truncated_flow_pt_and_a_bad_spk2info_are_one_line(tmp_path):
    folder = write(tmp_path / "cv3", "cv3")
    data = (folder / "flow.pt").read_bytes()
    (folder / "flow.pt").write_bytes(data[: len(data) // 2])
    files = checkpoint.find_files(folder)
    with pytest.raises(CheckpointError, match="flow.pt is not a readable checkpoint"):
        checkpoint.load_flow(files, checkpoint.read_yaml(files.yaml), "cpu", torch.float32)
    torch.save({"a": torch.zeros(3)}, folder / "spk2info.pt")
    with pytest.raises(CheckpointError, match="not a CosyVoice speaker table"):
        checkpoint.load_speakers(checkpoint.find_files(folder))
    torch.save({"中文女": {"embedding": torch.zeros(1, 192)}}, folder / "spk2info.pt")
    assert list(checkpoint.load_speakers(checkpoint.find_files(folder))) == ["中文女"]
