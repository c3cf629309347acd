"""Every rank process this process started, stopped on the way out, however it goes out.

The launcher registers each rank the moment its pid is known and forgets it once joined. A normal
unwinding calls :func:`stop`; :func:`exit_now` (a second Ctrl-C, or the CLI's exit bound) kills
every registered rank, runs the :func:`at_hard_exit` clean-ups and calls ``os._exit``;
:func:`wait_resource_tracker` bounds the wait for multiprocessing's resource tracker, which a rank
nobody stopped kept alive for minutes. Only small standard imports: the CLI's signal handlers use it."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

__all__ = [
    "STOP_GRACE_S",
    "TRACKER_WAIT_S",
    "register",
    "forget",
    "registered",
    "stop",
    "at_hard_exit",
    "cancel_hard_exit",
    "on_signal_arrival",
    "signal_arrived",
    "announce_exit",
    "exit_now",
    "wait_resource_tracker",
]

STOP_GRACE_S = 1.0
"""Seconds a rank gets to end after SIGTERM before it is sent SIGKILL."""
TRACKER_WAIT_S = 2.0
"""Seconds the exit waits for multiprocessing's resource tracker before leaving it behind."""

_RANKS: dict[int, object] = {}  # pid -> multiprocessing.Process, every rank started and not yet joined
_HARD_EXIT: list[tuple[Callable[..., object], tuple[object, ...]]] = []
_ANNOUNCE: list[Callable[[int], object]] = []
_ARRIVAL: list[Callable[[int], object]] = []


def register(process: object) -> None:
    """Note a started rank (a ``multiprocessing.Process`` whose ``start()`` returned)."""
    _RANKS[process.pid] = process


def forget(process: object) -> None:
    """Drop a rank that has been joined."""
    _RANKS.pop(process.pid, None)


def registered() -> list[int]:
    """The pids of the ranks started and not yet forgotten, in start order."""
    return list(_RANKS)


def stop(processes: list[object], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM every live process, SIGKILL those alive after ``grace_s`` s, join and forget them all."""
    for p in processes:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in processes:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in processes:
        if p.is_alive():
            p.kill()
    for p in processes:
        p.join(timeout=5)  # after SIGKILL: as long as the kernel takes to reap it
        if not p.is_alive():
            forget(p)


def at_hard_exit(function: Callable[..., object], *args: object) -> None:
    """Run ``function(*args)`` in :func:`exit_now`, as ``atexit`` would on a normal exit."""
    _HARD_EXIT.append((function, args))


def cancel_hard_exit(function: Callable[..., object], *args: object) -> None:
    """Undo one :func:`at_hard_exit` with the same function and arguments (no error if absent)."""
    try:
        _HARD_EXIT.remove((function, args))
    except ValueError:
        pass


def on_signal_arrival(function: Callable[[int], object]) -> None:
    """Have :func:`signal_arrived` call ``function(signum)`` (the CLI arms its exit bound)."""
    _ARRIVAL.append(function)


def signal_arrived(signum: int) -> None:
    """A held Ctrl-C or SIGTERM arrived: tell the CLI now, so its exit bound runs from the arrival."""
    for function in _ARRIVAL:
        function(signum)


def announce_exit(function: Callable[[int], object]) -> None:
    """Have :func:`exit_now` call ``function(status)`` first (the CLI's ``interrupted`` line)."""
    _ANNOUNCE.append(function)


def exit_now(status: int) -> None:
    """End the process with ``status`` at once: :func:`announce_exit` calls, SIGKILL to every registered
    rank, :func:`at_hard_exit` clean-ups (errors ignored), ``os._exit``."""
    try:
        for announce in _ANNOUNCE:
            try:
                announce(status)
            except Exception:  # noqa: BLE001 - exiting anyway
                pass
        for pid in list(_RANKS):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for function, args in reversed(_HARD_EXIT):
            try:
                function(*args)
            except Exception:  # noqa: BLE001 - exiting anyway
                pass
    finally:
        os._exit(status)


def wait_resource_tracker(limit_s: float = TRACKER_WAIT_S) -> bool:
    """Stop multiprocessing's resource tracker as its ``_stop`` does, but wait at most ``limit_s`` s; True
    when it ended in time or was not running. Private names: no public way to stop it."""
    from multiprocessing import resource_tracker

    tracker = resource_tracker._resource_tracker
    fd, pid = getattr(tracker, "_fd", None), getattr(tracker, "_pid", None)
    if fd is None or pid is None:
        return True
    tracker._fd = tracker._pid = None
    try:
        os.close(fd)
    except OSError:
        pass
    deadline = time.monotonic() + limit_s
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return True
        if done:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
