"""A tiny random Seed-VC v2 model in the layout of the released files, for scripts/parity/seedvc_v2_references.py.

Runs in the seed-vc 0.4.3 oracle venv (scripts/parity/seedvc_upstream_env.sh) under the parity pins (the caller
pins first). Upstream builds v2 from its configs/v2/vc_wrapper.yaml with hydra; here `instantiate` does what
hydra's does for that file (`_target_` called with its instantiated arguments, `_partial_` as functools.partial),
on the released yaml with only its sizes shrunk (TINY). Every parameter is filled from its own seeded generator
(seedvc_models.fill_parameters: zero-inits included, ConvNeXt's GRN gamma and beta among them), and saved the way
the released files are:

    model/v2/cfm_small.pth                     {"net": {"cfm": sd, "length_regulator": sd}}, without BIG_BUFFER
    model/v2/ar_base.pth                       {"net": {"ar": sd, "length_regulator": sd}}, keys under `module.`
                                               (DDP's prefix, which upstream's load_checkpoints strips)
    model/v2/vc_wrapper.yaml                   the tiny yaml (our loader reads the released sizes without one)
    model/ASTRAL-quantization/bsq32/bsq32_light.pth, bsq2048/bsq2048_light.pth
                                               the quantizers' encoder.* and quantizer.* tensors
    model/hubert-large-ll60k/                  a HubertModel (large's layout: layer-normed conv stack with bias,
                                               stable layer norm) via save_pretrained, with its
                                               preprocessor_config.json (normalise, return the attention mask)
    model/bigvgan_v2_22khz_80band_256x/        seedvc_models.write_bigvgan
    model/campplus_cn_common.bin               seedvc_models.write_campplus

The tiny vocabularies keep v2's structure at a size where random weights stop: the wide codebook (the CFM
regulator's and the AR's prompt tokens) has 64 codes, so the AR's vocabulary is 65 with EOS = 64 (upstream's
vocab_size - 1) and a random AR ends after about 65 tokens; the narrow codebook has 8 codes.
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
import sys
import types
from pathlib import Path

import seed_vc
import seedvc_models
import torch
import yaml
from seedvc_models import fill_parameters, state_summary
from transformers import HubertConfig, HubertModel, Wav2Vec2FeatureExtractor

UPSTREAM = Path(seed_vc.__file__).parent
if str(UPSTREAM) not in sys.path:
    sys.path.insert(0, str(UPSTREAM))  # the yaml's targets are top-level `modules.*`
# modules/v2/vc_wrapper.py imports `.hf_utils`, which the wheel ships one folder up only
import seed_vc.hf_utils  # noqa: E402

sys.modules.setdefault("modules.v2.hf_utils", seed_vc.hf_utils)

CONFIG = "vc_wrapper.yaml"
# the DiT's persistent (block_size, block_size) boolean causal mask: 64 MiB at the released block size, the same
# tril whatever the weights (a released file may hold it; upstream's strict=False load keeps its own when it is
# absent): left out of the tiny file so the set stays small, which also makes our loader prove it needs none
BIG_BUFFER = "estimator.transformer.causal_mask"
CFM_CHECKPOINT, AR_CHECKPOINT = "v2/cfm_small.pth", "v2/ar_base.pth"
ASTRAL_REPO = "Plachta/ASTRAL-quantization"
NARROW_CHECKPOINT, WIDE_CHECKPOINT = "bsq32/bsq32_light.pth", "bsq2048/bsq2048_light.pth"
HUBERT_REPO = "facebook/hubert-large-ll60k"
WIDE_CODES, NARROW_CODES = 64, 8
HUBERT_WIDTH, HUBERT_LAYERS, SSL_OUTPUT_LAYER = 32, 3, 2

# what changes in the released yaml (a section path -> its new values)
TINY = {
    ("cfm", "estimator"): {"depth": 3, "num_heads": 2, "hidden_dim": 48, "content_dim": 40},
    ("cfm_length_regulator",): {"channels": 40, "codebook_size": WIDE_CODES},
    ("ar", "model", "config"): {"dim": 64, "head_dim": 16, "n_head": 4, "n_local_heads": 2, "intermediate_size": 96,
                                "n_layer": 2, "vocab_size": WIDE_CODES + 1},
    ("ar_length_regulator",): {"channels": 64, "codebook_size": NARROW_CODES},
    ("style_encoder",): dict(seedvc_models.CAMPPLUS_SIZES),
    ("content_extractor_narrow",): {"ssl_output_layer": SSL_OUTPUT_LAYER},
    ("content_extractor_wide",): {"ssl_output_layer": SSL_OUTPUT_LAYER},
    ("content_extractor_narrow", "encoder"): {"dim": 24, "num_blocks": 2, "intermediate_dim": 40,
                                              "input_dim": HUBERT_WIDTH},
    ("content_extractor_wide", "encoder"): {"dim": 24, "num_blocks": 2, "intermediate_dim": 40,
                                            "input_dim": HUBERT_WIDTH},
    ("content_extractor_narrow", "quantizer"): {"codebook_size": NARROW_CODES, "dim": 24},
    ("content_extractor_wide", "quantizer"): {"codebook_size": WIDE_CODES, "dim": 24},
}


def tiny_config() -> dict:
    """The released vc_wrapper.yaml with TINY's sizes (the yaml's shared encoder anchor becomes two copies)."""
    config = copy.deepcopy(yaml.safe_load((UPSTREAM / "configs" / "v2" / CONFIG).read_text()))
    for path, values in TINY.items():
        node = config
        for key in path:
            node = node[key]
        node.update(values)
    return config


def resolve(target: str):
    module, _, name = target.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError:  # Class.method (BigVGAN.from_pretrained)
        owner, _, cls = module.rpartition(".")
        return getattr(getattr(importlib.import_module(owner), cls), name)


def instantiate(node):
    """hydra.utils.instantiate for the constructs vc_wrapper.yaml uses."""
    if isinstance(node, dict):
        arguments = {k: instantiate(v) for k, v in node.items() if k not in ("_target_", "_partial_")}
        if "_target_" not in node:
            return arguments
        target = resolve(node["_target_"])
        return functools.partial(target, **arguments) if node.get("_partial_") else target(**arguments)
    if isinstance(node, list):
        return [instantiate(v) for v in node]
    return node


def asset_folder(folder: Path, repo: str) -> Path:
    return folder / repo.rpartition("/")[2]


def hubert_config() -> HubertConfig:
    """hubert-large-ll60k's layout at a tiny width: the layer-normed, biased 7-conv stack (320 samples a frame),
    stable layer norm, no feature-projection LayerNorm flag change."""
    return HubertConfig(hidden_size=HUBERT_WIDTH, num_hidden_layers=HUBERT_LAYERS, num_attention_heads=2,
                        intermediate_size=48, conv_dim=(16,) * 7, feat_extract_norm="layer", conv_bias=True,
                        do_stable_layer_norm=True, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                        feat_proj_layer_norm=True, hidden_act="gelu")


def write_hubert(folder: Path, seed: int) -> dict:
    model = HubertModel(hubert_config()).eval()
    fill_parameters(model, seed)
    model.save_pretrained(str(folder), safe_serialization=True)
    extractor = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0, do_normalize=True,
                                         return_attention_mask=True)
    extractor.save_pretrained(str(folder))
    return {"seed": seed, "config": model.config.to_diff_dict(), "preprocessor": extractor.to_dict(),
            "state": state_summary(model.state_dict())}


def no_downloads(folder: Path):
    """AstralQuantizer's constructor fetches a tokenizer it never uses and the SSL model by repo name: the
    tokenizer becomes None, the SSL repo the local folder."""
    from modules.astral_quantization import default_model

    default_model.AutoTokenizer = types.SimpleNamespace(from_pretrained=lambda name: None)
    local = str(asset_folder(folder, HUBERT_REPO))
    for cls in ("AutoModel", "Wav2Vec2FeatureExtractor"):
        original = getattr(default_model, cls)
        if isinstance(original, types.SimpleNamespace):
            continue
        setattr(default_model, cls, types.SimpleNamespace(
            from_pretrained=lambda name, _original=original: _original.from_pretrained(
                local if name == HUBERT_REPO else name)))


def build_parts(config: dict, folder: Path) -> dict:
    """The wrapper's parts instantiated from `config` (its vocoder read back from the folder written)."""
    no_downloads(folder)
    parts = {}
    for name, node in config.items():
        if name.startswith("_") or not isinstance(node, dict) or "_target_" not in node:
            continue
        if name == "vocoder":
            node = dict(node, pretrained_model_name_or_path=str(asset_folder(folder, node[
                "pretrained_model_name_or_path"])))
        parts[name] = instantiate(node)
    return parts


