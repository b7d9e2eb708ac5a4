"""A tiny IndexTTS 2 release folder in the published layout, written the same way by the end-to-end writer (for
upstream's IndexTTS2 class, in the upstream venv) and by the tests (for our loader), from one recipe. Pure torch,
json, yaml and safetensors, no upstream import.

    config.yaml                     the released config.yaml with its sizes shrunk (TINY_CONFIG)
    gpt.pth                         UnifiedVoice v2's parameters in upstream's names
    s2mel.pth                       {"net": {"cfm": sd, "length_regulator": sd, "gpt_layer": sd}}, with the
                                    timestep embedders' frequency buffers (the recipe carries them as numbers)
    bpe.model                       a SentencePiece BPE model (stored in the set: its bytes are the recipe)
    wav2vec2bert_stats.pt           {"mean": (1024,), "var": (1024,)}
    feat1.pt, feat2.pt              the speaker and emotion matrices, sum(emo_num) rows each
    hf_cache/w2v-bert-2.0/          config.json, preprocessor_config.json, model.safetensors
    hf_cache/semantic_codec_model.safetensors
    hf_cache/campplus_cn_common.bin
    hf_cache/bigvgan/               config.json, bigvgan_generator.pt ({"generator": sd}, weight norm on, with its
                                    anti-aliasing filters, which the recipe carries as numbers)

That is upstream's own layout: infer_v2's IndexTTS2 reads config.yaml's file names beside it, and
utils/model_download.ensure_models_available puts the four downloaded models under hf_cache/.

Widths upstream hard-codes fix some sizes: the GPT is 1280 wide (s2mel's gpt_layer is Linear(1280, 256)), and
w2v-BERT 1024 wide with at least 17 layers (the Conformers take 1024 features, infer_v2 reads hidden_states[17]).
Everything else is small. The recipe (references.json's "release") holds every file's tensor names, shapes and
seed; values come from cosyvoice_weights.state (the GPT, the s2mel nets, the codec, w2v-BERT, the statistics and
matrices), seedvc_weights.campplus_state and seedvc_weights.bigvgan_state, so nothing is left at an init.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import sys
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cosyvoice_weights import state  # noqa: E402
from seedvc_weights import bigvgan_state, campplus_state  # noqa: E402

W2V_WIDTH = 1024  # hard-coded upstream (the Conformer input, emovec_layer, the emotion Perceiver)
GPT_WIDTH = 1280  # hard-coded upstream (s2mel's gpt_layer)
STOP_BIAS = 1.0  # added to the mel head's stop row: some requests end before max_mel_tokens
EMO_NUM = [3, 17, 2, 8, 4, 5, 10, 24]  # as released: the matrices' row groups

# The released IndexTTS-2 config.yaml (version 2.0) with its sizes shrunk; every flag and file name as released.
TINY_CONFIG = {
    "dataset": {"bpe_model": "bpe.model", "sample_rate": 24000, "squeeze": False,
                "mel": {"sample_rate": 24000, "n_fft": 1024, "hop_length": 256, "win_length": 1024, "n_mels": 100,
                        "mel_fmin": 0, "normalize": False}},
    "gpt": {"model_dim": GPT_WIDTH, "max_mel_tokens": 60, "max_text_tokens": 60, "heads": 2,
            "use_mel_codes_as_input": True, "mel_length_compression": 1024, "layers": 1,
            "number_text_tokens": None,  # the BPE model's size, filled in by tiny_config
            "number_mel_codes": 66, "start_mel_token": 64, "stop_mel_token": 65, "start_text_token": 0,
            "stop_text_token": 1, "train_solo_embeddings": False, "condition_type": "conformer_perceiver",
            "condition_module": {"output_size": 64, "linear_units": 128, "attention_heads": 2, "num_blocks": 1,
                                 "input_layer": "conv2d2", "perceiver_mult": 2},
            "emo_condition_module": {"output_size": 48, "linear_units": 96, "attention_heads": 2, "num_blocks": 1,
                                     "input_layer": "conv2d2", "perceiver_mult": 2}},
    "semantic_codec": {"codebook_size": 66, "hidden_size": W2V_WIDTH, "codebook_dim": 8, "vocos_dim": 32,
                       "vocos_intermediate_dim": 64, "vocos_num_layers": 1},
    "s2mel": {
        "preprocess_params": {"sr": 22050, "spect_params": {"n_fft": 1024, "win_length": 1024, "hop_length": 256,
                                                            "n_mels": 80, "fmin": 0, "fmax": "None"}},
        "dit_type": "DiT", "reg_loss_type": "l1", "style_encoder": {"dim": 192},
        "length_regulator": {"channels": 32, "is_discrete": False, "in_channels": W2V_WIDTH,
                             "content_codebook_size": 2048, "sampling_ratios": [1, 1, 1, 1],
                             "vector_quantize": False, "n_codebooks": 1, "quantizer_dropout": 0.0,
                             "f0_condition": False, "n_f0_bins": 512},
        "DiT": {"hidden_dim": 32, "num_heads": 2, "depth": 3, "class_dropout_prob": 0.1, "block_size": 8192,
                "in_channels": 80, "style_condition": True, "final_layer_type": "wavenet", "target": "mel",
                "content_dim": 32, "content_codebook_size": 1024, "content_type": "discrete", "f0_condition": False,
                "n_f0_bins": 512, "content_codebooks": 1, "is_causal": False, "long_skip_connection": True,
                "zero_prompt_speech_token": False, "time_as_token": False, "style_as_token": False,
                "uvit_skip_connection": True, "add_resblock_in_transformer": False},
        "wavenet": {"hidden_dim": 32, "num_layers": 2, "kernel_size": 5, "dilation_rate": 1, "p_dropout": 0.2,
                    "style_condition": True}},
    "gpt_checkpoint": "gpt.pth", "w2v_stat": "wav2vec2bert_stats.pt", "s2mel_checkpoint": "s2mel.pth",
    "emo_matrix": "feat2.pt", "spk_matrix": "feat1.pt", "emo_num": EMO_NUM, "qwen_emo_path": "qwen0.6bemo4-merge/",
    "vocoder": {"type": "bigvgan", "name": "nvidia/bigvgan_v2_22khz_80band_256x"}, "version": 2.0,
}

# w2v-BERT 2.0 (transformers' Wav2Vec2BertConfig keys) at its fixed width, 17 layers, narrow everywhere else
W2V_CONFIG = {"hidden_size": W2V_WIDTH, "num_hidden_layers": 17, "num_attention_heads": 2, "intermediate_size": 64,
              "conv_depthwise_kernel_size": 5, "position_embeddings_type": "relative_key", "add_adapter": False,
              "feature_projection_input_dim": 160, "left_max_position_embeddings": 8,
              "right_max_position_embeddings": 4}
# facebook/w2v-bert-2.0's preprocessor_config.json
W2V_PREPROCESSOR = {"feature_extractor_type": "SeamlessM4TFeatureExtractor", "feature_size": 80, "num_mel_bins": 80,
                    "padding_side": "right", "padding_value": 1.0, "processor_class": "Wav2Vec2BertProcessor",
                    "return_attention_mask": True, "sampling_rate": 16000, "stride": 2}
BIGVGAN_SIZES = {"upsample_rates": [8, 8, 4], "upsample_kernel_sizes": [16, 16, 8], "upsample_initial_channel": 32}
SEEDS = {"gpt": 2100, "cfm": 2300, "length_regulator": 2500, "gpt_layer": 2700, "codec": 2900, "w2v_bert": 3100,
         "campplus": 3300, "bigvgan": 3500, "stats": 3700, "matrices": 3900}


def tiny_config(text_tokens: int) -> dict:
    config = copy.deepcopy(TINY_CONFIG)
    config["gpt"]["number_text_tokens"] = text_tokens
    return config


def bigvgan_config(released: dict) -> dict:
    """The vendored bigvgan_v2_22khz_80band_256x config.json, smaller stages (hop 256 = 8 * 8 * 4)."""
    config = dict(released, **copy.deepcopy(BIGVGAN_SIZES))
    assert math.prod(config["upsample_rates"]) == config["hop_size"] == 256 and config["num_mels"] == 80
    return config


def entries_of(module: torch.nn.Module) -> list:
    return [[k, list(v.shape)] for k, v in module.state_dict().items()]


def gpt_state(entries: list, seed: int, stop: int) -> dict:
    values = state(entries, seed)
    values["mel_head.bias"][stop] += STOP_BIAS
    return values


def built(buffers: dict) -> dict:
    """Buffers a module builds rather than learns, as the recipe carries them: {name: [shape, values]}."""
    return {k: torch.tensor(values, dtype=torch.float32).reshape(shape) for k, (shape, values) in buffers.items()}


def write(folder: Path, recipe: dict, bpe_model: Path) -> Path:
    """The release folder for `recipe` (references.json's "release"), with `bpe_model` copied in."""
    from safetensors.torch import save_file

    folder = Path(folder)
    cache = folder / "hf_cache"
    for sub in (cache / "w2v-bert-2.0", cache / "bigvgan"):
        sub.mkdir(parents=True, exist_ok=True)
    config = recipe["config"]
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    shutil.copyfile(bpe_model, folder / config["dataset"]["bpe_model"])
    seeds = recipe["seeds"]
    gpt = gpt_state(recipe["gpt"], seeds["gpt"], config["gpt"]["stop_mel_token"])
    torch.save(gpt, folder / config["gpt_checkpoint"])
    net = {name: {**state(recipe[name], seeds[name]), **built(recipe["s2mel_buffers"][name])}
           for name in ("cfm", "length_regulator", "gpt_layer")}
    torch.save({"net": net}, folder / config["s2mel_checkpoint"])
    g = torch.Generator().manual_seed(seeds["stats"])
    torch.save({"mean": torch.randn(W2V_WIDTH, generator=g) * 0.1,
                "var": torch.rand(W2V_WIDTH, generator=g) + 0.5}, folder / config["w2v_stat"])
    g = torch.Generator().manual_seed(seeds["matrices"])
    rows = sum(config["emo_num"])
    torch.save(torch.randn(rows, 192, generator=g), folder / config["spk_matrix"])
    torch.save(torch.randn(rows, config["gpt"]["model_dim"], generator=g) * 0.3, folder / config["emo_matrix"])
    save_file({k: v.contiguous() for k, v in state(recipe["codec"], seeds["codec"]).items()},
              str(cache / "semantic_codec_model.safetensors"))
    w2v = cache / "w2v-bert-2.0"
    (w2v / "config.json").write_text(json.dumps(recipe["w2v_bert_config"], indent=1))
    (w2v / "preprocessor_config.json").write_text(json.dumps(W2V_PREPROCESSOR, indent=1))
    save_file({k: v.contiguous() for k, v in state(recipe["w2v_bert"], seeds["w2v_bert"]).items()},
              str(w2v / "model.safetensors"), metadata={"format": "pt"})
    campplus = {k: (shape, dtype) for k, shape, dtype in recipe["campplus"]}
    torch.save(campplus_state(campplus, seeds["campplus"]), cache / "campplus_cn_common.bin")
    (cache / "bigvgan" / "config.json").write_text(json.dumps(recipe["bigvgan_config"], indent=1))
    layout = {k: shape for k, shape in recipe["bigvgan"]}
    generator = bigvgan_state(layout, seeds["bigvgan"], recipe["bigvgan_config"]["snake_logscale"])
    generator.update(built(recipe["bigvgan_buffers"]))
    torch.save({"generator": generator}, cache / "bigvgan" / "bigvgan_generator.pt")
    return folder
