"""Make one rank of a torchrun world hang, for tests of how a joined run ends.

The local launcher carries ``tests.support.faults`` hooks to its ranks; torchrun's ranks are
processes of their own, so a test puts this folder first on ``PYTHONPATH`` with :data:`RANK`
set to ``"<rank>:<phase>"``: every Python started then (torchrun's agents, their ranks)
registers ``Fault(rank, phase, kind="hang")`` at start-up, and the rank of that number hangs
at the start of that phase (its peers then wait in their next collective).
"""

from __future__ import annotations

import os

RANK = "FSDP2_TESTS_HANG_RANK"

if os.environ.get(RANK):
    from harness.run.rank.recorders.phases import PHASE_HOOKS
    from tests.support.faults import Fault

    _rank, _phase = os.environ[RANK].split(":")
    PHASE_HOOKS.append(Fault(rank=int(_rank), phase=_phase, kind="hang"))
