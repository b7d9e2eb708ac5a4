"""GPT-SoVITS v3 and v4 as users run them: a whole v3 file speaks at 24 kHz through BigVGAN, a v4 LoRA voice over
its pretrained base at 48 kHz through its HiFi-GAN; the same seed gives the same audio, sample_steps matters; what
v3/v4 do not take (prompt-free requests, extra references) and what they need (the base, the vocoder) are one-line
errors. On the tiny files of the gpt_sovits_e2e_v3v4 set (rebuilt by scripts/parity/gpt_sovits_e2e_models.py; that
set's test compares the same engine with upstream's TTS.run)."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import parity_module, reference_sets

from mizuoto import host
from mizuoto.audio import files
from mizuoto.core.errors import CheckpointError, InputError

DATA = Path(__file__).resolve().parents[1] / "parity" / "data"
TEXT = "这个重要的问题很重。"
PROMPT = "他长得很高，长大了以后还是那么快乐"
ASSETS = "engines.gpt_sovits.load_options.assets"


@pytest.fixture(scope="module")
def voices(tmp_path_factory):
    """The set's v3 file and v4 LoRA voice (with their GPT, assets and vocoders) and its reference recording."""
    from safetensors.torch import load_file

    tiny = parity_module("gpt_sovits_e2e_models")
    folder = reference_sets().SETS["gpt_sovits_e2e_v3v4"].committed
    info = json.loads((folder / "references.json").read_text())
    root = tmp_path_factory.mktemp("gsv_v3v4")
    paths = tiny.write_models(root, info["models"], DATA / "gpt_sovits_zh_g2p" / "bert" / "vocab.txt",
                              DATA / "gpt_sovits_zh_g2p" / "g2pw", DATA / info["inputs"]["detector"])
    refs = load_file(str(DATA / info["inputs"]["vocoders"] / "references.safetensors"))
    paths.update(tiny.write_v3v4(root, info["models"], {k: refs[f"filter/{k}"] for k in tiny.BIGVGAN_FILTERS}))
    return paths, files.read(folder / info["inputs"]["reference"], "reference audio")


@pytest.fixture(scope="module")
def v3(voices):
    return host.load_model("gpt_sovits", str(voices[0]["v3"]), device="cpu")


@pytest.fixture(scope="module")
def v4(voices):
    return host.load_model("gpt_sovits", str(voices[0]["v4"]), device="cpu")


def say(model, reference, seed=1, **params):
    params = {"sample_steps": 4, **params}
    return host.speak(model, params.pop("text", TEXT), seed=seed, params=params, reference=reference,
                      reference_text=params.pop("reference_text", PROMPT), **params.pop("extra", {}))


def test_v3_and_v4_speak_at_their_vocoders_rates(v3, v4, voices):
    assert (v3.state.sovits.config.version, v4.state.sovits.config.version) == ("v3", "v4")
    for model, rate in ((v3, 24000), (v4, 48000)):
        first, again = say(model, voices[1]), say(model, voices[1])
        assert first.sample_rate == rate and first.waveform.abs().max() > 0
        assert torch.equal(first.waveform, again.waveform)
        assert not torch.equal(first.waveform, say(model, voices[1], sample_steps=2).waveform)
        assert not torch.equal(first.waveform, say(model, voices[1], seed=2).waveform)


def test_what_v3_and_v4_do_not_take_is_a_one_line_error(v3, voices):
    with pytest.raises(InputError, match="no prompt-free mode for v3/v4"):
        say(v3, voices[1], reference_text="", ref_free=True)
    with pytest.raises(InputError, match="remove the extra references"):
        say(v3, voices[1], extra={"extra_references": [voices[1]]})
    with pytest.raises(InputError, match="sample_steps must be between 0 and 128"):
        say(v3, voices[1], sample_steps=129)
    with pytest.raises(InputError, match="v3 has no classifier-free guidance"):
        say(v3, voices[1], cfg_rate=1.0)


def test_a_lora_voice_needs_its_pretrained_base(voices, tmp_path):
    """The v4 LoRA voice is merged with gsv-v4-pretrained/s2Gv4.pth of the assets folder: without it, or with a
    SoVITS file that has no CFM there, the load says which file to put where."""
    paths = voices[0]
    assets = tmp_path / "pretrained_models"
    shutil.copytree(paths["assets"], assets)
    base = assets / "gsv-v4-pretrained" / "s2Gv4.pth"
    base.unlink()
    with pytest.raises(CheckpointError, match=r"v4 LoRA voice and needs the pretrained v4 SoVITS model "
                                              r"gsv-v4-pretrained/s2Gv4.pth"):
        host.load_model("gpt_sovits", str(paths["v4"]), device="cpu", overrides={ASSETS: str(assets)})
    shutil.copy(paths["sovits"], base)  # a v2 model where the v4 base belongs
    with pytest.raises(CheckpointError, match="s2Gv4.pth is not a pretrained v4 SoVITS model"):
        host.load_model("gpt_sovits", str(paths["v4"]), device="cpu", overrides={ASSETS: str(assets)})


def test_v3_and_v4_need_their_vocoders(voices, tmp_path):
    paths = voices[0]
    assets = tmp_path / "pretrained_models"
    shutil.copytree(paths["assets"], assets)
    shutil.rmtree(assets / "models--nvidia--bigvgan_v2_24khz_100band_256x")
    (assets / "gsv-v4-pretrained" / "vocoder.pth").unlink()
    with pytest.raises(CheckpointError, match="v3 needs the BigVGAN vocoder models--nvidia--bigvgan_v2_24khz_100band"):
        host.load_model("gpt_sovits", str(paths["v3"]), device="cpu", overrides={ASSETS: str(assets)})
    with pytest.raises(CheckpointError, match="needs its vocoder gsv-v4-pretrained/vocoder.pth"):
        host.load_model("gpt_sovits", str(paths["v4"]), device="cpu", overrides={ASSETS: str(assets)})
