"""Checkpoints named by a Hugging Face repo id, downloaded into models/tts/<engine>/ on first use.

huggingface_hub (an optional dependency that ComfyUI installs usually already have) does the work:
files are fetched with its progress bars and resume where an interrupted download stopped. Without
it, or offline, the error names the repo, the folder to fill by hand and the whole cause, and a folder
the failed download created is removed again unless it holds a file that arrived (kept to resume).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from mizuoto.core.errors import CheckpointError

PREFIX = "hf:"
VARIANT = "#"  # hf:<repo>#<variant>: another model of the same repo (EngineSpec.variants)
COMPLETE = ".mizuoto-complete"  # written after every file arrived: a half download is never used
HUB_CACHE = ".cache"  # huggingface_hub's bookkeeping inside local_dir: not a downloaded file


def choice_for(repo_id: str, variant: str = "") -> str:
    return PREFIX + repo_id + (VARIANT + variant if variant else "")


def folder_for(engine_id: str, repo_id: str, base: str) -> Path:
    return Path(base) / engine_id / repo_id.replace("/", "--")


def _marker(variant: str) -> str:
    return COMPLETE + ("-" + variant if variant else "")


def is_complete(folder: Path, variant: str = "") -> bool:
    """Every file of the download arrived (of the repo's `variant` where given: each has its own files)."""
    return (Path(folder) / _marker(variant)).is_file()


def fetch(engine_id: str, repo_id: str, base: str, files: tuple[str, ...] = (), variant: str = "") -> Path:
    """The local folder holding `repo_id`, downloading it there first if it is not complete; `files` (file
    names or glob patterns) limits the download to what the engine reads, where a repo holds more; a `variant`
    (another model of the repo, other files) is complete on its own."""
    folder = folder_for(engine_id, repo_id, base)
    if is_complete(folder, variant):
        return folder
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise CheckpointError(f"{repo_id} is not downloaded and huggingface_hub is not installed; "
                              f"pip install huggingface_hub, or download {repo_id} by hand into {folder}") from None
    created = [p for p in (folder, *folder.parents) if not p.exists()]  # innermost first
    folder.mkdir(parents=True, exist_ok=True)
    try:
        snapshot_download(repo_id=repo_id, local_dir=str(folder), **({"allow_patterns": list(files)} if files else {}))
    except BaseException as exc:  # offline, not found, no permission, Ctrl-C: all end the same way for the user
        _remove_if_nothing_arrived(folder, created)
        if not isinstance(exc, Exception):
            raise
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise CheckpointError(f"could not download {repo_id} into {folder}: {type(exc).__name__}: {reason} -- "
                              f"connect to the internet and load it again, or download {repo_id} by hand into "
                              f"{folder}") from None
    (folder / _marker(variant)).write_text("")
    return folder


def _remove_if_nothing_arrived(folder: Path, created: list[Path]) -> None:
    """Undo the folders a failed download made, when no file of the repo is in them (a partial download
    stays: huggingface_hub resumes it next time)."""
    if folder in created and not any(p.is_file() for p in folder.rglob("*")
                                      if HUB_CACHE not in p.relative_to(folder).parts):
        shutil.rmtree(folder, ignore_errors=True)
    for parent in created[1:]:
        try:
            parent.rmdir()  # only while empty
        except OSError:
            break


def is_choice(choice: str) -> bool:
    return choice.startswith(PREFIX)


def repo_of(choice: str) -> str:
    return choice[len(PREFIX):].partition(VARIANT)[0]


def variant_of(choice: str) -> str:
    """The variant a choice names ("" for the repo's plain download)."""
    return choice[len(PREFIX):].partition(VARIANT)[2]
