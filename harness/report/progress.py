"""Progress of a run on a terminal: launching ranks, forward, backward, optimizer, checking.

:class:`RunProgress` turns each rank's phase reports (``harness.run.launch.phase_trail``, or the
simulated backend's calls) into one transient ``rich`` line per spec: the slowest rank's phase, a
bar over all ranks, elapsed time. Only on a terminal and not under pytest."""

from __future__ import annotations

import os
from typing import Any, Mapping

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from harness.contract.names import RANK_PHASES, rank_phase_code

__all__ = ["RunProgress", "STAGES", "stage_of", "progress_enabled"]

# How a user reads the rank phases that are not named after the step's own operations.
_READ_AS = {
    "starting": "launching ranks",
    "init_process_group": "launching ranks",
    "setup": "building the model and fully_shard",
    "replica": "replica for numerics",
    "state_dict": "state-dict round trip and calls",
    "bandwidth": "timing collectives",
}

#: What a user reads for each rank phase (``harness.contract.names.RANK_PHASES``), in order.
STAGES = tuple(dict.fromkeys(_READ_AS.get(p, p) for p in RANK_PHASES))


def stage_of(phase: str) -> int:
    """The index in :data:`STAGES` of a rank phase (ValueError if not in ``RANK_PHASES``)."""
    rank_phase_code(phase)
    return STAGES.index(_READ_AS.get(phase, phase))


def progress_enabled(console: Console) -> bool:
    """True where a progress line helps: a terminal, not a pytest run."""
    return console.is_terminal and "PYTEST_CURRENT_TEST" not in os.environ


class RunProgress:
    """One spec's progress line, a context manager: feed :meth:`ranks` (the ``on_progress`` callback)
    and :meth:`checking`. ``world_size``: ranks followed (simulated: the observed ones); ``enabled``:
    default :func:`progress_enabled`."""

    def __init__(self, console: Console, label: str, world_size: int, *, enabled: bool | None = None) -> None:
        self.label, self.world_size = label, max(1, world_size)
        self.enabled = progress_enabled(console) if enabled is None else enabled
        self._progress = (
            Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[ranks]}"),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            )
            if self.enabled
            else None
        )
        self._task: Any = None
        self.last: dict[int, str] = {}

    def __enter__(self) -> "RunProgress":
        if self._progress is not None:
            self._progress.start()
            self._task = self._progress.add_task(
                f"{self.label}: {STAGES[0]}", total=self.world_size * (len(STAGES) - 1), ranks=""
            )
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()

    def ranks(self, phases: Mapping[int, str]) -> None:
        """Every followed rank's current phase (rank -> phase name)."""
        self.last = dict(phases)
        if self._progress is None or not phases:
            return
        stages = {r: stage_of(p) for r, p in phases.items()}
        slowest = min(stages.values())
        behind = sorted(r for r, s in stages.items() if s == slowest)
        who = f"rank {behind[0]}" if len(behind) == 1 else f"{len(behind)} ranks"
        self._progress.update(
            self._task,
            description=f"{self.label}: {STAGES[slowest]}",
            total=len(stages) * (len(STAGES) - 1),
            completed=sum(stages.values()),
            ranks=f"{who} in {STAGES[slowest]}",
        )

    def checking(self, entries: int) -> None:
        """The run is over; the entries are being checked."""
        if self._progress is not None:
            total = self._progress.tasks[0].total
            self._progress.update(
                self._task, description=f"{self.label}: checking {entries} entries", completed=total, ranks=""
            )
