"""Qwen3-TTS's speaker encoder (x-vector) and its mel front end, without upstream installed.

Bit-exactness against qwen-tts 0.1.1 is checked live by scripts/parity/qwen3tts_speaker_live.py. Here,
in a subprocess under the parity pins (those the references were written under), against the qwen3tts
reference set valid on this machine (`reference_dir("qwen3tts")`: tests/parity/data/qwen3tts, or the set
written here by upstream): the x-vectors of the two test references through the set's tiny Base model
against the `ref_spk_embedding_*` upstream's `create_voice_clone_prompt` returned there
(scripts/parity/qwen3tts_references.py), and their mels against the set's golden/speaker.json (written by
the live script's `--golden DIR` mode; `python scripts/parity/reference_sets.py write qwen3tts` runs both).
Then, in process (on the committed folder's model): the filter bank, frame counts, the published key
layout, resampling lengths, loading and every way an input or a folder can be wrong.
"""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from mizuoto.audio.librosa_soxr import output_length
from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.engines.qwen3tts import speaker_mel
from mizuoto.engines.qwen3tts.ref_audio import at_rate
from mizuoto.engines.qwen3tts.speaker import SpeakerEncoder, SpeakerEncoderConfig, load_speaker_encoder

if __name__ == "__main__":  # run as the pinned script: tests/ (helpers.py) is not on the path yet
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import fingerprint, reference_dir, run_pinned  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "parity" / "data" / "qwen3tts"  # the committed set
BASE = DATA / "base"  # its tiny Base model, the input of the in-process tests
# x-vector references of the upstream cases that cloned from each test reference (same weights)
XVECTORS = {
    "ref_a": ["bs_xvec_s20/ref_spk_embedding_0", "bs_icl_streaming_s21/ref_spk_embedding_0",
              "bs_batch2_icl_s24/ref_spk_embedding_0"],
    "ref_b": ["bs_icl_nonstreaming_s22/ref_spk_embedding_0", "bs_batch2_icl_s24/ref_spk_embedding_1"],
}
# ... and from references at other rates, which upstream resamples to 24 kHz with librosa (soxr HQ) first
OTHER_RATES = {"ref_c16": (16000, "bs_icl_16k_s25/ref_spk_embedding_0"),
               "ref_d48": (48000, "bs_icl_48k_s26/ref_spk_embedding_0")}
# Upstream's mel_spectrogram(...).transpose(1, 2) of each reference as extract_speaker_embedding calls it
# (qwen-tts 0.1.1, under the pins) is golden/speaker.json of the reference set, written by
# `scripts/parity/qwen3tts_speaker_live.py --golden DIR` (run by `reference_sets.py write qwen3tts`).
# The published layout of the default (upstream class default) configuration: 76 tensors, 8,854,336
# values; the same names and shapes as qwen-tts's Qwen3TTSSpeakerEncoder (checked when this was written).
DEFAULT_LAYOUT = (76, 8854336)


def ours_pinned_results(data: Path) -> dict:
    """What this port gives for the test references of the set `data` (run in the pinned subprocess)."""
    torch.set_num_threads(1)
    refs = load_file(str(data / "references.safetensors"))
    model = load_speaker_encoder(data / "base")
    out = {}
    for name, keys in XVECTORS.items():
        wave = refs[f"audio/{name}"]
        out[f"mel/{name}"] = {"audio_sha256": fingerprint(wave)["sha256"], **fingerprint(speaker_mel.speaker_mel(wave))}
        x = model.x_vector(wave)
        for key in keys:
            out[key] = (x.double() - refs[key].double()).abs().max().item() if x.shape == refs[key].shape else None
    for name, (rate, key) in OTHER_RATES.items():
        x = model.x_vector(refs[f"audio/{name}"], rate)
        out[key] = (x.double() - refs[key].double()).abs().max().item() if x.shape == refs[key].shape else None
    return out


# ---------------------------------------------------------------------------------------------------
# Against upstream


@pytest.fixture(scope="module")
def references() -> Path:
    return reference_dir("qwen3tts")


@pytest.fixture(scope="module")
def ours_pinned(references):
    info = json.loads((references / "references.json").read_text())
    assert info["num_threads"] == 1 and info["ATEN_CPU_CAPABILITY"] == "avx2"
    return run_pinned(__file__, references, timeout=300)


@pytest.fixture(scope="module")
def golden_mels(references) -> dict:
    return json.loads((references / "golden" / "speaker.json").read_text())


