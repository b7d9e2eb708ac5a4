"""Where an IndexTTS 2 model's files are: its release folder (IndexTeam/IndexTTS-2) and the four models upstream
downloads beside it.

    models/tts/indextts/IndexTeam--IndexTTS-2/config.yaml      the file names below are config.yaml's
                                              gpt.pth, s2mel.pth, bpe.model, wav2vec2bert_stats.pt, feat1.pt, feat2.pt
                                              qwen0.6bemo4-merge/      (QwenEmotion; only emotion=text needs it)
    and, as upstream's ensure_models_available lays them out in the folder's hf_cache/, or as downloads of their
    repos inside or beside the folder (<owner>--<name>):
        hf_cache/w2v-bert-2.0/                         facebook/w2v-bert-2.0 (config.json, model.safetensors)
        hf_cache/semantic_codec_model.safetensors      amphion/MaskGCT's semantic_codec/model.safetensors
        hf_cache/campplus_cn_common.bin                funasr/campplus
        hf_cache/bigvgan/                              nvidia/bigvgan_v2_22khz_80band_256x (or config.yaml's
                                                       vocoder.name)
No torch import.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from mizuoto.core import asset_files
from mizuoto.core.errors import CheckpointError

ENGINE = "IndexTTS"
FILE_KEYS = ("gpt_checkpoint", "s2mel_checkpoint", "w2v_stat", "emo_matrix", "spk_matrix")


@dataclass(frozen=True)
class Files:
    folder: Path
    config: dict
    gpt: Path
    s2mel: Path
    bpe: Path
    w2v_stat: Path
    emo_matrix: Path
    spk_matrix: Path
    w2v_bert: Path  # a transformers Wav2Vec2BertModel folder (with its preprocessor_config.json)
    codec: Path  # the MaskGCT semantic codec's safetensors
    campplus: Path
    bigvgan: Path  # a BigVGAN folder (config.json, bigvgan_generator.pt)
    emotion_model: Path | None  # QwenEmotion's folder, when it is there

    @property
    def version(self) -> str:
        return str(self.config.get("version", ""))


def read_config(path: Path) -> dict:
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise CheckpointError(f"{path} is not a readable config.yaml ({exc.__class__.__name__}); download it again "
                              f"from IndexTeam/IndexTTS-2") from None
    if not isinstance(config, dict) or "gpt" not in config:
        raise CheckpointError(f"{path} is not an IndexTTS config.yaml (it has no gpt section)")
    return config


def model_folder(path: Path) -> Path:
    path = Path(path)
    folder = path.parent if path.is_file() else path
    if not (folder / "config.yaml").is_file():
        raise CheckpointError(f"{folder} holds no config.yaml: point at an IndexTTS-2 folder (IndexTeam/IndexTTS-2)")
    return folder


def locate(path: Path) -> Files:
    folder = model_folder(path)
    config = read_config(folder / "config.yaml")
    if "s2mel" not in config:
        raise CheckpointError(f"{folder} is IndexTTS 1.x (its config.yaml has no s2mel section); this engine loads "
                              f"IndexTTS 2 (IndexTeam/IndexTTS-2)")
    version = str(config.get("version", ""))
    if version not in ("2", "2.0"):
        raise CheckpointError(f"{folder} is IndexTTS version {version or '(none given)'}; this engine loads "
                              f"IndexTTS 2 (config.yaml version 2.0)")
    named = {}
    for key in FILE_KEYS:
        name = str(config.get(key, "")).strip()
        if not name or not (folder / name).is_file():
            raise CheckpointError(f"IndexTTS needs {folder / name if name else key} (config.yaml's {key}): "
                                  f"download it from IndexTeam/IndexTTS-2 into {folder}")
        named[key] = folder / name
    bpe = folder / str(config.get("dataset", {}).get("bpe_model", "bpe.model")).strip()
    if not bpe.is_file():
        raise CheckpointError(f"IndexTTS needs its tokenizer {bpe}: download bpe.model from IndexTeam/IndexTTS-2")
    cache = folder / "hf_cache"
    vocoder = str(config.get("vocoder", {}).get("name", "nvidia/bigvgan_v2_22khz_80band_256x"))
    emotion = folder / str(config.get("qwen_emo_path", "qwen0.6bemo4-merge")).strip()
    return Files(
        folder, config, named["gpt_checkpoint"], named["s2mel_checkpoint"], bpe, named["w2v_stat"],
        named["emo_matrix"], named["spk_matrix"],
        w2v_bert=asset_files.find_folder(ENGINE, folder, "facebook/w2v-bert-2.0", "config.json",
                                         "w2v-BERT 2.0, its semantic features", (cache / "w2v-bert-2.0",)),
        codec=asset_files.find_file(ENGINE, folder, "amphion/MaskGCT", "semantic_codec_model.safetensors",
                                    "the MaskGCT semantic codec",
                                    (cache / "semantic_codec_model.safetensors",
                                     *(base / "semantic_codec" / "model.safetensors"
                                       for base in asset_files.candidates(folder, "amphion/MaskGCT")))),
        campplus=asset_files.find_file(ENGINE, folder, "funasr/campplus", "campplus_cn_common.bin", "CAM++",
                                       (cache / "campplus_cn_common.bin",)),
        bigvgan=asset_files.find_folder(ENGINE, folder, vocoder, "bigvgan_generator.pt", "its BigVGAN vocoder",
                                        (cache / "bigvgan",)),
        emotion_model=emotion if (emotion / "config.json").is_file() else None,
    )
