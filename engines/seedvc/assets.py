"""Where a Seed-VC model's files are: the DiT checkpoint with its preset, and the three models upstream downloads
beside it (the content encoder, the vocoder, CAM++).

Upstream (SeedVCWrapper) fetches each from its own Hugging Face repo. Here a model is a folder holding the DiT
files as `Plachta/Seed-VC` publishes them; each other asset is looked for inside that folder and beside it (in
`models/tts/seedvc/`), under the repo's name as a download lays it out (`<owner>--<name>`) or its last part:

    models/tts/seedvc/Plachta--Seed-VC/DiT_seed_v2_uvit_whisper_small_wavenet_bigvgan_pruned.pth
                                        config_dit_mel_seed_uvit_whisper_small_wavenet.yml
    models/tts/seedvc/openai--whisper-small/            (config.json, model.safetensors)      or .../whisper-small/
    models/tts/seedvc/nvidia--bigvgan_v2_22khz_80band_256x/  (config.json, bigvgan_generator.pt)
    models/tts/seedvc/funasr--campplus/campplus_cn_common.bin   (or the .bin in the model folder itself)

The real-time model (`inference_realtime.load_models`) is the other DiT pair of that repo, with XLS-R content and the
HiFT vocoder:

    models/tts/seedvc/Plachta--Seed-VC/DiT_uvit_tat_xlsr_ema.pth, config_dit_mel_seed_uvit_xlsr_tiny.yml
    models/tts/seedvc/facebook--wav2vec2-xls-r-300m/  (config.json, preprocessor_config.json, pytorch_model.bin)
    models/tts/seedvc/FunAudioLLM--CosyVoice-300M/hift.pt     (a hifigan.yml beside it overrides the config)

The singing model (`SeedVCWrapper._load_f0_model`: 44.1 kHz, conditioned on the source's F0) is the third pair, with
the same Whisper, the 44 kHz BigVGAN and RMVPE for the F0:

    models/tts/seedvc/Plachta--Seed-VC/DiT_seed_v2_uvit_whisper_base_f0_44k_bigvgan_pruned_ft_ema.pth,
                                        config_dit_mel_seed_uvit_whisper_base_f0_44k.yml
    models/tts/seedvc/nvidia--bigvgan_v2_44khz_128band_512x/  (config.json, bigvgan_generator.pt)
    models/tts/seedvc/lj1995--VoiceConversionWebUI/rmvpe.pt     (or rmvpe.pt in the model folder itself)

A folder holding several DiT pairs loads the offline model; point at a checkpoint for another (the downloads
`hf:Plachta/Seed-VC#realtime` and `#singing` give the loader theirs).
The preset names the content encoder's repo (`speech_tokenizer.name`) and BigVGAN's (`vocoder.name`), as upstream
reads them; HiFT's repo is fixed in upstream's loader.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mizuoto.core import asset_files
from mizuoto.core.errors import CheckpointError

# upstream's v1 offline conversion model (seed_vc_wrapper.py: _load_base_model)
DIT_CHECKPOINT = "DiT_seed_v2_uvit_whisper_small_wavenet_bigvgan_pruned.pth"
DIT_CONFIG = "config_dit_mel_seed_uvit_whisper_small_wavenet.yml"
CAMPPLUS_REPO, CAMPPLUS_FILE = "funasr/campplus", "campplus_cn_common.bin"
# upstream's real-time model (inference_realtime.py: load_models), and its vocoder's file
REALTIME_CHECKPOINT = "DiT_uvit_tat_xlsr_ema.pth"
REALTIME_CONFIG = "config_dit_mel_seed_uvit_xlsr_tiny.yml"
HIFT_REPO, HIFT_FILE = "FunAudioLLM/CosyVoice-300M", "hift.pt"
HIFT_CONFIG = "hifigan.yml"  # optional beside hift.pt; else seed-vc's configs/hifigan.yml values (HiFTConfig())
# upstream's singing model (seed_vc_wrapper.py: _load_f0_model) and its F0 estimator's file
F0_CHECKPOINT = "DiT_seed_v2_uvit_whisper_base_f0_44k_bigvgan_pruned_ft_ema.pth"
F0_CONFIG = "config_dit_mel_seed_uvit_whisper_base_f0_44k.yml"
RMVPE_REPO, RMVPE_FILE = "lj1995/VoiceConversionWebUI", "rmvpe.pt"
# each released checkpoint's preset (a folder's first one present is what the folder loads)
PRESETS = {DIT_CHECKPOINT: DIT_CONFIG, REALTIME_CHECKPOINT: REALTIME_CONFIG, F0_CHECKPOINT: F0_CONFIG}


@dataclass(frozen=True)
class Files:
    checkpoint: Path
    config: Path
    content: Path  # a transformers folder: Whisper (whisper) or Wav2Vec2Model (xlsr)
    vocoder: Path  # a BigVGAN folder (config.json, bigvgan_generator.pt) or HiFT's hift.pt
    campplus: Path  # the CAM++ state dict
    rmvpe: Path | None = None  # the singing model's F0 estimator (rmvpe.pt)


def dit_files(path: Path) -> tuple[Path, Path]:
    """The DiT checkpoint and its preset: `path` is the checkpoint itself or the folder holding it."""
    if path.is_file():
        folder, checkpoint = path.parent, path
    else:
        folder = path
        checkpoint = next((path / name for name in PRESETS if (path / name).is_file()), path / DIT_CHECKPOINT)
        if not checkpoint.is_file():
            found = sorted(path.glob("*.pth"))
            if len(found) != 1:
                raise CheckpointError(f"{path} holds no {DIT_CHECKPOINT} (Seed-VC v1's model, from Plachta/Seed-VC)"
                                      + (f"; it has {len(found)} .pth files: point at one" if found else ""))
            checkpoint = found[0]
    preset = folder / PRESETS.get(checkpoint.name, DIT_CONFIG)
    configs = [preset] if preset.is_file() else sorted(folder.glob("*.yml"))
    if len(configs) != 1:
        raise CheckpointError(f"{folder} needs the model's preset beside {checkpoint.name} ({preset.name} from "
                              f"Plachta/Seed-VC)" + (f"; it has {len(configs)} .yml files" if configs else ""))
    return checkpoint, configs[0]


def find_folder(folder: Path, repo: str, needs: str, what: str) -> Path:
    return asset_files.find_folder("Seed-VC", folder, repo, needs, what)


def find_file(folder: Path, repo: str, name: str, what: str) -> Path:
    """A single-file asset: in the model folder itself, or in its repo's folder inside or beside it."""
    return asset_files.find_file("Seed-VC", folder, repo, name, what)


