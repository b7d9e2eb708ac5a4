"""The tiny models of the GPT-SoVITS end-to-end set (gpt_sovits_e2e), defined once: the writer (in the upstream
venv) records the names and shapes of upstream's own modules and writes the files into a temporary folder; the
test rebuilds the same files from that record, so no multi-megabyte weights are stored. Pure torch and
safetensors: no upstream import, no transformers (the HF folders are written as config.json + model.safetensors,
the layout from_pretrained reads).

- SoVITS v2 (.pth): gpt_sovits_weights' seeded state over upstream SynthesizerTrn's entries, the tiny sizes of the
  gpt_sovits_sovits set with upstream's real data section (32 kHz, n_fft 2048, hop 640) and HiFi-GAN rates
  (10, 8, 2, 2, 2: one sample per 1/32000 s), 732 symbols (v2), saved as upstream's savee saves it (float16, "PK").
- SoVITS v2ProPlus and v2Pro (.pth, PRO_MODELS): the same tiny sizes with the released configs' differences
  (s2v2ProPlus.json / s2v2Pro.json: gin_channels 1024, which sv_emb (20480 -> gin), ge_to512 and the PReLU follow;
  v2ProPlus's first upsampling kernel 20), their own seeds, saved with the version tag over the zip magic (b"06",
  b"05"), as my_save2 saves them.
- sv/pretrained_eres2netv2w24s4ep4.ckpt: ERes2NetV2 at the released size (baseWidth 24, scale 4, expansion 4,
  m_channels 64, blocks 3-4-6-3: 53.6 M parameters, a 214 MB float32 state dict; SoVITS' sv_emb takes its 20480
  features, and our loader insists on that architecture), gpt_sovits_weights.speaker_state's seeded fill, saved as
  a plain state dict (what sv.SV torch.loads).
- GPT (.ckpt): Text2SemanticLightningModule's {"weight": {"model.*"}, "config"} with phoneme_vocab_size 732 and
  audio vocabulary 1025 (EOS 1024; TTS_Config reads mute token 486 of it), every parameter drawn as the
  gpt_sovits_t2s set draws them, EOS's row leaning to a shared direction so that some fragments end at EOS.
- chinese-roberta-wwm-ext-large: a BertForMaskedLM, hidden 1024 (bert_proj's input), 3 layers, intermediate 64, the
  vocabulary of the gpt_sovits_zh_g2p set (tokenizer_config.json beside it).
- chinese-hubert-base: a HubertModel, hidden 768 (ssl_proj's input), 2 layers, upstream's conv strides and kernels
  (320 samples per frame at 16 kHz) on 64 channels, its feature extractor's preprocessor_config.json.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import torch
from gpt_sovits_weights import sovits_file_bytes, sovits_fill, sovits_state, speaker_state

SOVITS_MODEL = {"inter_channels": 32, "hidden_channels": 192, "filter_channels": 64, "n_heads": 2, "n_layers": 2,
                "kernel_size": 3, "p_dropout": 0.0, "resblock": "1", "resblock_kernel_sizes": [3, 5],
                "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5]], "upsample_rates": [10, 8, 2, 2, 2],
                "upsample_initial_channel": 64, "upsample_kernel_sizes": [16, 16, 8, 2, 2], "n_layers_q": 3,
                "use_spectral_norm": False, "gin_channels": 512, "semantic_frame_rate": "25hz",
                "freeze_quantizer": True, "version": "v2"}
SOVITS_CONFIG = {"data": {"filter_length": 2048, "hop_length": 640, "sampling_rate": 32000, "win_length": 2048,
                          "n_speakers": 300}, "train": {"segment_size": 20480}, "model": SOVITS_MODEL}
SOVITS_SEED = 300
# v2Pro / v2ProPlus: the released configs' differences from s2.json, on the tiny sizes ({name: (model, seed, file)})
PRO_MODELS = {
    "v2ProPlus": ({**SOVITS_MODEL, "gin_channels": 1024, "upsample_kernel_sizes": [20, 16, 8, 2, 2],
                   "version": "v2ProPlus"}, 310, "tiny_e2e_v2ProPlus.pth"),
    "v2Pro": ({**SOVITS_MODEL, "gin_channels": 1024, "version": "v2Pro"}, 320, "tiny_e2e_v2Pro.pth"),
}
SPEAKER_ARGS = {"baseWidth": 24, "scale": 4, "expansion": 4}  # what sv.SV builds (m_channels 64, blocks 3-4-6-3)
SPEAKER_SEED = 600
SPEAKER_FILE = ("sv", "pretrained_eres2netv2w24s4ep4.ckpt")  # under pretrained_models, where sv.py reads it
GPT_CONFIG = {"model": {"vocab_size": 1025, "phoneme_vocab_size": 732, "embedding_dim": 64, "hidden_dim": 64,
                        "head": 4, "linear_units": 256, "n_layer": 3, "dropout": 0, "EOS": 1024},
              "data": {"max_sec": 2}}  # TTS.run's early stop: 50 * max_sec = 100 tokens
GPT_SEED = 20261204
PROBE_SEED = 1234  # the e2e sets' probes: a decode of upstream's recorded tokens draws its noise from this seed
EOS_GAIN = 1.6  # how far EOS's row leans against the last norm's bias (gpt_state)
BERT_SEED, HUBERT_SEED = 400, 500
BERT_TIED = ("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")  # tied: from_pretrained ties them
FEATURE_EXTRACTOR = {"do_normalize": True, "feature_extractor_type": "Wav2Vec2FeatureExtractor", "feature_size": 1,
                     "padding_side": "right", "padding_value": 0, "return_attention_mask": False,
                     "sampling_rate": 16000}
BERT_TOKENIZER = {"tokenizer_class": "BertTokenizer"}
SOVITS_FILE, GPT_FILE = "tiny_e2e_v2.pth", "tiny_e2e-e1.ckpt"
HUBERT, BERT, G2PW, DETECTOR = ("chinese-hubert-base", "chinese-roberta-wwm-ext-large", "G2PWModel",
                                "fast_langdetect/lid.176.bin")


def bert_config_kwargs(vocab_size: int) -> dict:
    """BertConfig's arguments (the writer builds the model from them; the set records its config.json)."""
    return {"vocab_size": vocab_size, "hidden_size": 1024, "num_hidden_layers": 3, "num_attention_heads": 16,
            "intermediate_size": 64, "max_position_embeddings": 128, "type_vocab_size": 2,
            "hidden_act": "gelu", "architectures": ["BertForMaskedLM"]}