def astral_state(module) -> dict:
    """What a released ASTRAL file holds of the quantizer: its encoder and quantizer (the SSL model is HuBERT's
    own download)."""
    return {k: v.clone() for k, v in module.state_dict().items() if k.startswith(("encoder.", "quantizer."))}


def write_models(folder: Path, seed: int) -> dict:
    """Every file of the tiny v2 model folder (created as `folder`); what references.json records of them."""
    (folder / "v2").mkdir(parents=True, exist_ok=True)
    config = tiny_config()
    (folder / "v2" / CONFIG).write_text(yaml.safe_dump(config, sort_keys=False))
    record = {"config": config,
              "hubert": write_hubert(asset_folder(folder, HUBERT_REPO), seed + 10000),
              "bigvgan": seedvc_models.write_bigvgan(asset_folder(folder, config["vocoder"][
                  "pretrained_model_name_or_path"]), seed + 20000),
              "campplus": seedvc_models.write_campplus(folder, seed + 30000)}
    with torch.no_grad():
        parts = build_parts(config, folder)
        for offset, name in enumerate(("cfm", "cfm_length_regulator", "ar", "ar_length_regulator",
                                       "content_extractor_narrow", "content_extractor_wide")):
            module = parts[name]
            if name.startswith("content_extractor"):
                fill_parameters(module.encoder, seed + 100 * offset)
                fill_parameters(module.quantizer, seed + 100 * offset + 50)
            else:
                fill_parameters(module, seed + 100 * offset)
    cfm_state = {k: v for k, v in parts["cfm"].state_dict().items() if k != BIG_BUFFER}
    nets = {"cfm": {"cfm": cfm_state, "length_regulator": parts["cfm_length_regulator"].state_dict()},
            "ar": {"ar": parts["ar"].state_dict(), "length_regulator": parts["ar_length_regulator"].state_dict()}}
    torch.save({"net": {k: {n: t.clone() for n, t in v.items()} for k, v in nets["cfm"].items()}},
               folder / CFM_CHECKPOINT)
    torch.save({"net": {k: {f"module.{n}": t.clone() for n, t in v.items()} for k, v in nets["ar"].items()}},
               folder / AR_CHECKPOINT)
    astral = asset_folder(folder, ASTRAL_REPO)
    for name, path in (("content_extractor_narrow", NARROW_CHECKPOINT), ("content_extractor_wide", WIDE_CHECKPOINT)):
        (astral / path).parent.mkdir(parents=True, exist_ok=True)
        state = astral_state(parts[name])
        torch.save(state, astral / path)
        record[name] = state_summary(state)
    record["cfm"] = {k: state_summary(v) for k, v in nets["cfm"].items()}
    record["ar"] = {k: state_summary(v) for k, v in nets["ar"].items()}
    record["seed"] = seed
    return json.loads(json.dumps(record, default=str))
