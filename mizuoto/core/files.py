"""Atomic file writes: a file appears complete or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable


def _creation_mode() -> int:
    # mkstemp creates 0600 files; an output file should get the mode any new file would get.
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Call `write(tmp_path)` for a temporary file beside `path`, then rename it over `path`.

    On any failure (including an interrupt) the temporary file is removed and `path` is untouched.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else _creation_mode())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
