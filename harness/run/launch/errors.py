"""How a run fails: :class:`RunError` (a rank raised or died, or the world is wrong) and
:class:`RunTimeout` (the deadline passed), and :func:`exception_line`, a traceback's one line."""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["RunError", "RunTimeout", "exception_line"]


class RunError(RuntimeError):
    """A run failed; ``rank`` is the failing rank (None if no one rank's), ``traceback`` its text."""

    def __init__(self, message: str, *, rank: int | None = None, traceback: str = "") -> None:
        super().__init__(message)
        self.rank = rank
        self.traceback = traceback

    @classmethod
    def rank_raised(cls, rank: int, tb: str, *, who: str = "rank", after: str = "") -> "RunError":
        """A rank's exception: a first line naming rank and exception, ``tb``, then ``after``."""
        return cls(f"{who} {rank} failed: {exception_line(tb)}\n{tb}{after}", rank=rank, traceback=tb)


class RunTimeout(RunError):
    """A run did not finish before the caller's timeout: ``pending`` ranks, the ``phases`` they were in,
    the hang's ``verdict`` (``harness.run.launch.hang.diagnose``), each rank's ``progress``, and the
    NCCL ``flight_recorder`` dumps."""

    def __init__(
        self,
        message: str,
        *,
        pending: list[int],
        phases: Mapping[int, str],
        verdict: str = "",
        progress: Mapping[int, Any] | None = None,
        flight_recorder: list[str] | None = None,
    ) -> None:
        super().__init__(message, rank=pending[0] if pending else None)
        self.pending = pending
        self.phases = dict(phases)
        self.verdict = verdict
        self.progress = dict(progress or {})  # rank -> {"entered", "completed"} (last collective records)
        self.flight_recorder = list(flight_recorder or [])  # NCCL flight recorder dumps, one per rank


def exception_line(tb: str) -> str:
    """The exception a traceback text ends with, and its notes, on one line (at most 300 characters)."""
    lines = tb.rstrip().splitlines()
    tail: list[str] = []
    for line in reversed(lines):  # the exception and its notes come after the last (indented) frame line
        if line.startswith(" ") or line.startswith("Traceback (most recent call last)"):
            break
        tail.append(line.strip())
    text = " ".join(reversed(tail)) or (lines[-1].strip() if lines else "")
    return text if len(text) <= 300 else text[:297] + "..."