HUBERT_KWARGS = {"vocab_size": 32, "hidden_size": 768, "num_hidden_layers": 2, "num_attention_heads": 12,
                 "intermediate_size": 128, "hidden_act": "gelu", "feat_extract_norm": "group",
                 "feat_proj_layer_norm": True, "conv_dim": [64] * 7, "conv_stride": [5, 2, 2, 2, 2, 2, 2],
                 "conv_kernel": [10, 3, 3, 3, 3, 2, 2], "conv_bias": False, "num_conv_pos_embeddings": 32,
                 "num_conv_pos_embedding_groups": 16, "do_stable_layer_norm": False,
                 "architectures": ["HubertModel"]}


# --- the GPT -------------------------------------------------------------------------------------------------------
def gpt_state(entries: list) -> dict:
    """Text2SemanticLightningModule's state for [(name, shape)]: drawn in sorted name order from one generator as
    the gpt_sovits_t2s set draws its parameters (positional alphas and norm scales in [0.5, 1.5), biases small,
    embeddings at 3/sqrt(dim), the rest at 1/sqrt(fan-in)); then EOS's output row leans against the last layer's
    norm2 bias (a direction every output shares; with these weights the outputs point away from it, so leaning along
    it, as the gpt_sovits_t2s set does, lowers EOS instead), so that EOS rises to the top now and then: at 1.6 some
    fragments end at EOS and some at the early stop."""
    state = gpt_fill(entries, GPT_SEED)
    last = state[f"model.h.layers.{GPT_CONFIG['model']['n_layer'] - 1}.norm2.bias"]
    state["model.ar_predict_layer.weight"][GPT_CONFIG["model"]["EOS"]] -= EOS_GAIN * last / last.norm()
    return state


