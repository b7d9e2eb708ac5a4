"""Where the models a checkpoint needs beside it are (the repos an upstream downloads at load time), for engines
whose released model is a folder plus assets from other repos.

An asset is looked for inside the model folder and beside it (the engine's folder under models/tts/), under its
repo's name as a download lays it out (`<owner>--<name>`) or the repo's last part, and then in any further
places the engine names (an upstream's own cache layout, e.g. IndexTTS's hf_cache/). No torch import.
"""

from __future__ import annotations

from pathlib import Path

from mizuoto.core.errors import CheckpointError


def candidates(folder: Path, repo: str, extra: tuple[Path, ...] = ()) -> list[Path]:
    owner, _, name = repo.rpartition("/")
    names = [f"{owner}--{name}", name] if owner else [name]
    return [base / n for base in (folder, folder.parent) for n in names] + list(extra)


def find_folder(engine: str, folder: Path, repo: str, needs: str, what: str, extra: tuple[Path, ...] = ()) -> Path:
    """The asset folder holding `needs` (a file every copy of that repo has)."""
    for candidate in candidates(folder, repo, extra):
        if (candidate / needs).is_file():
            return candidate
    raise CheckpointError(f"{engine} needs {what} ({repo}): put its files in {folder.parent / repo.replace('/', '--')} "
                          f"(with {needs}); none was found there or in {folder}")


def find_file(engine: str, folder: Path, repo: str, name: str, what: str, extra: tuple[Path, ...] = ()) -> Path:
    """A single-file asset: in the model folder itself, in its repo's folder inside or beside it, or at one of
    `extra` (file paths)."""
    for candidate in [folder] + candidates(folder, repo):
        if (candidate / name).is_file():
            return candidate / name
    for path in extra:
        if path.is_file():
            return path
    raise CheckpointError(f"{engine} needs {what} ({repo}): put {name} in "
                          f"{folder.parent / repo.replace('/', '--')} or in {folder}")
