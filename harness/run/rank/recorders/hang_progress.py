"""Hang progress: each collective as its rank enters it and as it completes, holding no ``Work``.

How completion is counted: docs/reproducible-observations.md, "How hang progress counts a collective
completed".
"""

from __future__ import annotations

import threading
from typing import Any

import torch
import torch.distributed as dist

from .attribution import parse_fsdp_label

__all__ = ["HangProgress"]


class HangProgress:
    """Reports ``entered``, ``completed`` (only forward) and ``oldest_open`` records
    ``{"seq", "op", "unit", "phase"[, "group"]}`` to ``sink``."""

    def __init__(self, sink: Any) -> None:
        self.sink = sink
        self._local = threading.local()
        self._current: dict[str, Any] | None = None
        self._lock = threading.Lock()  # future callbacks run on the backend's threads
        self._unwatched: list[dict[str, Any]] = []  # "sync" records (no future to watch); no Work is kept
        self._last_completed = -1
        self._open: dict[int, dict[str, Any]] = {}  # seq -> record, entered and not completed

    def label(self, func, op_name: str, args, kwargs):
        """Run a ``profiler`` op and keep this thread's open ``record_function`` labels."""
        out = func(*args, **kwargs)
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        if op_name.startswith("_record_function_enter"):
            stack.append(str(args[0]) if args else "")
        elif op_name.startswith("_record_function_exit") and stack:
            stack.pop()
        return out

    def _unit(self) -> str | None:
        for name in reversed(getattr(self._local, "stack", None) or []):
            if name.startswith("FSDP::"):
                unit = parse_fsdp_label(name)[1]
                if unit is not None:
                    return unit
        return None

    def entered(self, seq: int, op: str, phase: str, group: list[int] | None = None) -> None:
        """Collective ``seq`` is about to run."""
        self._current = {"seq": seq, "op": op, "unit": self._unit(), "phase": phase}
        if group is not None:
            self._current["group"] = group
        self.sink.entered(self._current)
        with self._lock:
            self._open[seq] = self._current
            if len(self._open) == 1:  # nothing older is open: this one is now the oldest
                self.sink.oldest_open(self._current)

    def issued(self, out: Any) -> None:
        """The op returned ``out``: watch its works' futures, or mark the record ``"sync"``."""
        record, self._current = self._current, None
        if record is None:
            return
        futures = _futures(out)
        if futures is None:
            record["sync"] = True
            with self._lock:
                self._unwatched.append(record)
                self.sink.entered(record)  # the slots carry the mark too
                if self._open and min(self._open) == record["seq"]:
                    self.sink.oldest_open(record)
            return
        remaining = [len(futures)]

        def done(future: Any) -> None:
            try:
                future.value()  # raises if the collective failed
            except Exception:  # noqa: BLE001 - a failed collective stays open
                return
            with self._lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                self._completed(record)

        for future in futures:
            future.add_done_callback(done)

    def raised(self) -> None:
        """The op raised (gloo refusing PREMUL_SUM): it is no longer open, and stays the last entered."""
        record, self._current = self._current, None
        if record is not None:
            with self._lock:
                self._close(record["seq"])

    def _close(self, seq: int) -> None:
        """``seq`` is no longer open; report the new oldest open one (under the lock)."""
        oldest = min(self._open, default=None)
        self._open.pop(seq, None)
        if seq == oldest:
            self.sink.oldest_open(self._open[min(self._open)] if self._open else None)

    def _completed(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._close(record["seq"])
            if record["seq"] <= self._last_completed:
                return
            self._last_completed = record["seq"]
            self.sink.completed(record)

    def settle(self) -> None:
        """A new phase began: every earlier collective was waited on, so the ``"sync"`` ones are completed."""
        with self._lock:
            records, self._unwatched = self._unwatched, []
        for record in sorted(records, key=lambda r: r["seq"]):
            self._completed(record)

    def stop(self) -> None:
        pass


def _futures(out: Any) -> list[Any] | None:
    """The futures of the ``Work`` objects a c10d op handed back; None when there is nothing to watch."""
    found = []
    for value in out if isinstance(out, (tuple, list)) else [out]:
        if not isinstance(value, torch.ScriptObject):
            continue
        try:
            work = dist.distributed_c10d.Work.unbox(value)
        except Exception:  # noqa: BLE001 - not a Work
            continue
        if work is None:  # the backend waited in C++ and handed back no Work (NCCL, async_op=False)
            return None
        try:
            found.append(work.get_future())
        except RuntimeError:  # "Work::getFuture not implemented" (gloo's reduce_scatter_tensor)
            return None
    return found or None
