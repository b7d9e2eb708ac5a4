"""GPT-SoVITS v5 (v5dev, v5turbo) as users run it: a v5 SoVITS file (v4's SynthesizerTrnV3 with a DiT that has no
step embedding) is told from its tag (b"07" v5dev, b"08" v5turbo), its released name or, large and untagged, its
CFM; it speaks at 48 kHz through v5's release of the v4 vocoder, with the version's sampling defaults (v5turbo 4
steps without guidance, v5dev 32 with cfg 1.3) and upstream's limits on them; every fragment renders as
synthesize_v5_mel renders it (the features, cfm_v5.synthesize, the vocoder: the gpt_sovits_v5 set compares that
solver with upstream's, gpt_sovits_e2e_v3v4 the features, reference mel and vocoder of the v4 path it shares).
On the tiny v4 files of the gpt_sovits_e2e_v3v4 set (scripts/parity/gpt_sovits_e2e_models.py) turned v5: the
base's entries without d_embed."""

import json
import shutil

import pytest
import torch
from helpers import parity_module, reference_sets

from mizuoto import host
from mizuoto.audio import files
from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.engines.gpt_sovits import sovits_weights

TEXT = "这个重要的问题很重。"
PROMPT = "他长得很高，长大了以后还是那么快乐"
ASSETS = "engines.gpt_sovits.load_options.assets"
V5_SEED = 360
TAGS = {"v5dev": b"07", "v5turbo": b"08"}


@pytest.fixture(scope="module")
def voices(tmp_path_factory):
    """v5dev and v5turbo files beside the set's GPT, with its assets and the v4 vocoder as gsv-v5-pretrained's."""
    from safetensors.torch import load_file

    tiny = parity_module("gpt_sovits_e2e_models")
    data = reference_sets().SETS["gpt_sovits_e2e_v3v4"].committed
    info = json.loads((data / "references.json").read_text())
    root = tmp_path_factory.mktemp("gsv_v5")
    parity = data.parent
    paths = tiny.write_models(root, info["models"], parity / "gpt_sovits_zh_g2p" / "bert" / "vocab.txt",
                              parity / "gpt_sovits_zh_g2p" / "g2pw", parity / info["inputs"]["detector"])
    refs = load_file(str(parity / info["inputs"]["vocoders"] / "references.safetensors"))
    paths.update(tiny.write_v3v4(root, info["models"], {k: refs[f"filter/{k}"] for k in tiny.BIGVGAN_FILTERS}))
    assets = paths["assets"]
    (assets / "gsv-v5-pretrained").mkdir()
    shutil.copy(assets / "gsv-v4-pretrained" / "vocoder.pth", assets / "gsv-v5-pretrained" / "vocoder.pth")
    entries = [e for e in info["models"]["v3v4"]["v4"]["entries"] if ".d_embed." not in e[0]]
    state = tiny.cfm_state(entries, V5_SEED)
    for version, tag in TAGS.items():
        paths[version] = root / f"tiny_{version}.pth"
        paths[version].write_bytes(tiny.tagged_file_bytes(state, tiny.v3_config(version), tag))
    paths["untagged"] = root / "untagged_v5.pth"
    paths["untagged"].write_bytes(tiny.tagged_file_bytes(state, tiny.v3_config("v5dev"), None))
    return paths, files.read(data / info["inputs"]["reference"], "reference audio")


@pytest.fixture(scope="module")
def models(voices):
    return {v: host.load_model("gpt_sovits", str(voices[0][v]), device="cpu") for v in TAGS}


def say(model, reference, seed=1, **params):
    return host.speak(model, params.pop("text", TEXT), seed=seed, params=params, reference=reference,
                      reference_text=PROMPT)


def test_the_version_is_told_from_the_tag_the_name_and_the_cfm(voices, monkeypatch, tmp_path):
    paths = voices[0]
    for version in TAGS:
        assert sovits_weights.read_sovits_weights(paths[version])[0] == version
    # untagged: by the released names (any case), else the size rule's v3, which a large file's CFM corrects
    for name, version in (("s2Gv5turbo.pth", "v5turbo"), ("S2GV5DEV.pth", "v5dev")):
        shutil.copy(paths["untagged"], tmp_path / name)
        assert sovits_weights.read_sovits_weights(tmp_path / name)[0] == version
    monkeypatch.setattr(sovits_weights, "SMALL", 0)  # every file counts as 700 MiB or more
    monkeypatch.setattr(sovits_weights, "LARGE", 0)
    assert sovits_weights.read_sovits_weights(paths["untagged"])[0] == "v5dev"
    assert sovits_weights.read_sovits_weights(paths["v3"])[0] == "v3"  # a DiT with d_embed stays v3
    monkeypatch.undo()
    assert sovits_weights.read_sovits_weights(paths["untagged"])[0] == "v2"  # small and untagged: upstream's rule
    # the tags and checksums are ac846f5's process_ckpt
    assert sovits_weights.HEAD_VERSIONS[b"07"] == "v5dev" and sovits_weights.HEAD_VERSIONS[b"08"] == "v5turbo"


