"""Checkpoints named by a Hugging Face repo id, downloaded into models/tts/<engine>/ on first use.

huggingface_hub (an optional dependency that ComfyUI installs usually already have) does the work:
files are fetched with its progress bars and resume where an interrupted download stopped. Without
it, or offline, the error names the folder to fill by hand.
"""

from __future__ import annotations

from pathlib import Path

from mizuoto.core.errors import CheckpointError

PREFIX = "hf:"
COMPLETE = ".mizuoto-complete"  # written after every file arrived: a half download is never used


def choice_for(repo_id: str) -> str:
    return PREFIX + repo_id


def folder_for(engine_id: str, repo_id: str, base: str) -> Path:
    return Path(base) / engine_id / repo_id.replace("/", "--")


def fetch(engine_id: str, repo_id: str, base: str) -> Path:
    """The local folder holding `repo_id`, downloading it there first if it is not complete."""
    folder = folder_for(engine_id, repo_id, base)
    if (folder / COMPLETE).is_file():
        return folder
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise CheckpointError(f"{repo_id} is not downloaded and huggingface_hub is not installed; "
                              f"pip install huggingface_hub, or download {repo_id} by hand into {folder}") from None
    folder.mkdir(parents=True, exist_ok=True)
    try:
        snapshot_download(repo_id=repo_id, local_dir=str(folder))
    except Exception as exc:  # offline, not found, no permission: all end the same way for the user
        reason = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise CheckpointError(f"could not download {repo_id} ({reason}); download it by hand into {folder} "
                              f"and load it again") from None
    (folder / COMPLETE).write_text("")
    return folder


def is_choice(choice: str) -> bool:
    return choice.startswith(PREFIX)


def repo_of(choice: str) -> str:
    return choice[len(PREFIX):]