def gpt_fill(entries: list, seed: int) -> dict:
    """A GPT state for [(name, shape)], in that order, drawn in sorted name order from one generator seeded `seed`:
    positional alphas and norm scales in [0.5, 1.5), biases small, embeddings at 3/sqrt(dim), the rest at
    1/sqrt(fan-in) (the benchmark's released-size GPT is drawn the same way)."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for name, shape in sorted(entries):
        shape = tuple(shape)
        if name.endswith("alpha") or ("norm" in name and name.endswith("weight")):
            state[name] = torch.rand(shape, generator=g) + 0.5
        elif name.endswith("bias"):
            state[name] = torch.randn(shape, generator=g) * 0.1
        else:
            state[name] = torch.randn(shape, generator=g) / shape[-1] ** 0.5 * (3.0 if "embedding" in name else 1)
    return {name: state[name] for name, _ in entries}


def speak_params(inputs: dict) -> dict:
    """An api_v2 request (TTS.run's inputs) as our speak parameters (v5's None sample_steps and cfg_rate: 0 and -1,
    the version's defaults; a request without cfg_rate, 48b1a01's, gets none)."""
    params = {"text_lang": inputs["text_lang"], "prompt_lang": inputs["prompt_lang"],
              "ref_free": not inputs["prompt_text"], "top_k": inputs["top_k"], "top_p": float(inputs["top_p"]),
              "temperature": float(inputs["temperature"]), "repetition_penalty": inputs["repetition_penalty"],
              "text_split_method": inputs["text_split_method"], "speed_factor": inputs["speed_factor"],
              "fragment_interval": inputs["fragment_interval"], "split_bucket": inputs["split_bucket"],
              "parallel_infer": inputs["parallel_infer"], "sample_steps": inputs["sample_steps"] or 0}
    if "cfg_rate" in inputs:
        params["cfg_rate"] = -1.0 if inputs["cfg_rate"] is None else float(inputs["cfg_rate"])
    return params


def write_gpt(path: Path, entries: list) -> Path:
    torch.save({"weight": gpt_state(entries), "config": GPT_CONFIG, "info": "mizuoto parity: tiny e2e GPT"}, path)
    return path


def pro_config(name: str) -> dict:
    """The v2Pro / v2ProPlus SoVITS file's config: the v2 data and train sections with that model section."""
    return {**SOVITS_CONFIG, "model": PRO_MODELS[name][0]}


def write_speaker(path: Path, entries: list) -> Path:
    """The seeded ERes2NetV2 state dict for [(name, shape)], saved as a plain state dict."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(speaker_state(entries, SPEAKER_SEED), path)
    return path


# --- the HF folders ------------------------------------------------------------------------------------------------
def hf_fill(name: str, shape: tuple, seed: int) -> torch.Tensor:
    """One entry of a transformers state dict, nothing at its init: norm scales and weight-norm magnitudes in
    [0.5, 1.5), biases small, embeddings unit normal, the masked-frame embedding uniform, every other weight at
    1/sqrt(fan-in)."""
    g = torch.Generator().manual_seed(seed)
    if ("norm" in name.lower() and name.endswith("weight")) or name.endswith(("weight_g", "original0")):
        return torch.rand(shape, generator=g) + 0.5
    if name.endswith("bias"):
        return torch.randn(shape, generator=g) * 0.1
    if "embeddings" in name and name.endswith("weight") and len(shape) == 2:
        return torch.randn(shape, generator=g)
    if len(shape) <= 1:
        return torch.rand(shape, generator=g)
    return torch.randn(shape, generator=g) / math.sqrt(math.prod(shape[1:]))


def hf_state(entries: list, seed: int) -> dict:
    return {name: hf_fill(name, tuple(shape), seed + i) for i, (name, shape) in enumerate(entries)}


def write_hf_folder(folder: Path, config: dict, entries: list, seed: int, extra: dict) -> Path:
    """config.json, model.safetensors and the `extra` JSON files ({file name: content})."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True) + "\n")
    save_file(hf_state(entries, seed), str(folder / "model.safetensors"), metadata={"format": "pt"})
    for name, content in extra.items():
        (folder / name).write_text(json.dumps(content, indent=1) + "\n")
    return folder


