"""Where a Seed-VC model's files are: the DiT checkpoint with its preset, and the three models upstream downloads
beside it (the Whisper content encoder, the BigVGAN vocoder, CAM++).

Upstream (SeedVCWrapper) fetches each from its own Hugging Face repo. Here a model is a folder holding the DiT
files as `Plachta/Seed-VC` publishes them; each other asset is looked for inside that folder and beside it (in
`models/tts/seedvc/`), under the repo's name as a download lays it out (`<owner>--<name>`) or its last part:

    models/tts/seedvc/Plachta--Seed-VC/DiT_seed_v2_uvit_whisper_small_wavenet_bigvgan_pruned.pth
                                        config_dit_mel_seed_uvit_whisper_small_wavenet.yml
    models/tts/seedvc/openai--whisper-small/            (config.json, model.safetensors)      or .../whisper-small/
    models/tts/seedvc/nvidia--bigvgan_v2_22khz_80band_256x/  (config.json, bigvgan_generator.pt)
    models/tts/seedvc/funasr--campplus/campplus_cn_common.bin   (or the .bin in the model folder itself)

The preset names the Whisper and BigVGAN repos (`speech_tokenizer.name`, `vocoder.name`), as upstream reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mizuoto.core.errors import CheckpointError

# upstream's v1 offline conversion model (seed_vc_wrapper.py: _load_base_model)
DIT_CHECKPOINT = "DiT_seed_v2_uvit_whisper_small_wavenet_bigvgan_pruned.pth"
DIT_CONFIG = "config_dit_mel_seed_uvit_whisper_small_wavenet.yml"
CAMPPLUS_REPO, CAMPPLUS_FILE = "funasr/campplus", "campplus_cn_common.bin"


@dataclass(frozen=True)
class Files:
    checkpoint: Path
    config: Path
    whisper: Path  # a transformers Whisper folder
    bigvgan: Path  # a BigVGAN folder (config.json, bigvgan_generator.pt)
    campplus: Path  # the CAM++ state dict


def dit_files(path: Path) -> tuple[Path, Path]:
    """The DiT checkpoint and its preset: `path` is the checkpoint itself or the folder holding it."""
    if path.is_file():
        folder, checkpoint = path.parent, path
        configs = [folder / DIT_CONFIG] if (folder / DIT_CONFIG).is_file() else sorted(folder.glob("*.yml"))
    else:
        folder, checkpoint = path, path / DIT_CHECKPOINT
        if not checkpoint.is_file():
            found = sorted(path.glob("*.pth"))
            if len(found) != 1:
                raise CheckpointError(f"{path} holds no {DIT_CHECKPOINT} (Seed-VC v1's model, from Plachta/Seed-VC)"
                                      + (f"; it has {len(found)} .pth files: point at one" if found else ""))
            checkpoint = found[0]
        configs = [path / DIT_CONFIG] if (path / DIT_CONFIG).is_file() else sorted(path.glob("*.yml"))
    if len(configs) != 1:
        raise CheckpointError(f"{folder} needs the model's preset beside {checkpoint.name} ({DIT_CONFIG} from "
                              f"Plachta/Seed-VC)" + (f"; it has {len(configs)} .yml files" if configs else ""))
    return checkpoint, configs[0]


def candidates(folder: Path, repo: str) -> list[Path]:
    owner, _, name = repo.rpartition("/")
    names = [f"{owner}--{name}", name] if owner else [name]
    return [base / n for base in (folder, folder.parent) for n in names]


def find_folder(folder: Path, repo: str, needs: str, what: str) -> Path:
    for candidate in candidates(folder, repo):
        if (candidate / needs).is_file():
            return candidate
    raise CheckpointError(f"Seed-VC needs {what} ({repo}): put its files in {folder.parent / repo.replace('/', '--')} "
                          f"(with {needs}); none was found there or in {folder}")


def find_campplus(folder: Path) -> Path:
    for candidate in [folder] + candidates(folder, CAMPPLUS_REPO):
        if (candidate / CAMPPLUS_FILE).is_file():
            return candidate / CAMPPLUS_FILE
    raise CheckpointError(f"Seed-VC needs CAM++ ({CAMPPLUS_REPO}): put {CAMPPLUS_FILE} in "
                          f"{folder.parent / CAMPPLUS_REPO.replace('/', '--')} or in {folder}")


def locate(path: Path, whisper_repo: str, vocoder_repo: str) -> Files:
    checkpoint, config = dit_files(path)
    folder = checkpoint.parent
    return Files(checkpoint, config, find_folder(folder, whisper_repo, "config.json", "its Whisper content encoder"),
                 find_folder(folder, vocoder_repo, "bigvgan_generator.pt", "its BigVGAN vocoder"),
                 find_campplus(folder))