def find_campplus(folder: Path) -> Path:
    return find_file(folder, CAMPPLUS_REPO, CAMPPLUS_FILE, "CAM++")


CONTENT_FILES = {"whisper": ("config.json", "its Whisper content encoder"),
                 "xlsr": ("preprocessor_config.json", "its XLS-R content encoder")}


def locate(path: Path, content: tuple[str, str], vocoder: tuple[str, str | None], f0: bool = False) -> Files:
    """The model's files; `content` and `vocoder` are (preset type, repo) pairs (the hifigan vocoder's repo is
    upstream's fixed HIFT_REPO); `f0`: the singing model, which needs RMVPE too."""
    checkpoint, config = dit_files(path)
    folder = checkpoint.parent
    needs, what = CONTENT_FILES[content[0]]
    content_folder = find_folder(folder, content[1], needs, what)
    if vocoder[0] == "hifigan":
        vocoder_file = find_folder(folder, HIFT_REPO, HIFT_FILE, "its HiFT vocoder") / HIFT_FILE
    else:
        vocoder_file = find_folder(folder, vocoder[1], "bigvgan_generator.pt", "its BigVGAN vocoder")
    rmvpe = find_file(folder, RMVPE_REPO, RMVPE_FILE, "RMVPE, its F0 estimator") if f0 else None
    return Files(checkpoint, config, content_folder, vocoder_file, find_campplus(folder), rmvpe)


