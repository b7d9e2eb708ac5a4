"""Random upstream VoxCPM models in the published folder layout, built with upstream's own classes (voxcpm 2.0.3):
the tiny v1 / v2 configurations of the parity references and the full VoxCPM2 architecture for benchmarks.
No side effects on import; run inside a venv holding upstream (scripts/parity/voxcpm_upstream_env.sh).
"""

import json
import os
import sys

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, models, normalizers
from transformers import LlamaTokenizerFast
from voxcpm.model import voxcpm as upstream_v1


# ------------------------------------------------------------------------------------------------------------
# 1. a small Llama-style tokenizer: SentencePiece-BPE conversion shape (Prepend/Replace "▁" normaliser, no
#    pre-tokeniser), merges that build English subwords and multi-character CJK tokens (which upstream's
#    wrapper splits back into characters). Ids 101..104 are the audio control ids upstream hard-codes.
# ------------------------------------------------------------------------------------------------------------
def build_tokenizer(folder):
    specials = ["<unk>", "<s>", "</s>"]
    chars = list("▁abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,!?'-") + list("你好世界今天很")
    merges = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("l", "l"), ("o", "r"), ("▁", "h"), ("▁h", "e"),
              ("你", "好"), ("世", "界"), ("今", "天"), ("▁", "你"), ("▁你", "好")]
    vocab = {tok: i for i, tok in enumerate(specials + chars)}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    assert len(vocab) < 101
    while len(vocab) < 105:  # the audio control ids are plain vocabulary entries in the real tokenizer too
        vocab[f"<|audio_{len(vocab)}|>"] = len(vocab)
    bpe = models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=False)
    tok = Tokenizer(bpe)
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    fast = LlamaTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(folder)


# ------------------------------------------------------------------------------------------------------------
# 2. configs: ENGINES.md §5's tiny shapes, with the released models' structure (v1: patch 2, 16 kHz VAE;
#    v2: patch 4, 16 kHz in / 48 kHz out VAE). LongRoPE is active (max 256 > original 32: the long factors).
# ------------------------------------------------------------------------------------------------------------
def lm_config(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16):
    half = head_dim // 2
    return {
        "bos_token_id": 1, "eos_token_id": 2, "hidden_size": hidden, "intermediate_size": 2 * hidden,
        "max_position_embeddings": 256, "num_attention_heads": heads, "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads, "rms_norm_eps": 1e-5,
        "rope_scaling": {"type": "longrope", "long_factor": [1.0 + 0.37 * i for i in range(half)],
                         "short_factor": [1.0 + 0.05 * i for i in range(half)],
                         "original_max_position_embeddings": 32},
        "vocab_size": 128, "use_mup": True, "scale_emb": 12.0, "dim_model_base": 32, "scale_depth": 1.4,
        "rope_theta": 10000.0, "kv_channels": head_dim,
    }


def small(hidden=32, layers=1, heads=2):
    return {"hidden_dim": hidden, "ffn_dim": 2 * hidden, "num_heads": heads, "num_layers": layers, "kv_channels": 16}


CFM = {"sigma_min": 1e-6, "solver": "euler", "t_scheduler": "log-norm", "inference_cfg_rate": 1.0}
CONFIGS = {
    "v1": {
        "architecture": "voxcpm", "lm_config": lm_config(), "patch_size": 2, "feat_dim": 16,
        "residual_lm_num_layers": 1, "scalar_quantization_latent_dim": 24, "scalar_quantization_scale": 9,
        "encoder_config": small(), "dit_config": {**small(), "cfm_config": CFM},
        "audio_vae_config": {"encoder_dim": 8, "encoder_rates": [2, 4, 4], "latent_dim": 16, "decoder_dim": 32,
                             "decoder_rates": [4, 4, 2], "depthwise": True, "sample_rate": 16000,
                             "use_noise_block": False},
        "max_length": 256, "device": "cpu", "dtype": "float32",
    },
    "v2": {
        "architecture": "voxcpm2", "lm_config": lm_config(), "patch_size": 4, "feat_dim": 16,
        "residual_lm_num_layers": 1, "residual_lm_no_rope": False, "scalar_quantization_latent_dim": 24,
        "scalar_quantization_scale": 9, "encoder_config": small(),
        "dit_config": {**small(), "dit_mean_mode": False, "cfm_config": CFM},
        "audio_vae_config": {"encoder_dim": 8, "encoder_rates": [2, 4, 4], "latent_dim": 16, "decoder_dim": 32,
                             "decoder_rates": [4, 4, 3, 2], "depthwise": True, "sample_rate": 16000,
                             "out_sample_rate": 48000, "use_noise_block": False, "sr_bin_boundaries": None,
                             "cond_type": "scale_bias", "cond_dim": 16, "cond_out_layer": False},
        "max_length": 256, "device": "cpu", "dtype": "float32",
    },
}


