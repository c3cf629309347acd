"""Where the report writers' files go: output paths checked before any work (:func:`file_problem`,
:func:`folder_problem`), so no result is computed that cannot be written; files written whole
(:func:`write_atomically`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["file_problem", "folder_problem", "write_atomically", "write_temporary"]


def file_problem(path: str | Path) -> str | None:
    """Why a file cannot be written at ``path`` (a few words), None when it can: not a folder, in a
    writable folder, writable itself if it exists."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        return "is a folder; expected a file path"
    if not parent.exists():
        return f"the folder {str(parent)!r} does not exist; create it first"
    if not parent.is_dir():
        return f"{str(parent)!r} is not a folder"
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return "not writable"
    return None


def folder_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot be (made) a folder to write in, None when it is a writable folder or its
    nearest existing ancestor is."""
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            return "is a file; expected a folder (it is made if missing)"
        return None if os.access(path, os.W_OK | os.X_OK) else "not writable"
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{str(ancestor)!r} is a file, not a folder"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"cannot make it: {str(ancestor)!r} is not writable"
    return None


def write_atomically(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file beside it. A link is followed; a
    non-regular file (``/dev/stdout``, a FIFO) is written in place. A replaced file keeps its mode.
    Raises OSError (e.g. ENOSPC); no temporary file is left."""
    path = Path(path)
    if path.exists() and not path.is_file():  # follows links: /dev/stdout -> /proc/self/fd/1 -> a pipe
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return
    if path.is_symlink():  # to a regular file (or dangling): write where it points
        path = Path(os.path.realpath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        if path.exists():  # mkstemp's file is 0600: keep the mode of the file replaced, else the umask's
            mode = path.stat().st_mode & 0o7777
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), mode)
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_temporary(text: str, prefix: str, suffix: str) -> str:
    """Write ``text`` to a new ``prefix*suffix`` file in the temporary folder; its path. Raises OSError."""
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=suffix)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return path
