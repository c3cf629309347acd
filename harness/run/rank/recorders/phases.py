"""The step's phases and their wall times; :data:`PHASE_HOOKS` is for tests only (``tests.support.faults``)."""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator

from harness.contract.names import BODY_PHASES  # the one phase table (RANK_PHASES), with the loader's

# TESTS ONLY. Each is called with the phase name at the start of every phase, inside its timed
# interval, after ``on_enter`` (so a launcher already shows the phase a hook hangs in). The
# local launcher (``harness.run.launch.local.run_local``) carries the hooks registered in the calling
# process to its rank processes, so they must pickle (module-level classes or functions).
# Production code never registers one.
PHASE_HOOKS: list[Callable[[str], None]] = []


class Phases:
    """Current phase and seconds per named interval; ``sync`` before each clock read (CUDA),
    ``on_enter(phase)`` on entry."""

    def __init__(
        self,
        sync: Callable[[], None] | None = None,
        on_enter: Callable[[str], None] | None = None,
    ) -> None:
        self.current = "other"
        self.timings_s: dict[str, float] = {}
        self.failed_in: str | None = None  # the innermost phase an exception left first
        self._sync = sync
        self._on_enter = on_enter

    def _now(self) -> float:
        if self._sync is not None:
            self._sync()
        return time.perf_counter()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Run the block as phase ``name``, adding its wall time to ``timings_s``; ValueError unless
        ``name`` is in ``harness.contract.names.BODY_PHASES``."""
        if name not in BODY_PHASES:
            raise ValueError(f"phase {name!r}: expected one of harness.contract.names.BODY_PHASES {BODY_PHASES}")
        previous = self.current
        if self._on_enter is not None:
            self._on_enter(name)
        start = self._now()
        self.current = name
        try:
            for hook in PHASE_HOOKS:
                hook(name)
            yield
        except BaseException:
            if self.failed_in is None:
                self.failed_in = name
            raise
        finally:
            self.timings_s[name] = self.timings_s.get(name, 0.0) + (self._now() - start)
            self.current = previous