@pytest.mark.parametrize("key", [k for keys in XVECTORS.values() for k in keys] + [k for _, k in OTHER_RATES.values()])
def test_x_vector_identical_to_upstream(ours_pinned, key):
    assert ours_pinned[key] == 0.0


@pytest.mark.parametrize("name", list(XVECTORS))
def test_mels_identical_to_upstream(ours_pinned, golden_mels, name):
    got, want = ours_pinned[f"mel/{name}"], golden_mels[name]
    assert got["audio_sha256"] == want["audio_sha256"], \
        "the test references changed: rewrite the set (python scripts/parity/reference_sets.py write qwen3tts)"
    assert got["shape"] == want["shape"]
    assert got["sha256"] == want["sha256"], f"sum {got['sum']} vs upstream's {want['sum']}"


# ---------------------------------------------------------------------------------------------------
# The mel front end


def test_filter_bank_is_librosas_slaney_bank():
    bank = speaker_mel.slaney_mel_bank()
    assert bank.shape == (128, 513) and bank.dtype == np.float32
    # Spot values of librosa.filters.mel(sr=24000, n_fft=1024, n_mels=128, fmin=0, fmax=12000), librosa
    # 0.11.0 (the live script checks every bit): Slaney area normalisation, 1008 non-zero weights.
    assert int((bank > 0).sum()) == 1008 and bank[:, 512].max() == 0.0
    assert bank[0, 1] == pytest.approx(0.03355043, rel=1e-6) and bank[0, 2] == pytest.approx(0.00856908, rel=1e-5)
    assert int(bank[64].argmax()) == 89 and bank[64, 89] == pytest.approx(0.014103504, rel=1e-6)
    assert int(bank[127].argmax()) == 498 and bank[127, 498] == pytest.approx(0.0030868005, rel=1e-6)
    assert float(bank.sum(dtype=np.float64)) == pytest.approx(5.459415810865721, rel=1e-7)


@pytest.mark.parametrize("samples", [385, 640, 24000, 24000 * 3 + 77])
def test_frames_and_layout(samples):
    mel = speaker_mel.speaker_mel(torch.rand(samples) - 0.5)
    assert mel.shape == (1, speaker_mel.frames(samples), 128) and mel.dtype == torch.float32
    assert speaker_mel.frames(samples) == 1 + (samples - 256) // 256
    assert mel.min().item() >= np.log(1e-5) - 1e-6  # the log floor


def test_batch_rows_equal_single_rows():
    waves = torch.rand(2, 5000) - 0.5
    both = speaker_mel.speaker_mel(waves)
    assert torch.allclose(both[1:], speaker_mel.speaker_mel(waves[1]), atol=1e-5, rtol=0)


@pytest.mark.parametrize("wave, expected", [
    (torch.zeros(384), r"too short .* 384 samples, it needs at least 385"),
    (torch.zeros(2, 1, 1000), r"mono audio"),
])
def test_bad_audio_gives_input_errors(wave, expected):
    with pytest.raises(InputError, match=expected):
        speaker_mel.speaker_mel(wave)


# ---------------------------------------------------------------------------------------------------
# Resampling to 24 kHz


@pytest.mark.parametrize("rate", [8000, 16000, 22050, 44100, 48000])
def test_other_rates_get_librosas_output_length(rate):
    samples = rate + 7
    out = at_rate(torch.rand(samples), rate)
    assert out.shape == (output_length(samples, rate, 24000),) and out.dtype == torch.float32
    assert output_length(samples, rate, 24000) == int(np.ceil(samples * (24000 / rate)))


def test_24k_audio_passes_untouched():
    wave = torch.rand(1000)
    assert at_rate(wave, 24000) is wave


@pytest.mark.parametrize("wave, rate, expected", [
    (torch.zeros(2, 100), 24000, "mono"),
    (torch.zeros(100, dtype=torch.int16), 24000, "float"),
    (torch.zeros(100), 0, "positive"),
])
def test_bad_references_give_input_errors(wave, rate, expected):
    with pytest.raises(InputError, match=expected):
        at_rate(wave, rate)


# ---------------------------------------------------------------------------------------------------
# The network, loading