def randomise(module, gen):
    """Every parameter drawn afresh (upstream zero-inits biases and sets norms and Snake alphas to ones, which
    would hide a mixed-up order), scaled so that activations stay in a useful range."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("weight_g") or "norm" in name or name.endswith("alpha"):
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            else:
                fan = p.shape[1] * (p[0, 0].numel() if p.dim() > 2 else 1) if p.dim() > 1 else 16
                p.copy_(torch.randn(p.shape, generator=gen) * (1.2 / fan) ** 0.5)


def build_model(kind, folder, config=None, dtype=None):
    """Build, randomise and save; `config` defaults to CONFIGS[kind] (kind: "v1" or "v2" family); `dtype`
    (e.g. torch.bfloat16) is what the weights are saved in (the VAE stays float32, as upstream keeps it)."""
    os.makedirs(folder, exist_ok=True)
    build_tokenizer(folder)
    config = config or CONFIGS[kind]
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    torch.manual_seed(0)  # the constructors draw their default initialisations from the global generator
    tokenizer = LlamaTokenizerFast.from_pretrained(folder)
    if kind == "v1":
        from voxcpm.modules.audiovae import AudioVAE, AudioVAEConfig

        cfg = upstream_v1.VoxCPMConfig.model_validate(config)
        model = upstream_v1.VoxCPMModel(cfg, tokenizer, AudioVAE(AudioVAEConfig(**config.get("audio_vae_config", {}))),
                                        device="cpu")
    else:
        from voxcpm.model import voxcpm2 as upstream_v2
        from voxcpm.modules.audiovae import AudioVAEConfigV2, AudioVAEV2

        cfg = upstream_v2.VoxCPMConfig.model_validate(config)
        vae = AudioVAEV2(AudioVAEConfigV2(**config.get("audio_vae_config", {})))
        model = upstream_v2.VoxCPM2Model(cfg, tokenizer, vae, device="cpu")
    randomise(model, torch.Generator().manual_seed(11 if kind == "v1" else 12))
    # the stop head decides every length: bias it so that some cases stop early and others run to the limit
    with torch.no_grad():
        model.stop_head.weight[1] += 0.6 * model.stop_head.weight[0].sign()
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if dtype is not None:
        state = {k: v if k.startswith("audio_vae.") else v.to(dtype) for k, v in state.items()}
    vae = {k[len("audio_vae."):]: v for k, v in state.items() if k.startswith("audio_vae.")}
    rest = {k: v for k, v in state.items() if not k.startswith("audio_vae.")}
    save_file(rest, os.path.join(folder, "model.safetensors"))
    save_file(vae, os.path.join(folder, "audiovae.safetensors"))
    print(f"{kind}: {sum(v.numel() for v in state.values())} parameters", file=sys.stderr)


def voxcpm2_full():
    """The released VoxCPM2's architecture (2B parameters): the lm_config and sizes third-party ports of the
    published config.json carry (LongRoPE factors: one broadcast factor, the published max position equals
    the original one, so the factor never acts); the AudioVAE is AudioVAEV2's defaults (VoxCPM2's VAE)."""
    lm = {"bos_token_id": 1, "eos_token_id": 2, "hidden_size": 2048, "intermediate_size": 6144,
          "max_position_embeddings": 32768, "num_attention_heads": 16, "num_hidden_layers": 28,
          "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
          "rope_scaling": {"type": "longrope", "long_factor": [1.0], "short_factor": [1.0],
                           "original_max_position_embeddings": 32768},
          "vocab_size": 73448, "use_mup": False, "scale_emb": 12, "dim_model_base": 256, "scale_depth": 1.4,
          "rope_theta": 10000, "kv_channels": 128}
    local = {"hidden_dim": 1024, "ffn_dim": 4096, "num_heads": 16, "num_layers": 12, "kv_channels": 128}
    return {"architecture": "voxcpm2", "lm_config": lm, "patch_size": 4, "feat_dim": 64, "residual_lm_num_layers": 8,
            "residual_lm_no_rope": True, "scalar_quantization_latent_dim": 512, "scalar_quantization_scale": 9,
            "encoder_config": local, "dit_config": {**local, "dit_mean_mode": False, "cfm_config": CFM},
            "max_length": 8192, "device": "cpu", "dtype": "bfloat16"}
