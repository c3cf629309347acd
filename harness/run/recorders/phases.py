"""The step's phases and their wall times.

The rank step moves through ``setup`` (model + ``fully_shard``), ``forward``, ``backward``
and ``optimizer``; recorders that attribute events to a phase read :attr:`Phases.current`.
Other named intervals (``replica`` for the numerics reference) are timed the same way but are
not phases of the FSDP step: nothing is recorded while they run.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator

PHASES = ("setup", "forward", "backward", "optimizer")


class Phases:
    """Current phase and seconds spent per named interval.

    Args:
        sync: called before each clock read (``torch.cuda.synchronize`` on CUDA, so a phase's
            time includes its kernels); None on CPU.
        on_enter: called with the phase name on entry (the launcher shows a hung rank's last
            phase with it); None for nothing.
        before_enter: called with the phase name before it starts, inside the timed interval
            (tests inject faults here).
    """

    def __init__(
        self,
        sync: Callable[[], None] | None = None,
        on_enter: Callable[[str], None] | None = None,
        before_enter: Callable[[str], None] | None = None,
    ) -> None:
        self.current = "other"
        self.timings_s: dict[str, float] = {}
        self._sync = sync
        self._on_enter = on_enter
        self._before_enter = before_enter

    def _now(self) -> float:
        if self._sync is not None:
            self._sync()
        return time.perf_counter()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Run the block as phase ``name``; its wall time is added to ``timings_s[name]``."""
        previous = self.current
        if self._on_enter is not None:
            self._on_enter(name)
        start = self._now()
        self.current = name
        try:
            if self._before_enter is not None:
                self._before_enter(name)
            yield
        finally:
            self.timings_s[name] = self.timings_s.get(name, 0.0) + (self._now() - start)
            self.current = previous