def test_default_layout_is_upstreams():
    with torch.device("meta"):
        model = SpeakerEncoder()
    state = model.state_dict()
    assert (len(state), sum(t.numel() for t in state.values())) == DEFAULT_LAYOUT
    for name in ("blocks.0.conv.weight", "blocks.1.tdnn1.conv.weight", "blocks.3.res2net_block.blocks.6.conv.bias",
                 "blocks.2.se_block.conv2.weight", "mfa.conv.weight", "asp.tdnn.conv.weight", "asp.conv.bias",
                 "fc.weight"):
        assert name in state, name
    assert state["fc.weight"].shape == (1024, 3072, 1)


def test_tiny_base_model_loads_and_gives_one_x_vector():
    model = load_speaker_encoder(BASE)
    assert not any(p.requires_grad for p in model.parameters())
    x = model.x_vector(torch.rand(4000) - 0.5)
    assert x.shape == (model.config.enc_dim,) and x.dtype == torch.float32 and torch.isfinite(x).all()


def test_bfloat16_load_gives_bfloat16_x_vectors():
    model = load_speaker_encoder(BASE, dtype=torch.bfloat16)
    assert model.x_vector(torch.rand(4000) - 0.5).dtype == torch.bfloat16


def test_other_rate_is_resampled_first():
    model = load_speaker_encoder(BASE)
    wave = torch.rand(16000) - 0.5
    assert torch.equal(model.x_vector(wave, sample_rate=16000), model.x_vector(at_rate(wave, 16000)))


def test_too_few_frames_are_refused():
    model = load_speaker_encoder(BASE)
    # the dilation-4 kernel-3 Res2Net conv reflects 4 frames on each side: 5 frames = 1280 samples at least
    with pytest.raises(InputError, match="too short for the speaker encoder: 4 mel frames, it needs at least 5"):
        model.x_vector(torch.zeros(1279))
    assert model.config.min_frames == 5 and speaker_mel.frames(1280) == 5
    assert model.x_vector(torch.rand(1280) - 0.5).shape == (model.config.enc_dim,)


def _copy_base(tmp_path: Path, config_change=None, tensors_change=None) -> Path:
    folder = tmp_path / "base"
    folder.mkdir()
    config = json.loads((BASE / "config.json").read_text())
    if config_change:
        config_change(config)
    (folder / "config.json").write_text(json.dumps(config))
    tensors = load_file(str(BASE / "model.safetensors"))
    if tensors_change:
        tensors_change(tensors)
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


@pytest.mark.parametrize("config_change, tensors_change, expected", [
    (lambda c: c.update(tts_model_type="custom_voice"), None, "tts_model_type 'custom_voice'; only the Base"),
    (lambda c: c.pop("tts_model_type"), None, "tts_model_type None; only the Base"),
    (lambda c: c["speaker_encoder_config"].update(enc_channels=[32, 32, 32, 32, 64]), None, "must be the sum"),
    (lambda c: c["speaker_encoder_config"].update(enc_dilations=[1, 2]), None, "same length"),
    (lambda c: c["speaker_encoder_config"].update(enc_res2net_scale=5), None, "do not split"),
    (lambda c: c["speaker_encoder_config"].update(enc_dim="wide"), None, "unusable value"),
    (None, lambda t: t.pop("speaker_encoder.fc.weight"), "missing speaker_encoder.fc.weight"),
    (None, lambda t: t.update({"speaker_encoder.extra": torch.zeros(1)}), "unexpected speaker_encoder.extra"),
    (None, lambda t: [t.pop(k) for k in list(t) if k.startswith("speaker_encoder.")], "no speaker_encoder"),
])
def test_bad_folders_give_one_line_checkpoint_errors(tmp_path, config_change, tensors_change, expected):
    folder = _copy_base(tmp_path, config_change, tensors_change)
    with pytest.raises(CheckpointError, match=expected) as info:
        load_speaker_encoder(folder)
    assert "\n" not in str(info.value)


def test_a_128_mel_reader_is_required_for_references(tmp_path):
    config = SpeakerEncoderConfig.from_dict(dict(mel_dim=16, enc_dim=8, enc_channels=[8, 8, 8, 8, 24],
                                                 enc_attention_channels=4, enc_res2net_scale=4, enc_se_channels=4))
    with pytest.raises(CheckpointError, match="reads 16 mel bands"):
        SpeakerEncoder(config).x_vector(torch.zeros(4000))


def test_missing_folder_is_a_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="is not a folder"):
        load_speaker_encoder(tmp_path / "nowhere")


if __name__ == "__main__":  # the pinned subprocess of the *_identical_to_upstream tests: its argument is the set
    print(json.dumps(ours_pinned_results(Path(sys.argv[1]))))
