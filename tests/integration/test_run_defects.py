"""Defects of a run's reporting: torch's own prints kept in the rank's log, the tracker limit's hint."""

from __future__ import annotations

import pytest

from harness.cli import main
from harness.load.setup import RunSetup
from harness.run.launch.errors import RunError
from harness.run.launch.local import run_local
from harness.run.rank.recorders.memory import TRACKER_LIMIT_NOTE, tracker_limit_note
from tests.support import REPO
from tests.support.specs import TINY_DIMS

ROOT = REPO


def test_the_tracker_limit_note_is_for_exceptions_raised_inside_the_tracker():
    import torch
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    try:
        FSDPMemTracker(torch.nn.Linear(2, 2))  # raises inside fsdp2_mem_tracker.py: not an FSDP module
    except AssertionError as exc:
        assert tracker_limit_note(exc) == TRACKER_LIMIT_NOTE
    try:
        raise KeyError("elsewhere")
    except KeyError as exc:
        assert tracker_limit_note(exc) is None


@pytest.mark.slow
def test_a_passing_expected_error_prints_no_stack_from_torch(capfd):
    """FSDP's _raise_assert_with_print prints each rank's stack (~80 lines) before raising."""
    assert main(["run", str(ROOT / "specs" / "mixed_grad_dtypes_refused.yaml")]) == 0
    out, err = capfd.readouterr()
    assert 'File "' not in out + err and "_raise_assert_with_print" not in out + err
    assert out.strip().splitlines()[-1].startswith("mixed_grad_dtypes_refused: 1 passed, 0 failed")


@pytest.mark.slow
def test_a_failed_rank_shows_its_own_output(capfd):
    setup = RunSetup.from_mapping({"model": {"overrides": TINY_DIMS}, "mesh": {"shape": [2], "dim_names": ["dp"]}})
    with pytest.raises(RunError) as info:
        run_local(setup, backend="gloo", timeout_s=300, step="tests.support.passive_bodies:prints_then_raises")
    message = str(info.value)
    assert "gives up" in message.splitlines()[0]
    assert f"rank {info.value.rank}'s output:" in message
    assert f"a line rank {info.value.rank} printed" in message and f"rank {info.value.rank} wrote to fd 2" in message
    out, err = capfd.readouterr()
    assert "printed" not in out + err  # not on the terminal


@pytest.mark.slow
def test_the_tracker_limit_error_says_track_memory_false_avoids_it():
    """A unit first used in a later microbatch: FSDPMemTracker's post-backward hook fails (torch 2.13)."""
    mapping = {
        "model": {"overrides": TINY_DIMS, "dtype": "float32"},
        "mesh": {"shape": [2], "dim_names": ["dp"]},
        "schedule": {"steps": [{"microbatches": 2, "used_only_in": {"layers.1": [1]}}]},
    }
    from harness.run.runner import run_setup

    with pytest.raises(RunError) as info:
        run_setup(RunSetup.from_mapping(mapping), backend="gloo", timeout_s=300)
    first = str(info.value).splitlines()[0]
    assert "track_memory: false avoids it" in first, first
    doc = run_setup(RunSetup.from_mapping(dict(mapping, track_memory=False)), backend="gloo", timeout_s=300)
    assert all(rank["memory"] == [] for rank in doc["ranks"])
