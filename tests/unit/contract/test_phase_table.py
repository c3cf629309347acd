"""One phase table (``harness.contract.names.RANK_PHASES``): the launcher's shared-memory codes,
the rank body's phases, the progress line and the simulated world all derive from it, and a name
that is not in it raises instead of being reported as another phase.

The defect this guards against: a rank hung in ``clip_grad_norm``, ``zero_grad``, ``unshard`` or
``reshard`` was reported as "starting" (the launcher's own table lacked them and fell back to
its first code silently), and the timeout message then blamed start-up.
"""

from __future__ import annotations

import multiprocessing
import re
import time

import pytest

from harness.contract.names import BODY_PHASES, PHASES, RANK_PHASES, rank_phase_code
from harness.report.progress import STAGES, stage_of
from harness.run.launch.phase_trail import PhaseTrail
from harness.run.recorders.phases import Phases
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


CLIP = {
    "model": {
        "config": "walkthrough",
        "body": "decoder_layers",
        "dtype": "float32",
        "overrides": {
            "num_hidden_layers": 1,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
        },
    },
    "mesh": {"shape": [2], "dim_names": ["dp"]},
    "numerics": False,
    "schedule": {"loss": "sum", "steps": [{"clip_grad_norm": {"max_norm": 1.0}}]},
}


@pytest.mark.slow
def test_a_rank_hung_in_clip_grad_norm_is_reported_there_not_at_start_up():
    from harness.load.setup import RunSetup
    from harness.run.faults import Fault, injected
    from harness.run.launch.errors import RunTimeout
    from harness.run.launch.local import run_local

    setup = RunSetup.from_mapping(CLIP)
    run_local(setup, backend="gloo", timeout_s=300)  # the forkserver up: the timed run below is the step alone
    start = time.monotonic()
    with pytest.raises(RunTimeout) as info:
        with injected(Fault(rank=1, phase="clip_grad_norm", kind="hang")):
            run_local(setup, backend="gloo", timeout_s=8)
    assert time.monotonic() - start < 30
    # rank 1 hangs at the start of clip_grad_norm_; rank 0 waits there in its norm's all-reduce
    assert info.value.phases == {0: "clip_grad_norm", 1: "clip_grad_norm"}, str(info.value)
    assert "rank 1 in clip_grad_norm" in str(info.value)
    assert "No rank got past start-up" not in str(info.value)
    assert "A hang" in str(info.value)
