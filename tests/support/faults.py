"""TESTS ONLY: make one rank misbehave at the start of a phase, to test how runs fail.

Nothing in the harness imports this module; tests do::

    from tests.support.faults import Fault, injected

    with injected(Fault(rank=2, phase="forward", kind="raise")):
        run_local(setup, backend="gloo", timeout_s=120)

:func:`injected` registers the fault in ``harness.run.rank.recorders.phases.PHASE_HOOKS`` for the
block; the local launcher carries that list to its rank processes (pickled), and each rank's
:class:`~harness.run.rank.recorders.phases.Phases` calls it at the start of every phase. The
in-process fake backend (``harness.run.launch.simulated``) sees it directly.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import Iterator

from harness.run.rank.recorders.phases import PHASE_HOOKS

__all__ = ["FAULT_KINDS", "Fault", "injected"]

FAULT_KINDS = ("raise", "hang", "exit")


@dataclass(frozen=True)
class Fault:
    """Rank ``rank`` misbehaves at the start of phase ``phase``.

    Attributes:
        rank: the global rank (``torch.distributed.get_rank()`` in the rank's process).
        phase: "setup", "replica", "forward", "backward" or "optimizer"; the first start of it.
        kind: ``raise`` a RuntimeError; ``hang`` forever (its peers block in their next
            collective); ``exit`` the process at once with ``code`` (``os._exit``: no
            traceback, no message to the launcher).
        code: the exit status for ``exit``.

    Raises:
        ValueError: ``kind`` is not one of :data:`FAULT_KINDS`.
    """

    rank: int
    phase: str = "forward"
    kind: str = "raise"
    code: int = 3

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"fault kind {self.kind!r}: expected one of {FAULT_KINDS}")

    def __call__(self, phase: str) -> None:
        if phase != self.phase:
            return
        import torch.distributed as dist

        if dist.get_rank() != self.rank:
            return
        if self.kind == "raise":
            raise RuntimeError(f"injected fault: rank {self.rank} raises at the start of {phase}")
        if self.kind == "hang":
            while True:
                time.sleep(3600)
        os._exit(self.code)


@contextlib.contextmanager
def injected(fault: Fault) -> Iterator[Fault]:
    """Register ``fault`` as a phase hook for the block (runs started inside it carry it)."""
    PHASE_HOOKS.append(fault)
    try:
        yield fault
    finally:
        PHASE_HOOKS.remove(fault)
