"""F5-TTS's mel front end and the Vocos vocoder, without upstream installed.

Bit-exactness against torchaudio / vocos / f5-tts is checked live by scripts/parity/f5tts_vocos_live.py
(a dev environment with upstream). Here: the maths against independent float64 formulas and hand
values, shapes, the inverse STFT against a known STFT, and every way a checkpoint folder can be wrong.
"""

import math

import pytest
import torch
import yaml

from mizuoto.core.errors import CheckpointError, InputError
from mizuoto.engines.f5tts import mel
from mizuoto.engines.f5tts.vocos import (
    ConvNeXtBlock,
    SpectrumHead,
    Vocos,
    VocosConfig,
    config_from_yaml,
    load_vocos,
)

# charactr/vocos-mel-24khz's config.yaml, as published.
PUBLISHED_CONFIG = """\
feature_extractor:
  class_path: vocos.feature_extractors.MelSpectrogramFeatures
  init_args:
    sample_rate: 24000
    n_fft: 1024
    hop_length: 256
    n_mels: 100
    padding: center

backbone:
  class_path: vocos.models.VocosBackbone
  init_args:
    input_channels: 100
    dim: 512
    intermediate_dim: 1536
    num_layers: 8

head:
  class_path: vocos.heads.ISTFTHead
  init_args:
    dim: 512
    n_fft: 1024
    hop_length: 256
    padding: center
"""

SMALL = VocosConfig(dim=16, intermediate_dim=24, num_layers=2)


def _published(**changes) -> dict:
    """The published config, parsed, with `changes` ({"head.padding": "same"}, None deletes) applied."""
    data = yaml.safe_load(PUBLISHED_CONFIG)
    for dotted, value in changes.items():
        section, key = dotted.split(".")
        target = data[section]["init_args"] if key not in ("class_path",) else data[section]
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    return data


def _small_yaml(config: VocosConfig = SMALL) -> dict:
    return _published(**{"backbone.dim": config.dim, "head.dim": config.dim,
                         "backbone.intermediate_dim": config.intermediate_dim,
                         "backbone.num_layers": config.num_layers})


def _random_model(config: VocosConfig = SMALL, seed: int = 0) -> Vocos:
    model = Vocos(config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1.0 + 0.2 * noise if name.endswith("norm.weight") else noise / max(1, p[0].numel()) ** 0.5)
    return model.eval()


def _write_folder(folder, model: Vocos, config_data: dict, *, feature_keys=True, fmt="bin"):
    (folder / "config.yaml").write_text(yaml.safe_dump(config_data, sort_keys=False))
    state = dict(model.state_dict())
    if feature_keys:  # what the published pytorch_model.bin also holds
        state["feature_extractor.mel_spec.spectrogram.window"] = torch.hann_window(1024)
        state["feature_extractor.mel_spec.mel_scale.fb"] = mel.mel_filter_bank(513, 0.0, 12000.0, 100, 24000)
    if fmt == "bin":
        torch.save(state, folder / "pytorch_model.bin")
    else:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    return folder


# ---------------------------------------------------------------------------------------------------
# Mel scale and filter bank


def test_hz_to_mel_hand_values():
    # HTK: 2595 log10(1 + f / 700); 700 Hz is exactly 2595 log10(2).
    assert mel.hz_to_mel(0.0) == 0.0
    assert mel.hz_to_mel(700.0) == pytest.approx(2595.0 * math.log10(2.0))
    assert mel.hz_to_mel(1000.0) == pytest.approx(999.9855, abs=1e-4)
    # Slaney: 3 mels per 200 Hz up to 1 kHz (15 mels), then 27 mels per factor 6.4.
    assert mel.hz_to_mel(200.0, "slaney") == pytest.approx(3.0)
    assert mel.hz_to_mel(1000.0, "slaney") == pytest.approx(15.0)
    assert mel.hz_to_mel(6400.0, "slaney") == pytest.approx(42.0)


@pytest.mark.parametrize("scale", ["htk", "slaney"])
def test_mel_to_hz_inverts_hz_to_mel(scale):
    hz = [0.0, 100.0, 999.0, 1000.0, 4321.0, 12000.0]
    back = mel.mel_to_hz(torch.tensor([mel.hz_to_mel(f, scale) for f in hz], dtype=torch.float64), scale)
    assert back.tolist() == pytest.approx(hz, rel=1e-9, abs=1e-9)


