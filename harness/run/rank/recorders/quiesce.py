"""Wait until the rank's other threads are quiescent: the settle point before a memory snapshot.

Why: docs/reproducible-observations.md. Read from Linux's ``/proc/self/task``; elsewhere it only
yields once.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["settle_threads"]

_TASKS = "/proc/self/task"


def _activity(me: int) -> tuple[tuple[int, str, str], ...] | None:
    """(tid, run time, state) of every other thread; None when /proc cannot tell."""
    try:
        tids = sorted(int(t) for t in os.listdir(_TASKS))
    except OSError:
        return None
    seen = []
    for tid in tids:
        if tid == me:
            continue
        try:
            with open(f"{_TASKS}/{tid}/schedstat") as f:
                run_ns = f.read().split()[0]
            with open(f"{_TASKS}/{tid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):  # the thread ended meanwhile
            continue
        seen.append((tid, run_ns, state))
    return tuple(seen)


def settle_threads(max_wait_s: float = 0.05, window_s: float = 0.001) -> bool:
    """Block until no other thread ran during a ``window_s`` sleep and none is runnable; False after
    ``max_wait_s`` or without /proc."""
    me = threading.get_native_id()
    deadline = time.perf_counter() + max_wait_s
    before = _activity(me)
    while True:
        time.sleep(window_s)
        if before is None:
            return False
        now = _activity(me)
        if now == before and not any(state == "R" for _, _, state in now):
            return True
        if time.perf_counter() >= deadline:
            return False
        before = now
