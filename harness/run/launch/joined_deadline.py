"""The run's deadline in a joined world (torchrun): diagnose a hang before NCCL's watchdog ends it.

No launcher supervises torchrun's ranks, and NCCL's watchdog aborts from a C++ thread, so no Python
diagnosis would print. So the process group's timeout is the run's plus :data:`JOINED_GRACE_S`, and
:class:`JoinedDeadline` fires at the run's timeout: it prints the verdict
(:func:`harness.run.launch.hang.diagnose`) and the flight recorder's dumps, and exits with status 2."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable, Mapping

from harness.run.launch.flight_recorder import device_view
from harness.run.launch.hang import diagnose, per_rank_lines

__all__ = ["JOINED_GRACE_S", "JoinedDeadline", "deadline_message", "process_group_timeout_s"]

JOINED_GRACE_S = 60.0
"""Seconds the process group's timeout exceeds the run's: the diagnosis and the flight
recorder's dump (up to 5 s) happen first."""

EXIT_STATUS = 2  # a run that failed (the CLI's status for a run error)


def process_group_timeout_s(timeout_s: float) -> float:
    """The joined process group's timeout (s): longer than ``timeout_s``, so :class:`JoinedDeadline` fires first."""
    return timeout_s + JOINED_GRACE_S


def deadline_message(rank: int, timeout_s: float, progress: Mapping[int, Mapping[str, Any]], dumps: list[str]) -> str:
    """The rank, the verdict and every rank's collectives (``progress``), and the dumps."""
    lines = [f"rank {rank}: the run did not finish within its timeout of {timeout_s:g} s (joined world)"]
    if any(p.get("entered") for p in progress.values()):
        lines += [f"Diagnosis: {diagnose(progress)}.", *per_rank_lines(progress)]
    else:
        lines.append("no rank entered a collective")
    if dumps:
        lines.append(f"NCCL flight recorder dumps (read with torchfrtrace): {', '.join(dumps)}")
        lines += device_view(dumps)
    return "\n".join(lines) + "\n"


STORE_HOST_LINGER_S = 5.0
"""Seconds rank 0 waits after its diagnosis before ending: every rank's deadline fires at about the
same time, and in a world started with ``env://`` (MASTER_ADDR) rank 0 hosts the store the others
read their verdict from."""


class JoinedDeadline:
    """A daemon timer firing ``timeout_s`` s after :meth:`start` unless cancelled (a context manager too).
    ``read_progress``: every rank's collectives; ``dump``: the flight recorder's files (None on gloo);
    ``end``: ``os._exit`` (the main thread is blocked); ``linger``: rank 0's wait, :data:`STORE_HOST_LINGER_S`."""

    def __init__(
        self,
        timeout_s: float,
        rank: int,
        read_progress: Callable[[], Mapping[int, Mapping[str, Any]]],
        dump: Callable[[], list[str]] | None = None,
        write: Callable[[str], Any] | None = None,
        end: Callable[[int], Any] = os._exit,
        linger: Callable[[float], Any] = time.sleep,
    ) -> None:
        self.timeout_s, self.rank = timeout_s, rank
        self._read, self._dump, self._end, self._linger = read_progress, dump, end, linger
        self._write = write or (lambda text: (sys.stderr.write(text), sys.stderr.flush()))
        self._timer = threading.Timer(timeout_s, self._fire)
        self._timer.daemon = True
        self._timer.name = "fsdp2-joined-deadline"

    def start(self) -> "JoinedDeadline":
        self._timer.start()
        return self

    def cancel(self) -> None:
        self._timer.cancel()

    def __enter__(self) -> "JoinedDeadline":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.cancel()

    def _fire(self) -> None:
        try:
            progress = self._read()
        except Exception:  # the store went away: say what is known
            progress = {}
        dumps = self._dump() if self._dump is not None else []
        self._write(deadline_message(self.rank, self.timeout_s, progress, dumps))
        if self.rank == 0:  # a plain env:// world's store lives in rank 0: the peers' deadlines still read it
            self._linger(STORE_HOST_LINGER_S)
        self._end(EXIT_STATUS)
