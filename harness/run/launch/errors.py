"""How a run fails: :class:`RunError` (a rank raised or died, or the world is wrong) and
:class:`RunTimeout` (the deadline passed), and :func:`exception_line`, a traceback's one line."""

from __future__ import annotations

from typing import Any, Mapping

__all__ = ["RunError", "RunTimeout", "exception_line"]


class RunError(RuntimeError):
    """A run failed. ``rank`` is the failing rank (None if not one rank's fault); the message
    names it and carries its traceback text (``traceback``)."""

    def __init__(self, message: str, *, rank: int | None = None, traceback: str = "") -> None:
        super().__init__(message)
        self.rank = rank
        self.traceback = traceback

    @classmethod
    def rank_raised(cls, rank: int, tb: str, *, who: str = "rank", after: str = "") -> "RunError":
        """A rank's exception: its first line names the rank and the exception (and phase), the
        traceback ``tb`` follows, then ``after`` (a joined world's diagnosis)."""
        return cls(f"{who} {rank} failed: {exception_line(tb)}\n{tb}{after}", rank=rank, traceback=tb)


class RunTimeout(RunError):
    """A run did not finish before the caller's timeout. ``pending`` lists the ranks that
    had not finished, ``phases`` the phase each was last in (a name of
    ``harness.contract.names.RANK_PHASES``); ``verdict`` says which rank is stuck where
    (``harness.run.launch.hang.diagnose``), ``progress`` holds each rank's last collective
    entered and completed, ``flight_recorder`` the NCCL flight recorder dumps."""

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
    """The exception a traceback text ends with, and its notes, on one line (cut at 300
    characters): what the first line of a failed run says; the frames follow it."""
    lines = tb.rstrip().splitlines()
    tail: list[str] = []
    for line in reversed(lines):  # the exception and its notes come after the last (indented) frame line
        if line.startswith(" ") or line.startswith("Traceback (most recent call last)"):
            break
        tail.append(line.strip())
    text = " ".join(reversed(tail)) or (lines[-1].strip() if lines else "")
    return text if len(text) <= 300 else text[:297] + "..."