# --- everything, in the layout of our loader --------------------------------------------------------------------------
def write_models(root: Path, record: dict, vocab: Path, g2pw: Path, detector: Path | None,
                 nltk_data: Path | None = None) -> dict:
    """The set's tiny files under `root`: the SoVITS .pth with the GPT .ckpt beside it and
    pretrained_models/{chinese-hubert-base, chinese-roberta-wwm-ext-large, G2PWModel, fast_langdetect/lid.176.bin}
    (upstream's layout, which our loader also searches). `record` is the set's "models" record (entries and
    configs); `vocab` the BERT vocab.txt, `g2pw` the G2PWModel folder, `detector` the fastText model (or None),
    `nltk_data` a folder holding nltk's taggers/averaged_perceptron_tagger_eng (English; copied to
    pretrained_models/nltk_data, where our loader reads it). Where the record has them (sets written with the v2Pro
    cases), the v2Pro / v2ProPlus SoVITS files beside the v2 one (sharing its GPT) and the speaker encoder in
    pretrained_models/sv/. Returns the paths."""
    root.mkdir(parents=True, exist_ok=True)
    sovits = root / SOVITS_FILE
    sovits.write_bytes(sovits_file_bytes(sovits_state(record["sovits"]["entries"], SOVITS_SEED), SOVITS_CONFIG, "v2"))
    gpt = write_gpt(root / GPT_FILE, record["gpt"]["entries"])
    assets = root / "pretrained_models"
    pro = {}
    for name, entry in record.get("sovits_pro", {}).items():
        _, seed, file = PRO_MODELS[name]
        pro[name] = root / file
        pro[name].write_bytes(sovits_file_bytes(sovits_state(entry["entries"], seed), pro_config(name), name))
    if "speaker" in record:
        pro["speaker"] = write_speaker(assets.joinpath(*SPEAKER_FILE), record["speaker"]["entries"])
    hubert = write_hf_folder(assets / HUBERT, record["hubert"]["config"], record["hubert"]["entries"], HUBERT_SEED,
                             {"preprocessor_config.json": FEATURE_EXTRACTOR})
    bert = write_hf_folder(assets / BERT, record["bert"]["config"], record["bert"]["entries"], BERT_SEED,
                           {"tokenizer_config.json": BERT_TOKENIZER})
    shutil.copyfile(vocab, bert / "vocab.txt")
    shutil.copytree(g2pw, assets / G2PW, dirs_exist_ok=True)
    paths = {"sovits": sovits, "gpt": gpt, "assets": assets, "hubert": hubert, "bert": bert, "g2pw": assets / G2PW,
             **pro}
    if detector is not None:
        target = assets / DETECTOR
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(detector, target)
        paths["detector"] = target
    if nltk_data is not None:
        shutil.copytree(nltk_data, assets / "nltk_data", dirs_exist_ok=True)
        paths["nltk_data"] = assets / "nltk_data"
    return paths


# --- the reference recording -----------------------------------------------------------------------------------------
REFERENCE_RATE, REFERENCE_SECONDS = 32000, 4.0


