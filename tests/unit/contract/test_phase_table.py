"""One phase table (``harness.contract.names.RANK_PHASES``): the launcher's shared-memory codes,
the rank body's phases, the progress line and the simulated world all derive from it, and a name
that is not in it raises instead of being reported as another phase.

The defect this guards against: a rank hung in ``clip_grad_norm``, ``zero_grad``, ``unshard`` or
``reshard`` was reported as "starting" (the launcher's own table lacked them and fell back to
its first code silently), and the timeout message then blamed start-up. The same on real ranks:
``tests/integration/test_hang.py`` (a rank hung in ``clip_grad_norm``).
"""

from __future__ import annotations

import multiprocessing
import re

import pytest

from harness.contract.names import BODY_PHASES, PHASES, RANK_PHASES, rank_phase_code
from harness.report.progress import STAGES, stage_of
from harness.run.launch.phase_trail import PhaseTrail
from harness.run.rank.recorders.phases import Phases
from tests.support import REPO

HARNESS = REPO / "harness"
SCHEDULE_PHASES = ("zero_grad", "unshard", "reshard", "clip_grad_norm")


def test_the_step_phases_are_the_rank_phases_in_the_same_order():
    assert [p for p in RANK_PHASES if p in PHASES] == list(PHASES)
    assert set(BODY_PHASES) <= set(RANK_PHASES) and "replica" in BODY_PHASES
    assert RANK_PHASES[0] == "starting" and RANK_PHASES[-1] == "done"
    assert len(set(RANK_PHASES)) == len(RANK_PHASES)


@pytest.mark.parametrize("phase", SCHEDULE_PHASES + ("state_dict", "bandwidth", "replica"))
def test_the_launchers_trail_reports_every_phase_by_its_name(phase):
    trail = PhaseTrail(multiprocessing.get_context("spawn"), 2)
    trail.enter(1, "init_process_group")
    trail.enter(1, "setup")
    trail.enter(1, phase)
    assert trail.current(1) == phase
    assert trail.since(1, 0, trail.counts()[1]) == ["init_process_group", "setup", phase]
    assert trail.current(0) == "starting"


def test_an_unknown_phase_name_raises_everywhere():
    trail = PhaseTrail(multiprocessing.get_context("spawn"), 1)
    with pytest.raises(ValueError, match="'warmup' is not in harness.contract.names.RANK_PHASES"):
        trail.enter(0, "warmup")
    assert trail.counts() == [0]  # nothing was written
    with pytest.raises(ValueError, match="RANK_PHASES"):
        rank_phase_code("observe")
    with pytest.raises(ValueError, match="BODY_PHASES"):
        with Phases().phase("warmup"):
            pass
    with pytest.raises(ValueError, match="RANK_PHASES"):
        stage_of("warmup")


def test_the_progress_line_has_a_stage_for_every_rank_phase_in_order():
    stages = [stage_of(p) for p in RANK_PHASES]
    assert stages == sorted(stages) and stages[-1] == len(STAGES) - 1
    assert stage_of("clip_grad_norm") > stage_of("backward") > stage_of("starting") == 0


def test_every_phase_the_harness_enters_is_in_the_table():
    """Every literal phase name in the harness's source (``.phase("x"``, ``on_phase("x")``,
    ``instruments.phase("x"``) is a rank phase: a new phase cannot be added without the table."""
    pattern = re.compile(r"""(?:\.phase|on_phase)\(\s*["']([a-z_]+)["']""")
    found = {m.group(1) for path in HARNESS.rglob("*.py") for m in pattern.finditer(path.read_text())}
    assert set(SCHEDULE_PHASES) | {"setup", "forward", "backward", "optimizer", "done"} <= found  # the scan works
    assert found <= set(RANK_PHASES), found - set(RANK_PHASES)
