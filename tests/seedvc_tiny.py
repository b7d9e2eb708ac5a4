"""A tiny random Seed-VC v1 model folder built with our own modules (and transformers' WhisperModel for the
content encoder's folder), for the engine's in-process tests. The parity references use upstream's own
modules instead (scripts/parity/seedvc_references.py)."""

import json
import shutil
from pathlib import Path

import torch
import yaml

PRESET = {
    "preprocess_params": {"sr": 22050, "spect_params": {"n_fft": 1024, "win_length": 1024, "hop_length": 256,
                                                         "n_mels": 80, "fmin": 0, "fmax": "None"}},
    "model_params": {
        "dit_type": "DiT",
        "speech_tokenizer": {"type": "whisper", "name": "openai/whisper-small"},
        "style_encoder": {"dim": 192, "campplus_path": "campplus_cn_common.bin"},
        "vocoder": {"type": "bigvgan", "name": "nvidia/bigvgan_v2_22khz_80band_256x"},
        "length_regulator": {"channels": 32, "is_discrete": False, "in_channels": 48, "content_codebook_size": 2048,
                             "sampling_ratios": [1, 1, 1, 1], "vector_quantize": False, "n_codebooks": 1,
                             "quantizer_dropout": 0.0, "f0_condition": False, "n_f0_bins": 512},
        "DiT": {"hidden_dim": 32, "num_heads": 2, "depth": 3, "class_dropout_prob": 0.1, "block_size": 8192,
                "in_channels": 80, "style_condition": True, "final_layer_type": "wavenet", "target": "mel",
                "content_dim": 32, "content_codebook_size": 1024, "content_type": "discrete", "f0_condition": False,
                "n_f0_bins": 512, "content_codebooks": 1, "is_causal": False, "long_skip_connection": True,
                "zero_prompt_speech_token": False, "time_as_token": False, "style_as_token": False,
                "uvit_skip_connection": True, "add_resblock_in_transformer": False},
        "wavenet": {"hidden_dim": 32, "num_layers": 2, "kernel_size": 5, "dilation_rate": 1, "p_dropout": 0.2,
                    "style_condition": True},
    },
}
BIGVGAN = {"num_mels": 80, "upsample_rates": [4, 4, 4, 4], "upsample_kernel_sizes": [8, 8, 8, 8],
           "upsample_initial_channel": 32, "resblock": "1", "resblock_kernel_sizes": [3],
           "resblock_dilation_sizes": [[1, 3]], "activation": "snakebeta", "snake_logscale": True,
           "use_tanh_at_final": False, "use_bias_at_final": False, "sampling_rate": 22050, "hop_size": 256}


def build(folder: Path, seed: int = 0, preset: dict | None = None) -> Path:
    """Write the model files: the DiT pair at the top, the three assets beside them as upstream names them."""
    import transformers

    from mizuoto.nn import bigvgan, campplus
    from mizuoto.nn.s2mel_cfm import S2Mel, S2MelConfig

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    preset = preset or PRESET
    (folder / "config_dit_mel_seed_uvit_whisper_small_wavenet.yml").write_text(yaml.safe_dump(preset))
    g = torch.Generator().manual_seed(seed)
    s2mel = S2Mel(S2MelConfig.from_model_params(preset["model_params"]))
    with torch.no_grad():
        for p in s2mel.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    state = s2mel.state_dict()
    nets = {name: {k[len(name) + 1:]: v for k, v in state.items() if k.startswith(name + ".")} for name in S2Mel.NETS}
    torch.save({"net": nets}, folder / "DiT_seed_v2_uvit_whisper_small_wavenet_bigvgan_pruned.pth")
    config = transformers.WhisperConfig(
        vocab_size=64, num_mel_bins=80, encoder_layers=2, encoder_attention_heads=2, decoder_layers=1,
        decoder_attention_heads=2, d_model=48, encoder_ffn_dim=192, decoder_ffn_dim=192, max_source_positions=1500,
        max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    torch.manual_seed(seed)
    transformers.WhisperModel(config).save_pretrained(folder / "whisper-small")
    (folder / "bigvgan_v2_22khz_80band_256x").mkdir()
    (folder / "bigvgan_v2_22khz_80band_256x" / "config.json").write_text(json.dumps(BIGVGAN))
    vocoder = bigvgan.BigVGAN(bigvgan.BigVGANConfig.from_dict(BIGVGAN))
    torch.save({"generator": vocoder.state_dict()}, folder / "bigvgan_v2_22khz_80band_256x" / "bigvgan_generator.pt")
    speaker = campplus.CAMPPlus(campplus.CampplusConfig(feat_dim=80, embedding_size=192, growth_rate=8, bn_size=2,
                                                        init_channels=16))
    torch.save(speaker.state_dict(), folder / "campplus_cn_common.bin")
    return folder
