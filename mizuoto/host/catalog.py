"""Which models an engine has here: those installed under `<base>/<engine>/`, and the Hugging Face repos
it offers for download. The loader nodes, `say --model`, `mizuoto models` and the doctor all ask this.

A base is a `models/tts` folder: ComfyUI's (and every `tts:` entry of extra_model_paths.yaml) inside the
host, else `--models-dir` (default ./models/tts). A choice is what a loader lists and `--model` takes:
`<engine>/<name>` for an installed file or folder, `hf:<owner>/<repo>` for a download, or the built-in
weights of an engine that has them.
"""

from __future__ import annotations

import os
from pathlib import Path

from mizuoto.core.errors import InputError
from mizuoto.engines.spec import EngineSpec

from . import comfy, download

DEFAULT_BASE = os.path.join("models", comfy.MODELS_FOLDER)  # ./models/tts outside ComfyUI
BUILTIN_WEIGHTS = "(built-in weights)"
NOTHING_INSTALLED = "(no model installed: put one in {folder})"


def bases(models_dir: str | os.PathLike | None = None) -> list[str]:
    """The folders whose `<engine>/` subfolders hold models: `models_dir` when given, else ComfyUI's, else
    ./models/tts."""
    if models_dir is not None and str(models_dir) != "":
        return [str(Path(models_dir).expanduser())]
    return comfy.model_folders() or [DEFAULT_BASE]


def folder(spec: EngineSpec, models_dir=None) -> str:
    """Where a user puts `spec`'s models (absolute, so a message naming it can be followed)."""
    return os.path.abspath(os.path.join(bases(models_dir)[0], spec.id))


def installed(spec: EngineSpec, models_dir=None) -> list[dict[str, str]]:
    """The installed models, as {"name": "<engine>/<entry>", "path": ...}: files with the engine's
    suffixes, and model folders (Hugging Face's with a config.json, or a folder holding a checkpoint file,
    as F5-TTS's are published), downloaded repos included. An engine with a companion file (GPT-SoVITS) lists
    files only, in subfolders too, as its users keep them (SoVITS_weights_v2/<voice>.pth)."""
    if spec.companion is not None:
        return _files(spec, spec.checkpoint_suffixes, models_dir)
    found = []
    for base in bases(models_dir):
        engine_folder = os.path.join(base, spec.id)
        if not os.path.isdir(engine_folder):
            continue
        for entry in sorted(os.listdir(engine_folder)):
            path = os.path.join(engine_folder, entry)
            if _is_checkpoint_file(path, spec) or _is_model_folder(path, spec):
                found.append({"name": f"{spec.id}/{entry}", "path": os.path.abspath(path)})
    return found


def _files(spec: EngineSpec, suffixes: tuple[str, ...], models_dir=None) -> list[dict[str, str]]:
    """Files ending in `suffixes` in <base>/<engine>/ and up to two folders below it (a user's SoVITS_weights_v2/,
    and a download's own folders: lj1995--GPT-SoVITS/v2Pro/), hidden folders skipped, by name <engine>/<relative
    path>."""
    found = []
    for base in bases(models_dir):
        root = Path(base) / spec.id
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            depth = len(path.relative_to(root).parts)
            hidden = any(part.startswith(".") for part in path.relative_to(root).parts)
            if depth <= 3 and not hidden and path.is_file() and path.name.lower().endswith(suffixes):
                found.append({"name": f"{spec.id}/{path.relative_to(root).as_posix()}", "path": str(path.resolve())})
    return found


COMPANION_BESIDE = "(beside the model)"


def companion_choices(spec: EngineSpec, models_dir=None) -> list[str]:
    """What a loader lists for the engine's companion file: the engine's own choice first (the file beside the
    model), then every installed one."""
    return [COMPANION_BESIDE] + [entry["name"] for entry in _files(spec, spec.companion.suffixes, models_dir)]


def resolve_companion(spec: EngineSpec, choice: str | os.PathLike | None, models_dir=None) -> str:
    """A companion choice -> its path ("" leaves it to the engine: the file beside the model)."""
    text = "" if choice is None else str(choice).strip()
    if text in ("", COMPANION_BESIDE):
        return ""
    path = Path(text).expanduser()
    if path.exists() or path.is_absolute() or text.startswith((".", "~")):
        return str(path)
    name = text[len(spec.id) + 1:] if text.startswith(spec.id + "/") else text
    for base in bases(models_dir):
        candidate = Path(base) / spec.id / name
        if name and candidate.is_file():
            return str(candidate)
    raise InputError(f"{spec.display_name} {spec.companion.option} '{text}' was not found in "
                     f"{folder(spec, models_dir)}; pick one the loader lists, or give its path")


