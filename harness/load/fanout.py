"""Spread a pure function over items across forked processes, results yielded in item order.

``validate`` of many specs is CPU-bound Python (YAML composition, JSON Schema, the check kinds'
rules): on two cores, half the specs are loaded in a forked copy of the process while the
process itself loads the other half. ``multiprocessing``'s import alone takes about 40 ms here,
a tenth of the half second that validating every shipped spec may take, so this uses
``os.fork`` and one pipe per child directly.

A fork is made only where it is safe and pays: ``os.fork`` exists, more than one CPU is ours,
there are enough items, and the process runs no other thread (a thread holding a lock at the
fork, the import lock for one, would leave the child waiting on it forever).
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

MIN_ITEMS_PER_PROCESS = 6
"""Fewest items worth a process of their own: a fork of the validate process and its pipe cost
a few milliseconds, about what one spec costs to load."""


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one, else ``os.cpu_count``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def process_count(n_items: int, cpus: int | None = None) -> int:
    """How many processes (this one included) :func:`fan_out` spreads ``n_items`` over: 1 where
    forking is unavailable or unsafe, else at most one per CPU and one per
    :data:`MIN_ITEMS_PER_PROCESS` items."""
    if not _can_fork():
        return 1
    cpus = usable_cpus() if cpus is None else cpus
    return max(1, min(cpus, n_items // MIN_ITEMS_PER_PROCESS))


def _can_fork() -> bool:
    """``os.fork`` exists and no other thread runs (one holding a lock at the fork, the import
    lock for one, would leave the child waiting on it forever)."""
    return hasattr(os, "fork") and threading.active_count() == 1


def chunks(weights: Sequence[float], n: int) -> list[range]:
    """``n`` contiguous index ranges of about equal total weight (a range may be empty)."""
    total = sum(weights) or 1
    bounds, acc, start = [], 0.0, 0
    for i, w in enumerate(weights):
        acc += w
        while len(bounds) < n - 1 and acc >= total * (len(bounds) + 1) / n:
            bounds.append(i + 1)
    bounds += [len(weights)] * (n - 1 - len(bounds))
    out = []
    for end in [*bounds, len(weights)]:
        out.append(range(start, max(start, end)))
        start = max(start, end)
    return out


def fan_out(fn: Callable[[T], Any], items: Sequence[T], weights: Sequence[float] | None = None,
            processes: int | None = None) -> Iterator[Any]:
    """Yield ``fn(item)`` for every item, in order.

    The items are cut into contiguous chunks of about equal weight (``weights``, e.g. file sizes
    in bytes; equal if None), one per process (``processes``; default :func:`process_count`).
    This process computes the first chunk, yielding as it goes, then the forked children's
    results in order. ``fn``'s results cross a pipe as JSON: they must be JSON values, and come
    back as JSON gives them (a tuple as a list).

    Where a child's ``fn`` raises, or the child ends early, this process computes that item
    itself, so an exception is raised here, at its item, as without children. Children are
    killed and reaped when the iterator is closed or collected, finished or not (use
    ``contextlib.closing``); a child never writes to stdout or runs exit handlers.
    """
    n = process_count(len(items)) if processes is None else max(1, min(processes, len(items)))
    if n < 2:
        yield from (fn(item) for item in items)
        return
    parts = chunks(weights if weights is not None else [1] * len(items), n)
    # The first item before any fork: what it sets up once (lazy imports, a compiled schema,
    # regular expressions) the children inherit instead of each doing it again.
    yield fn(items[0])
    if not _can_fork():  # fn started a thread
        yield from (fn(item) for item in items[1:])
        return
    children: list[tuple[int | None, int | None, range]] = []  # (pid, read end; None where the fork failed, indices)
    sys.stdout.flush()
    sys.stderr.flush()
    gc.freeze()  # the collector's passes over what exists now would copy those pages into each child
    try:
        for part in (p for p in parts[1:] if p):
            children.append(_fork_child(fn, items, part, [fd for _, fd, _ in children if fd is not None]))
        for i in parts[0][1:]:
            yield fn(items[i])
        for k, (pid, read_end, part) in enumerate(children):
            results = {}
            if read_end is not None:
                children[k] = (pid, None, part)
                results = _read_results(read_end)
            for i in part:
                yield results[i] if i in results else fn(items[i])
    finally:
        gc.unfreeze()
        for pid, read_end, _ in children:
            if read_end is not None:
                os.close(read_end)
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGKILL)  # done already, unless this iterator was closed early
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)


def _fork_child(fn: Callable[[T], Any], items: Sequence[T], part: range,
                open_ends: list[int]) -> tuple[int | None, int | None, range]:
    """Fork a child computing ``part``: (its pid, the read end of its results' pipe, ``part``),
    or (None, None, ``part``) where the fork fails (no process to spare: this process computes it)."""
    read_end, write_end = os.pipe()
    # Ctrl-C or SIGTERM between the fork and the child's own handler would run the caller's
    # code in the child, and one landing in the parent before the child is recorded would
    # leave it unreaped: held until each side is ready.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        try:
            pid = os.fork()
        except OSError:  # EAGAIN, ENOMEM
            os.close(read_end)
            os.close(write_end)
            return None, None, part
        if pid == 0:
            _child(fn, items, part, read_end, write_end, open_ends, held)
        os.close(write_end)
        return pid, read_end, part
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _child(fn: Callable[[T], Any], items: Sequence[T], part: range, read_end: int, write_end: int,
           inherited: list[int], held: set[signal.Signals]) -> None:
    """A forked child's whole life: compute ``part``, write one JSON line per result, exit."""
    status = 1
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a Ctrl-C lands here from now on
        for fd in (read_end, *inherited):  # read ends: the parent's, not this child's to hold open
            os.close(fd)
        with os.fdopen(write_end, "w", encoding="utf-8") as out:
            for i in part:
                try:
                    result = fn(items[i])
                except Exception:  # noqa: BLE001 - computed again by the parent, where it is raised
                    continue
                out.write(json.dumps([i, result]) + "\n")
                out.flush()  # a child killed later keeps what it finished
        status = 0
    except BaseException:  # noqa: BLE001 - Ctrl-C, SIGTERM, a closed pipe: the parent decides what to say
        pass
    finally:
        os._exit(status)  # never the parent's atexit handlers, buffered output or pytest's teardown


def _read_results(read_end: int) -> dict[int, Any]:
    """Every complete result line a child wrote before it exited."""
    results = {}
    with os.fdopen(read_end, "r", encoding="utf-8") as lines:
        for line in lines:
            if line.endswith("\n"):  # a child killed mid-write leaves half a line
                i, result = json.loads(line)
                results[i] = result
    return results
