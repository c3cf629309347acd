"""This process's temporary folder, and the sweep of folders whose harness process is gone.

One folder per harness process, ``<tmp>/fsdp2-harness-<pid>-<start>-*`` (the start time tells a
reused pid apart), holds each run's rendezvous folder, a round trip's checkpoint and a note naming
multiprocessing's ``pymp-*`` folder. Both go at exit and on ``harness.run.launch.teardown.exit_now``;
after a SIGKILL the next harness process to launch ranks sweeps them (:func:`sweep_stale`)."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile

from harness.run.launch import teardown

__all__ = ["TEMP_PREFIX", "session_dir", "note_owned", "sweep_stale", "process_start_time"]

TEMP_PREFIX = "fsdp2-harness-"
_SESSION_RE = re.compile(re.escape(TEMP_PREFIX) + r"(\d+)-(\d+|x)-")
_OWNED = "owned"  # in a session folder: other temporary folders this process made, one a line
_SESSION: str | None = None


def process_start_time(pid: int) -> str | None:
    """The process's start time (clock ticks after boot, /proc/PID/stat field 22); None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(pid: int, start: str) -> bool:
    """Whether the process that made a session folder (pid, start time) still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: theirs, not ours to judge
    return start == "x" or process_start_time(pid) in (start, None)


def sweep_stale(tmp: str | None = None) -> list[str]:
    """Remove the session folders (and what they note) of harness processes gone; what was removed. Never raises."""
    tmp = tmp or tempfile.gettempdir()
    removed: list[str] = []
    try:
        names = os.listdir(tmp)
    except OSError:
        return removed
    for name in names:
        m = _SESSION_RE.match(name)
        if not m or _alive(int(m.group(1)), m.group(2)):
            continue
        folder = os.path.join(tmp, name)
        try:
            with open(os.path.join(folder, _OWNED)) as f:
                owned = [line.strip() for line in f if line.strip()]
        except OSError:
            owned = []
        for other in owned:  # only multiprocessing's folders beside this one
            if os.path.dirname(other) == tmp and os.path.basename(other).startswith("pymp-"):
                shutil.rmtree(other, ignore_errors=True)
                removed.append(other)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def session_dir() -> str:
    """This process's temporary folder (made on first use, removed at exit)."""
    global _SESSION
    if _SESSION is None or not os.path.isdir(_SESSION):
        pid = os.getpid()
        _SESSION = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{pid}-{process_start_time(pid) or 'x'}-")
        atexit.register(shutil.rmtree, _SESSION, True)
        teardown.at_hard_exit(shutil.rmtree, _SESSION, True)
    return _SESSION


def note_owned(path: str) -> None:
    """Note another temporary folder this process made, for :func:`sweep_stale` and ``teardown.exit_now``."""
    teardown.at_hard_exit(shutil.rmtree, path, True)
    with open(os.path.join(session_dir(), _OWNED), "a") as f:
        f.write(path + "\n")
