"""Where the report writers' files go: output paths checked before any work, files written whole.

The command line checks every output flag (``--json``, ``--report``, ``--junitxml``: files;
``--trace``, ``--plot``, ``render --out``: folders, made if missing) with :func:`file_problem` and
:func:`folder_problem` before it runs anything, so no result is computed that cannot be written,
then writes each file with :func:`write_atomically` (never half a file).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["file_problem", "folder_problem", "write_atomically", "write_temporary"]


def file_problem(path: str | Path) -> str | None:
    """Why a file cannot be written at ``path`` (a few words, without the path), None when it can:
    not a folder, in an existing writable folder, and writable itself if it exists."""
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
    """Why ``path`` cannot be (made into) a folder to write in, None when it can: an existing
    writable folder, or a new one whose nearest existing ancestor is a writable folder."""
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
    """Write ``text`` (UTF-8) to ``path`` through a temporary file beside it (never half a file).

    A symbolic link is followed (the file it names is replaced, not the link); a path that is
    not a regular file (``/dev/stdout``, ``/dev/full``, a FIFO) is written in place: replacing it
    would put a regular file where a device was. A replaced file keeps its mode; a new one gets
    the umask's. Raises OSError (e.g. ENOSPC from ``/dev/full``); no temporary file is left.
    """
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
    """Write ``text`` to a new file in the temporary folder (``prefix*suffix``); its path. Where
    results go when the file asked for cannot be written after the run. Raises OSError."""
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=suffix)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return path
