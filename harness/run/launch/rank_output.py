"""A rank's own output (its file descriptors 1 and 2) kept in the rank's log, shown when the run fails.

torch prints from inside a rank on some paths (FSDP's ``_raise_assert_with_print``: the rank's
whole stack, about 80 lines), which belong on the terminal only when the run fails.
:func:`captured` sends fd 1 and 2 to ``rank<r>.log`` in the run's temporary folder; :func:`shown`
gives the text to append to a failed rank's traceback."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

__all__ = ["log_path", "captured", "shown"]

SHOWN_LINES = 80
"""The last lines of a rank's log that a failed run shows."""


def log_path(run_folder: str, rank: int) -> str:
    """``<run folder>/rank<r>.log``."""
    return os.path.join(run_folder, f"rank{rank}.log")


@contextlib.contextmanager
def captured(path: str) -> Iterator[None]:
    """Write fd 1 and fd 2 to ``path`` (appended) for the block, then restore them."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (*saved, fd):
            os.close(f)


def shown(path: str, rank: int) -> str:
    """A failed run's text of the rank's log: ``""`` if empty, else a header and its last :data:`SHOWN_LINES` lines."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().rstrip().splitlines()
    except OSError:
        return ""
    if not lines:
        return ""
    cut = f" (its last {SHOWN_LINES} of {len(lines)} lines)" if len(lines) > SHOWN_LINES else ""
    return f"\nrank {rank}'s output{cut}:\n" + "\n".join(lines[-SHOWN_LINES:]) + "\n"