def reference_samples() -> torch.Tensor:
    """A deterministic 4 s voice-like signal at 32 kHz as int16: a gliding harmonic tone in syllable-like
    bursts, with a little seeded noise."""
    n = int(REFERENCE_RATE * REFERENCE_SECONDS)
    t = torch.arange(n, dtype=torch.float64) / REFERENCE_RATE
    f0 = 140 + 30 * torch.sin(2 * math.pi * 0.7 * t)
    phase = 2 * math.pi * torch.cumsum(f0, 0) / REFERENCE_RATE
    voice = sum(torch.sin(k * phase) / k for k in range(1, 8))
    envelope = 0.5 + 0.5 * torch.sin(2 * math.pi * 3.1 * t).clamp(min=0) ** 0.5
    noise = torch.randn(n, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    wave = 0.25 * voice * envelope + 0.01 * noise
    return (wave * 32767).round().clamp(-32768, 32767).to(torch.int16)


def write_reference(path: Path) -> Path:
    """The recording as a 16-bit mono WAV (the standard library's writer: the same bytes everywhere)."""
    import wave

    data = reference_samples().numpy().astype("<i2").tobytes()
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(REFERENCE_RATE)
        f.writeframes(data)
    return path


# --- v3 and v4 (the gpt_sovits_e2e_v3v4 set) --------------------------------------------------------------------------
# SynthesizerTrnV3 hard-codes its CFM's DiT (dim 1024, depth 22, 16 heads) and wns1's 8 WN layers over 512 channels;
# the writer builds upstream's own classes narrower (module.models.DiT and .Encoder called with these instead) and our
# loader reads the sizes from the file. The DiT keeps upstream's text_dim (512: the bridge's width) and dim_head 64.
V3_DIT = {"dim": 128, "depth": 2, "heads": 2, "ff_mult": 2, "conv_layers": 1}
V3_WNS1_LAYERS = 2
V3_MODELS = {"v3": (330, "tiny_e2e_v3.pth", b"02"),  # a whole v3 model (head2version's "02": v3, not LoRA)
             "v4": (340, "tiny_e2e_v4_lora.pth", b"04")}  # a v4 LoRA voice over V4_BASE
V4_BASE, V4_BASE_SEED = ("gsv-v4-pretrained", "s2Gv4.pth"), 350  # under pretrained_models, where TTS reads it
LORA_RANK = 4
V3_FOLDER = "models--nvidia--bigvgan_v2_24khz_100band_256x"
V4_VOCODER = ("gsv-v4-pretrained", "vocoder.pth")


def v3_config(version: str) -> dict:
    """The v2 tiny config with inter_channels at hidden_channels' 192, as released: SynthesizerTrnV3's bridge takes
    inter_channels from the text encoder's hidden output, so upstream runs only when the two agree."""
    return {**SOVITS_CONFIG, "model": {**SOVITS_MODEL, "inter_channels": 192, "version": version}}


def tagged_file_bytes(state: dict, config: dict, tag: bytes | None, lora_rank: int | None = None) -> bytes:
    """A SoVITS file as savee writes it (float16 weights; my_save2's tag over the zip magic; a LoRA voice records its
    rank)."""
    import io

    payload = {"weight": {k: v.half() for k, v in state.items()}, "config": config,
               "info": "mizuoto parity: tiny random SoVITS"}
    if lora_rank:
        payload["lora_rank"] = lora_rank
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    data = buffer.getvalue()
    return tag + data[2:] if tag else data


def write_v3v4(root: Path, record: dict, filters: dict) -> dict:
    """The v3 file, the v4 LoRA voice and its base, and both vocoders, under `root` (upstream's GPT_SoVITS/: its
    pretrained_models/ is the assets folder), from the set's record (`v3v4`: entries and seeds). `filters`: the
    BigVGAN's two anti-aliasing filter buffers ({"upsample": ..., "lowpass": ...}, computed by upstream: every
    activation holds the same two)."""
    models = record["v3v4"]
    assets = root / "pretrained_models"
    paths = {}
    seed, name, tag = V3_MODELS["v3"]
    paths["v3"] = root / name
    paths["v3"].write_bytes(tagged_file_bytes(cfm_state(models["v3"]["entries"], seed), v3_config("v3"), tag))
    base = assets.joinpath(*V4_BASE)
    base.parent.mkdir(parents=True, exist_ok=True)
    base.write_bytes(tagged_file_bytes(cfm_state(models["v4"]["entries"], V4_BASE_SEED), v3_config("v4"), None))
    seed, name, tag = V3_MODELS["v4"]
    paths["v4"] = root / name
    paths["v4"].write_bytes(tagged_file_bytes(sovits_state(models["v4_lora"]["entries"], seed), v3_config("v4"), tag,
                                              LORA_RANK))
    vocoders = record["vocoders"]
    folder = assets / V3_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(vocoders["v3"]["config"], indent=2) + "\n")
    kept = {n: filters[kind] for n, _ in vocoders["v3"]["entries"] for kind, suffix in BIGVGAN_FILTERS.items()
            if n.endswith(suffix)}
    torch.save({"generator": vocoder_fill(vocoders["v3"]["entries"], vocoders["v3"]["seed"], vocoders["v3"]["scale"],
                                          kept)}, folder / "bigvgan_generator.pt")
    torch.save(vocoder_fill(vocoders["v4"]["entries"], vocoders["v4"]["seed"], vocoders["v4"]["scale"], {}),
               assets.joinpath(*V4_VOCODER))
    return paths


