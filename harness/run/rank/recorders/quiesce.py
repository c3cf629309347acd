"""Wait until the rank's other threads are quiescent: the settle point before a memory snapshot.

Why: a collective's buffers belong to its ``Work``, and the backend's worker thread holds a
reference to the work while it runs it. gloo's worker (``ProcessGroupGloo::runLoop``, torch
2.13) marks the work completed, which lets the rank's thread return from ``wait()`` and go on,
and only then drops its own reference. The last reference to an all-gather or reduce-scatter
buffer can thus go away on the worker thread, whose storage finalizer (FSDPMemTracker counts a
storage until its weakref callback runs) needs the GIL. A snapshot taken before that thread ran
counts a buffer the step has already let go of; one taken after does not: the same step
observes two values.

The settle point: every other thread of the process has reached a blocking point of its own,
i.e. during a window in which this thread held no GIL, no other thread ran and none is
runnable. A worker that still had references to drop (or a finalizer to run) would have run in
that window. Read from Linux's ``/proc/self/task/<tid>/schedstat`` (time on CPU in ns) and
``stat`` (state ``R``); bounded by ``max_wait_s``, so a busy thread (a polling watchdog) costs
at most that. Elsewhere it only yields once.
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
    """Block until no other thread of this process ran during a ``window_s`` window in which
    this one released the GIL (``time.sleep``), and none is runnable; at most ``max_wait_s``.

    Returns:
        True when the process settled, False when ``max_wait_s`` passed first (or /proc is
        missing: then it only slept one window).
    """
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