def _reference_bank(n_freqs, f_min, f_max, n_mels, sr, norm, scale):
    """The triangular bank written out in float64, point by point, as the textbook defines it."""
    top = mel.hz_to_mel(f_max, scale)
    bottom = mel.hz_to_mel(f_min, scale)
    points = mel.mel_to_hz(torch.tensor([bottom + (top - bottom) * i / (n_mels + 1) for i in range(n_mels + 2)],
                                        dtype=torch.float64), scale).tolist()
    bank = torch.zeros(n_freqs, n_mels, dtype=torch.float64)
    for k in range(n_freqs):
        f = (sr // 2) * k / (n_freqs - 1)
        for j in range(n_mels):
            left, centre, right = points[j], points[j + 1], points[j + 2]
            value = max(0.0, min((f - left) / (centre - left), (right - f) / (right - centre)))
            bank[k, j] = value * (2.0 / (right - left) if norm == "slaney" else 1.0)
    return bank


@pytest.mark.parametrize("scale,norm", [("htk", None), ("htk", "slaney"), ("slaney", None), ("slaney", "slaney")])
def test_filter_bank_matches_the_float64_definition(scale, norm):
    args = (201, 30.0, 7000.0, 40, 16000, norm, scale)
    ours = mel.mel_filter_bank(*args)
    assert ours.dtype == torch.float32 and ours.shape == (201, 40)
    reference = _reference_bank(*args)
    peak = reference.abs().max().item()
    # float32 points near 7 kHz carry ~5e-4 Hz of rounding, which over ~100 Hz-wide edges is ~1e-5.
    assert torch.allclose(ours.double(), reference, rtol=0, atol=3e-5 * peak)


def test_f5_filter_bank_hand_values():
    bank = mel.mel_filter_bank(513, 0.0, 12000.0, 100, 24000)
    assert bank.shape == (513, 100)
    assert torch.all(bank[0] == 0)  # 0 Hz is every filter's left edge or below it
    assert torch.all(bank >= 0) and bank.max() <= 1.0
    # 12 kHz is 3266.341 mels, so the 102 points are 32.340 mels apart: 0, 20.378, 41.349, 62.931 Hz, ...
    # Bin 1 (12000 / 512 = 23.4375 Hz) is past filter 0's peak (20.378 Hz) and on filter 1's rising edge.
    step = mel.hz_to_mel(12000.0) / 101
    assert step == pytest.approx(32.340012, rel=1e-7)
    assert bank[1, 0].item() == pytest.approx((41.349340 - 23.4375) / (41.349340 - 20.378052), rel=1e-5)  # 0.85411
    assert bank[1, 1].item() == pytest.approx((23.4375 - 20.378052) / (41.349340 - 20.378052), rel=1e-4)  # 0.14589
    assert torch.all(bank[1, 2:] == 0)
    # Bin 2 (46.875 Hz) is past filter 0's right edge (41.349 Hz): filters 1 (falling) and 2 (rising) share it.
    assert bank[2, 0] == 0 and bank[2, 1] > 0 and bank[2, 2] > 0
    # Unnormalised triangles overlap so that, between the first and last centres, they sum to one.
    centres = [700.0 * (10 ** (step * (j + 1) / 2595.0) - 1) for j in (0, 99)]
    inside = [k for k in range(513) if centres[0] <= k * 12000 / 512 <= centres[1]]
    assert torch.allclose(bank[inside].sum(1), torch.ones(len(inside)), atol=1e-5)


def test_filter_bank_and_window_are_cached_per_device_and_dtype():
    cpu = torch.device("cpu")
    first = mel._filter_bank(mel.F5_MEL, cpu, torch.float32)
    assert mel._filter_bank(mel.F5_MEL, cpu, torch.float32) is first
    assert mel._filter_bank(mel.F5_MEL, cpu, torch.float64).dtype == torch.float64
    window = mel._hann_window(1024, cpu, torch.float32)
    assert torch.equal(window, torch.hann_window(1024, periodic=True))
    assert mel._hann_window(1024, cpu, torch.float32) is window


def test_settings_reject_unknown_options():
    with pytest.raises(InputError, match="mel_scale"):
        mel.MelSettings(mel_scale="mel")
    with pytest.raises(InputError, match="norm"):
        mel.MelSettings(norm="area")
    with pytest.raises(InputError, match="padding"):
        mel.MelSettings(padding="valid")
    with pytest.raises(InputError, match="mel_scale"):
        mel.mel_filter_bank(10, 0.0, 100.0, 4, 200, mel_scale="bark")


# ---------------------------------------------------------------------------------------------------
# Log-mel spectrogram


def _noise(*shape, seed=0, scale=0.3):
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("samples", [513, 777, 24000, 24000 * 2 + 17])
def test_log_mel_shapes(samples):
    batch = _noise(2, samples)
    out = mel.log_mel(batch)
    frames = samples // 256 + 1
    assert out.shape == (2, 100, frames) and out.dtype == torch.float32
    assert mel.F5_MEL.frames(samples) == frames
    assert torch.equal(mel.log_mel(batch.unsqueeze(1)), out)  # (batch, 1, samples), as F5 accepts
    single = mel.log_mel(batch[1])
    assert single.shape == (100, frames)
    assert torch.allclose(single, out[1], atol=1e-5)  # batching does not change the maths
    same = mel.log_mel(batch, mel.MelSettings(padding="same"))
    assert same.shape[-1] == mel.MelSettings(padding="same").frames(samples) == frames - 1


def test_log_mel_equals_the_definition():
    """|STFT| (centred, reflect, periodic Hann) projected on the bank, then log(max(x, floor))."""
    wave = _noise(1, 5000, seed=3)
    padded = torch.nn.functional.pad(wave.unsqueeze(0), (512, 512), mode="reflect")[0, 0].double()
    window = torch.hann_window(1024, dtype=torch.float64)
    frames = padded.unfold(0, 1024, 256) * window
    magnitude = torch.fft.rfft(frames, dim=-1).abs()  # (frames, 513)
    bank = _reference_bank(513, 0.0, 12000.0, 100, 24000, None, "htk")
    expected = (magnitude @ bank).T.clamp(min=1e-5).log()
    assert torch.allclose(mel.log_mel(wave)[0].double(), expected, atol=2e-4)


def test_log_mel_floors():
    silence = torch.zeros(1, 4000)
    assert torch.all(mel.log_mel(silence) == torch.tensor(1e-5).log())
    assert torch.all(mel.log_mel(silence, mel.VOCOS_MEL) == torch.tensor(1e-7).log())
    assert mel.LogMel(mel.VOCOS_MEL)(silence).max() < mel.LogMel()(silence).min()


def test_tone_lands_in_its_mel_band():
    t = torch.arange(24000, dtype=torch.float64) / 24000
    tone = (0.5 * torch.sin(2 * math.pi * 1000.0 * t)).float()
    strongest = mel.log_mel(tone).mean(dim=-1).argmax().item()
    step = mel.hz_to_mel(12000.0) / 101
    centres = [700.0 * (10 ** (step * (j + 1) / 2595.0) - 1) for j in range(100)]
    nearest = min(range(100), key=lambda j: abs(centres[j] - 1000.0))
    assert abs(strongest - nearest) <= 1


def test_log_mel_rejects_bad_input():
    with pytest.raises(InputError, match="too short"):
        mel.log_mel(torch.zeros(1, 512))
    with pytest.raises(InputError, match="too short"):
        mel.log_mel(torch.zeros(1, 384), mel.MelSettings(padding="same"))
    with pytest.raises(InputError, match="floating-point"):
        mel.log_mel(torch.zeros(1, 4000, dtype=torch.int16))
    with pytest.raises(InputError, match="mono"):
        mel.log_mel(torch.zeros(1, 2, 4000))


def test_log_mel_module_holds_no_state():
    module = mel.LogMel()
    assert dict(module.state_dict()) == {}
    wave = _noise(1, 3000, seed=5)
    assert torch.equal(module(wave), mel.log_mel(wave))


# ---------------------------------------------------------------------------------------------------
# The network


def test_decode_shapes_and_dtype():
    model = _random_model()
    for batch, frames in ((1, 2), (2, 17), (3, 64)):
        wave = model.decode(torch.randn(batch, 100, frames))
        assert wave.shape == (batch, (frames - 1) * 256) and wave.dtype == torch.float32
        assert torch.isfinite(wave).all()


def test_decode_rejects_bad_mels():
    model = _random_model()
    with pytest.raises(InputError, match="batch, 100, frames"):
        model.decode(torch.randn(100, 20))
    with pytest.raises(InputError, match="batch, 100, frames"):
        model.decode(torch.randn(1, 80, 20))
    with pytest.raises(InputError, match="at least 2"):
        model.decode(torch.randn(1, 100, 1))


def test_parameter_names_are_vocos_state_dict_keys():
    keys = set(Vocos(SMALL).state_dict())
    for expected in ("backbone.embed.weight", "backbone.norm.bias", "backbone.convnext.1.gamma",
                     "backbone.convnext.0.dwconv.weight", "backbone.convnext.0.pwconv1.weight",
                     "backbone.convnext.1.pwconv2.bias", "backbone.final_layer_norm.weight",
                     "head.out.weight", "head.istft.window"):
        assert expected in keys
    assert len(keys) == 4 + 9 * SMALL.num_layers + 2 + 3
    shapes = {k: tuple(v.shape) for k, v in Vocos(SMALL).state_dict().items()}
    assert shapes["backbone.convnext.0.dwconv.weight"] == (16, 1, 7)  # depthwise
    assert shapes["head.out.weight"] == (1026, 16)


def test_convnext_block_is_a_scaled_residual():
    block = ConvNeXtBlock(8, 12, layer_scale=True)
    x = torch.randn(2, 8, 11)
    with torch.no_grad():
        block.gamma.zero_()
        assert torch.equal(block(x), x)
        block.gamma.fill_(1.0)
        y = torch.nn.functional.layer_norm(block.dwconv(x).transpose(1, 2), (8,), block.norm.weight,
                                           block.norm.bias, 1e-6)
        expected = x + block.pwconv2(torch.nn.functional.gelu(block.pwconv1(y))).transpose(1, 2)
        assert torch.allclose(block(x), expected, atol=1e-6)
    assert ConvNeXtBlock(8, 12, layer_scale=False).gamma is None
    assert not VocosConfig(num_layers=4, layer_scale=-1.0).has_layer_scale
    assert VocosConfig(num_layers=4, layer_scale=0.0).has_layer_scale  # 0 means "1 / num_layers" upstream


def test_istft_head_inverts_a_known_stft():
    """With `out` the identity, the head's input is (log|S|, angle S) per frame: it must give back the
    signal S was taken from (centred Hann STFT, hop a quarter of the window: perfect reconstruction)."""
    n_fft, hop = 64, 16
    head = SpectrumHead(VocosConfig(dim=n_fft + 2, n_fft=n_fft, hop_length=hop))
    with torch.no_grad():
        head.out.weight.copy_(torch.eye(n_fft + 2))
        head.out.bias.zero_()
    signal = _noise(2, 40 * hop, seed=7, scale=0.5)
    spectrum = torch.stft(signal, n_fft, hop, window=torch.hann_window(n_fft), center=True, return_complex=True)
    hidden = torch.cat([spectrum.abs().log(), spectrum.angle()], dim=1).transpose(1, 2)  # (B, frames, n_fft + 2)
    with torch.no_grad():
        recovered = head(hidden)
    assert recovered.shape == (2, (spectrum.shape[-1] - 1) * hop) == signal.shape
    assert torch.allclose(recovered, signal, atol=1e-5)


def test_istft_head_caps_magnitudes():
    n_fft = 16
    head = SpectrumHead(VocosConfig(dim=n_fft + 2, n_fft=n_fft, hop_length=4))
    with torch.no_grad():
        head.out.weight.copy_(torch.eye(n_fft + 2))
        head.out.bias.zero_()
        frames = 12
        huge = torch.cat([torch.full((1, frames, 9), 50.0), torch.zeros(1, frames, 9)], dim=2)  # e^50, phase 0
        capped = torch.cat([torch.full((1, frames, 9), math.log(100.0)), torch.zeros(1, frames, 9)], dim=2)
        assert torch.allclose(head(huge), head(capped), atol=1e-4)


# ---------------------------------------------------------------------------------------------------
# config.yaml


def test_published_config_parses_to_the_defaults():
    config = config_from_yaml(yaml.safe_load(PUBLISHED_CONFIG))
    assert config == VocosConfig()
    assert (config.dim, config.intermediate_dim, config.num_layers, config.n_fft, config.hop_length) == (
        512, 1536, 8, 1024, 256)
    assert config.features == mel.VOCOS_MEL and config.has_layer_scale
    assert Vocos(config).sample_rate == 24000


@pytest.mark.parametrize("changes,message", [
    ({"head.class_path": "vocos.heads.IMDCTSymExpHead"}, "IMDCTSymExpHead is not supported"),
    ({"feature_extractor.class_path": "vocos.feature_extractors.EncodecFeatures"}, "EncodecFeatures"),
    ({"backbone.class_path": "vocos.models.VocosResNetBackbone"}, "VocosResNetBackbone"),
    ({"backbone.adanorm_num_embeddings": 4}, "adanorm_num_embeddings"),
    ({"head.padding": "same"}, "padding"),
    ({"head.padding": None}, "padding"),  # ISTFTHead's default is "same"
    ({"head.dim": 256}, "differs from backbone.dim"),
    ({"backbone.num_layers": None}, "needs 'num_layers'"),
    ({"backbone.kernel_size": 9}, "unknown keys kernel_size"),
    ({"feature_extractor.padding": "valid"}, "feature_extractor.init_args are not usable"),
])
def test_config_errors_name_what_to_change(changes, message):
    with pytest.raises(CheckpointError, match=message) as info:
        config_from_yaml(_published(**changes), "x/config.yaml")
    assert "\n" not in str(info.value)


def test_config_errors_for_shape():
    with pytest.raises(CheckpointError, match="mapping"):
        config_from_yaml(["not", "a", "mapping"])
    data = yaml.safe_load(PUBLISHED_CONFIG)
    del data["head"]
    with pytest.raises(CheckpointError, match="no 'head' entry"):
        config_from_yaml(data)


def test_config_reads_layer_scale_and_feature_settings():
    config = config_from_yaml(_published(**{"backbone.layer_scale_init_value": 0.5, "feature_extractor.padding": "same",
                                            "feature_extractor.n_mels": 80, "backbone.input_channels": 80}))
    assert config.layer_scale == 0.5 and config.n_mels == 80
    assert config.features == mel.MelSettings(n_mels=80, padding="same", log_floor=1e-7)


# ---------------------------------------------------------------------------------------------------
# Loading a folder


@pytest.mark.parametrize("fmt", ["bin", "safetensors"])
def test_load_round_trips_a_published_layout(tmp_path, fmt):
    source = _random_model(seed=1)
    _write_folder(tmp_path, source, _small_yaml(), fmt=fmt)
    before = torch.get_rng_state()
    loaded = load_vocos(tmp_path)
    assert torch.equal(torch.get_rng_state(), before)  # loading draws nothing from the global generator
    assert loaded.config == SMALL and not loaded.training
    for key, value in source.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    mels = torch.randn(2, 100, 30)
    assert torch.equal(loaded.decode(mels), source.decode(mels))


def test_safetensors_is_preferred_and_bin_is_the_fallback(tmp_path):
    _write_folder(tmp_path, _random_model(seed=1), _small_yaml(), fmt="safetensors")
    _write_folder(tmp_path, _random_model(seed=2), _small_yaml(), fmt="bin")
    mels = torch.randn(1, 100, 9)
    assert torch.equal(load_vocos(tmp_path).decode(mels), _random_model(seed=1).decode(mels))
    (tmp_path / "model.safetensors").unlink()
    assert torch.equal(load_vocos(tmp_path).decode(mels), _random_model(seed=2).decode(mels))


def test_load_fills_a_missing_istft_window(tmp_path):
    source = _random_model()
    _write_folder(tmp_path, source, _small_yaml(), feature_keys=False)
    state = torch.load(tmp_path / "pytorch_model.bin", weights_only=True)
    del state["head.istft.window"]
    torch.save(state, tmp_path / "pytorch_model.bin")
    assert torch.equal(load_vocos(tmp_path).head.istft.window, torch.hann_window(1024))


def test_load_with_dtype_still_returns_float32_audio(tmp_path):
    source = _random_model()
    _write_folder(tmp_path, source, _small_yaml())
    model = load_vocos(tmp_path, dtype=torch.float64)
    assert model.backbone.embed.weight.dtype == torch.float64
    mels = torch.randn(1, 100, 12)
    wave = model.decode(mels)
    assert wave.dtype == torch.float32
    assert torch.allclose(wave, source.decode(mels), atol=1e-4)


def test_load_errors(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_vocos(tmp_path / "nowhere")
    with pytest.raises(CheckpointError, match="no config.yaml"):
        load_vocos(tmp_path)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(_small_yaml()))
    with pytest.raises(CheckpointError, match="no pytorch_model.bin or model.safetensors"):
        load_vocos(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not readable"):
        load_vocos(tmp_path)
    (tmp_path / "config.yaml").write_text("feature_extractor: [unclosed")
    with pytest.raises(CheckpointError, match="not readable YAML"):
        load_vocos(tmp_path)


def test_load_errors_when_weights_do_not_match_the_config(tmp_path):
    _write_folder(tmp_path, _random_model(), _small_yaml())
    bigger = VocosConfig(dim=16, intermediate_dim=32, num_layers=3)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(_small_yaml(bigger)))
    with pytest.raises(CheckpointError, match="does not match its config.yaml") as info:
        load_vocos(tmp_path)
    message = str(info.value)
    assert "backbone.convnext.2" in message and "pwconv1.weight" in message

    state = torch.load(tmp_path / "pytorch_model.bin", weights_only=True)
    state["backbone.extra.weight"] = torch.zeros(1)
    torch.save(state, tmp_path / "pytorch_model.bin")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(_small_yaml()))
    with pytest.raises(CheckpointError, match="unexpected \\['backbone.extra.weight'\\]"):
        load_vocos(tmp_path)