# v5 (the cuda_graph_accel_v5 branch): v4's SynthesizerTrnV3 whose DiT has no step embedding, tagged as my_save2
# tags them, beside the GPT, with v5's release of the v4 vocoder where the branch's TTS reads it
V5_MODELS = {"v5dev": (360, "tiny_e2e_v5dev.pth", b"07"), "v5turbo": (370, "tiny_e2e_v5turbo.pth", b"08")}
V5_VOCODER = ("gsv-v5-pretrained", "vocoder.pth")


def write_v5(root: Path, record: dict) -> dict:
    """The v5dev and v5turbo files under `root` and the v5 vocoder under root/pretrained_models, from the set's
    record (`v5`: the entries; `vocoders`: the v4 vocoder's entries, seed and scale)."""
    paths = {}
    for version, (seed, name, tag) in V5_MODELS.items():
        paths[version] = root / name
        paths[version].write_bytes(tagged_file_bytes(cfm_state(record["v5"]["entries"], seed), v3_config(version),
                                                     tag))
    vocoder = record["vocoders"]["v4"]
    target = root.joinpath("pretrained_models", *V5_VOCODER)
    target.parent.mkdir(parents=True, exist_ok=True)
    torch.save(vocoder_fill(vocoder["entries"], vocoder["seed"], vocoder["scale"], {}), target)
    return paths


# The DiT's output projection, scaled down: at 1/sqrt(fan-in) the tiny DiT's velocity is tens of units, its mels
# leave the trained [-1, 1] range by far and the vocoders' audio is clipped at +-1 almost everywhere, which would
# hide most of the waveform from the comparison; at this scale the mels stay near the range and little is clipped.
CFM_OUTPUT_SCALE = {"cfm.estimator.proj_out.weight": 0.05, "cfm.estimator.proj_out.bias": 0.05}


def cfm_state(entries: list, seed: int) -> dict:
    """sovits_state with the DiT's output projection at CFM_OUTPUT_SCALE."""
    return {name: value * CFM_OUTPUT_SCALE.get(name, 1.0) for name, value in sovits_state(entries, seed).items()}


BIGVGAN_FILTERS = {"upsample": ".upsample.filter", "lowpass": ".downsample.lowpass.filter"}


def vocoder_fill(entries: list, seed: int, scale: dict, kept: dict) -> dict:
    """A vocoder's state as the gpt_sovits_vocoder set fills it: entry i from sovits_fill(seed + i) times
    scale.get(name, 1); the anti-aliasing filter buffers from `kept`."""
    return {name: kept[name] if name.endswith(".filter") else sovits_fill(name, tuple(shape), seed + i)
            * scale.get(name, 1.0) for i, (name, shape) in enumerate(entries)}