def test_a_version_override_that_contradicts_the_cfm_is_refused(voices):
    paths = voices[0]
    with pytest.raises(CheckpointError, match="tiny_e2e_v3.pth's CFM has a step embedding, so it is not a v5turbo"):
        sovits_weights.load_sovits(paths["v3"], version="v5turbo")
    with pytest.raises(CheckpointError, match="tiny_v5dev.pth's CFM lacks a step embedding, so it is not a v4"):
        sovits_weights.load_sovits(paths["v5dev"], version="v4")


def test_v5_speaks_at_48_khz_with_its_versions_defaults(models, voices):
    reference = voices[1]
    for version, model in models.items():
        assert model.state.sovits.config.version == version and not model.state.sovits.cfm.config.step_embedding
        first = say(model, reference)
        assert first.sample_rate == 48000 and first.waveform.abs().max() > 0
        assert torch.equal(first.waveform, say(model, reference).waveform)
        assert not torch.equal(first.waveform, say(model, reference, seed=2).waveform)
    turbo, dev = models["v5turbo"], models["v5dev"]
    # 0 steps and a negative cfg are the version's: v5turbo 4 without guidance, v5dev 32 with 1.3
    assert torch.equal(say(turbo, reference).waveform, say(turbo, reference, sample_steps=4, cfg_rate=0.0).waveform)
    assert not torch.equal(say(turbo, reference).waveform, say(turbo, reference, cfg_rate=0.5).waveform)
    assert torch.equal(say(dev, reference, sample_steps=4).waveform,
                       say(dev, reference, sample_steps=4, cfg_rate=1.3).waveform)


def test_a_fragment_renders_as_synthesize_v5_mel(models, voices, monkeypatch):
    """The engine's decode of a fragment is the features, cfm_v5.synthesize from the reference's prompt, then the
    vocoder: the calls upstream's using_vocoder_synthesis makes for v5."""
    from mizuoto.engines.gpt_sovits import cfm_v5
    from mizuoto.engines.gpt_sovits import vocoder_synthesis as mel_synthesis

    calls = []
    synthesize = cfm_v5.synthesize
    monkeypatch.setattr(cfm_v5, "synthesize", lambda *args, **kw: calls.append(args) or synthesize(*args, **kw))
    model = models["v5dev"]
    say(model, voices[1], sample_steps=8)
    assert calls and all(c[4:6] == (8, 1.3) for c in calls)
    cfm, reference_features, target, mel = calls[0][:4]
    assert cfm is model.state.sovits.cfm and reference_features.shape[1] == target.shape[1] == 512
    assert mel.shape[-1] == reference_features.shape[-1] <= cfm_v5.REFERENCE_FRAMES
    want = say(model, voices[1], sample_steps=4).waveform

    def refused(*args, **kwargs):
        raise AssertionError("a v3/v4 renderer ran for v5")

    monkeypatch.setattr(mel_synthesis, "render_rolling", refused)
    monkeypatch.setattr(mel_synthesis, "render_batched", refused)
    assert torch.equal(say(model, voices[1], sample_steps=4).waveform, want)
    say(model, voices[1], sample_steps=4, parallel_infer=False)


def test_the_prompt_reaches_16_khz_through_resampys_kaiser_best(models, voices, monkeypatch):
    """v5's branch resamples the reference for CN-HuBERT with resample(match_librosa=True), not librosa's soxr."""
    from mizuoto.audio import librosa_soxr, resampy_kaiser

    rates = []
    kaiser = resampy_kaiser.resample
    monkeypatch.setattr(resampy_kaiser, "resample", lambda audio, orig, new: rates.append((orig, new))
                        or kaiser(audio, orig, new))
    monkeypatch.setattr(librosa_soxr, "resample", lambda *a, **k: pytest.fail("v5 resampled the prompt with soxr"))
    say(models["v5turbo"], voices[1])
    assert voices[1][1] != 16000 and rates == [(voices[1][1], 16000)]


def test_what_v5_does_not_take_is_a_one_line_error(models, voices):
    turbo = models["v5turbo"]
    with pytest.raises(InputError, match="v5turbo takes sample_steps of 4, 8, 16, 32"):
        say(turbo, voices[1], sample_steps=12)
    with pytest.raises(InputError, match="cfg_rate"):
        say(turbo, voices[1], cfg_rate=2.5)
    with pytest.raises(InputError, match="no prompt-free mode for v3/v4/v5"):
        host.speak(turbo, TEXT, seed=1, params={"ref_free": True}, reference=voices[1], reference_text="")


def test_v5_needs_its_vocoder(voices, tmp_path):
    paths = voices[0]
    assets = tmp_path / "pretrained_models"
    shutil.copytree(paths["assets"], assets)
    (assets / "gsv-v5-pretrained" / "vocoder.pth").unlink()
    with pytest.raises(CheckpointError, match="needs its vocoder gsv-v5-pretrained/vocoder.pth"):
        host.load_model("gpt_sovits", str(paths["v5turbo"]), device="cpu", overrides={ASSETS: str(assets)})