def downloadable(spec: EngineSpec, models_dir=None) -> list[dict]:
    """The repos the engine offers, each with whether it is downloaded completely already."""
    base = bases(models_dir)[0]
    offered = [{"choice": download.choice_for(repo),
                "folder": os.path.abspath(download.folder_for(spec.id, repo, base)),
                "downloaded": download.is_complete(download.folder_for(spec.id, repo, base))} for repo in spec.repos]
    for variant in spec.variants:
        folder = download.folder_for(spec.id, variant.repo, base)
        offered.append({"choice": download.choice_for(variant.repo, variant.name), "folder": os.path.abspath(folder),
                        "downloaded": download.is_complete(folder, variant.name), "about": variant.description})
    return offered


def choices(spec: EngineSpec, models_dir=None) -> list[str]:
    """What a loader lists: the built-in weights, the downloadable repos, the installed models; never
    empty: with none of them, one entry that names the folder to put models in."""
    names = [BUILTIN_WEIGHTS] if spec.builtin_weights else []
    names += [entry["choice"] for entry in downloadable(spec, models_dir)]
    names += [entry["name"] for entry in installed(spec, models_dir)]
    return names or [NOTHING_INSTALLED.format(folder=folder(spec, models_dir))]


def engine_report(spec: EngineSpec, models_dir=None) -> dict:
    """The doctor's and `mizuoto models`' view of one engine's models."""
    return {"folder": folder(spec, models_dir), "installed": installed(spec, models_dir),
            "downloadable": downloadable(spec, models_dir), "builtin_weights": spec.builtin_weights}


def resolve(spec: EngineSpec, choice: str | os.PathLike | None, models_dir=None) -> str | None:
    """A loader's choice or a `--model` value -> a checkpoint path (downloading a repo first), or None for
    the built-in weights. A path that exists is taken as it is; a name is looked up in the engine's folders
    (with or without the `<engine>/` prefix)."""
    text = "" if choice is None else str(choice)
    if text in ("", BUILTIN_WEIGHTS):
        if spec.builtin_weights:
            return None
        raise _not_installed(spec, models_dir, "needs a model")
    if text.startswith(NOTHING_INSTALLED.split("{")[0]):  # the entry an empty list offers, whatever its folder
        raise _not_installed(spec, models_dir, "has no model installed")
    if download.is_choice(text):
        repo = download.repo_of(text)
        if not _looks_like_repo(repo):
            raise InputError(f"{text!r} is not a Hugging Face repo id; write hf:<owner>/<name>, e.g. "
                             f"{download.choice_for(spec.repos[0]) if spec.repos else 'hf:owner/name'}")
        base = bases(models_dir)[0]
        name = download.variant_of(text)
        if not name:
            model = download.fetch(spec.id, repo, base, spec.repo_files)
            for asset in spec.assets:
                download.fetch(spec.id, asset.repo, base, asset.files)
            return str(model)
        variant = spec.variant(repo, name)
        if variant is None:
            offered = [download.choice_for(v.repo, v.name) for v in spec.variants if v.repo == repo]
            hint = f"pick one of {', '.join(offered)}" if offered else f"pick {download.choice_for(repo)}"
            raise InputError(f"{spec.display_name} offers no model {text!r}; {hint}")
        model = download.fetch(spec.id, repo, base, variant.files, variant.name)
        for asset in variant.assets:
            download.fetch(spec.id, asset.repo, base, asset.files)
        return str(model / variant.entry)
    path = Path(text).expanduser()
    if path.exists() or path.is_absolute() or text.startswith((".", "~")):
        return str(path)  # a path: the loader says so when it does not exist
    name = text[len(spec.id) + 1:] if text.startswith(spec.id + "/") else text
    for base in bases(models_dir):
        candidate = os.path.join(base, spec.id, name)
        if name and os.path.exists(candidate):
            return candidate
    hint = "; e.g. " + download.choice_for(spec.repos[0]) + " downloads one there" if spec.repos else ""
    raise InputError(f"{spec.display_name} model '{text}' was not found in {folder(spec, models_dir)} (and is "
                     f"no file or folder here){hint}; 'python -m mizuoto models' lists them")


def _not_installed(spec: EngineSpec, models_dir, what: str) -> InputError:
    hint = (f", or pick one of the downloadable ones ({', '.join(download.choice_for(r) for r in spec.repos)})"
            if spec.repos else "")
    return InputError(f"{spec.display_name} {what}: put a model in {folder(spec, models_dir)} (the README's "
                      f"{spec.display_name} section names its files) and pick it{hint}")


def _looks_like_repo(repo: str) -> bool:
    owner, _, name = repo.partition("/")
    return bool(owner) and bool(name) and "/" not in name and " " not in repo


def _is_checkpoint_file(path: str, spec: EngineSpec) -> bool:
    return os.path.isfile(path) and path.lower().endswith(spec.checkpoint_suffixes)


def _is_model_folder(path: str, spec: EngineSpec) -> bool:
    if not os.path.isdir(path):
        return False
    return os.path.isfile(os.path.join(path, "config.json")) or any(
        n.lower().endswith(spec.checkpoint_suffixes) for n in os.listdir(path))