# ---------------------------------------------------------------------------------------------------
# v2 (modules/v2/vc_wrapper.py, loaded by inference_v2.py / app_vc_v2.py): the CFM and the AR checkpoints of
# Plachta/Seed-VC's v2/ folder, the two ASTRAL quantizers, HuBERT-large (their shared SSL model), CAM++ and the
# 22 kHz BigVGAN. The wrapper's sizes come from seed-vc's configs/v2/vc_wrapper.yaml (engine_v2.RELEASED); a
# vc_wrapper.yaml in the v2 folder overrides them (a model trained with other sizes):
#
#     models/tts/seedvc/Plachta--Seed-VC/v2/cfm_small.pth, ar_base.pth      (and optionally vc_wrapper.yaml)
#     models/tts/seedvc/Plachta--ASTRAL-quantization/bsq32/bsq32_light.pth, bsq2048/bsq2048_light.pth
#     models/tts/seedvc/facebook--hubert-large-ll60k/  (config.json, pytorch_model.bin or model.safetensors)
#     models/tts/seedvc/nvidia--bigvgan_v2_22khz_80band_256x/, funasr--campplus/campplus_cn_common.bin

V2_CFM, V2_AR, V2_CONFIG = "v2/cfm_small.pth", "v2/ar_base.pth", "v2/vc_wrapper.yaml"
ASTRAL_REPO = "Plachta/ASTRAL-quantization"
ASTRAL_NARROW, ASTRAL_WIDE = "bsq32/bsq32_light.pth", "bsq2048/bsq2048_light.pth"
HUBERT_REPO = "facebook/hubert-large-ll60k"
V2_VOCODER_REPO = "nvidia/bigvgan_v2_22khz_80band_256x"


@dataclass(frozen=True)
class V2Files:
    cfm: Path
    ar: Path
    config: Path | None  # the v2 folder's vc_wrapper.yaml, or None: the released sizes
    narrow: Path  # ASTRAL's bsq32 quantizer (the AR's content)
    wide: Path  # ASTRAL's bsq2048 quantizer (the CFM's content and the AR's prompt)
    hubert: Path  # a transformers HubertModel folder
    vocoder: Path  # a BigVGAN folder
    campplus: Path


def v2_folder(path: Path) -> Path | None:
    """The folder holding `v2/` when `path` is one of v2's checkpoints or a folder with v2's CFM and no v1 DiT
    pair; else None (a v1 model)."""
    if path.is_file():
        return path.parent.parent if f"{path.parent.name}/{path.name}" in (V2_CFM, V2_AR) else None
    if (path / V2_CFM).is_file() and not any((path / name).is_file() for name in PRESETS):
        return path
    if path.name == "v2" and (path / Path(V2_CFM).name).is_file():
        return path.parent
    return None


def locate_v2(folder: Path) -> V2Files:
    """v2's files; `folder` holds v2/ (v2_folder's answer)."""
    cfm, ar = folder / V2_CFM, folder / V2_AR
    for checkpoint, what in ((cfm, "its CFM"), (ar, "its AR style converter")):
        if not checkpoint.is_file():
            name = checkpoint.relative_to(folder).as_posix()
            raise CheckpointError(f"Seed-VC v2 needs {what} (Plachta/Seed-VC's {name}): put it in {checkpoint.parent}")
    config = folder / V2_CONFIG
    astral = find_folder(folder, ASTRAL_REPO, ASTRAL_WIDE, "its ASTRAL content quantizers")
    if not (astral / ASTRAL_NARROW).is_file():
        raise CheckpointError(f"Seed-VC v2 needs ASTRAL's narrow quantizer ({ASTRAL_REPO}): put {ASTRAL_NARROW} "
                              f"in {astral}")
    hubert = find_folder(folder, HUBERT_REPO, "config.json", "HuBERT-large, its SSL content model")
    vocoder = find_folder(folder, V2_VOCODER_REPO, "bigvgan_generator.pt", "its BigVGAN vocoder")
    return V2Files(cfm, ar, config if config.is_file() else None, astral / ASTRAL_NARROW, astral / ASTRAL_WIDE,
                   hubert, vocoder, find_campplus(folder))

