"""A torch.distributed.checkpoint round trip on real gloo ranks: the checkpoint folder is always removed,
a failing or hanging rank is named with its phase."""

from __future__ import annotations

import glob
import os
import tempfile
import time

import pytest

from harness.load.setup import RunSetup
from harness.run.launch.session import session_dir
from tests.support.ranks import hang_timeout_s

TINY = {
    "model": {
        "config": "walkthrough",
        "overrides": {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "num_hidden_layers": 1,
        },
        "dtype": "float32",
    },
    "mesh": {"shape": [2], "dim_names": ["dp"]},
    "batch_per_rank": 1,
    "seq_len": 4,
    "optimizer": {"name": "adamw"},
    "numerics": False,
    "state_dict": {"round_trip": True},
}


def _checkpoint_folders() -> set[str]:
    """Where a round trip's folder can be: this process's session folder (a launcher's, the
    runner's) and the temporary folder (rank 0's, for a joined world)."""
    places = (session_dir(), tempfile.gettempdir())
    return {path for place in places for path in glob.glob(os.path.join(place, "fsdp2-checkpoint-*"))}


def _left_behind(before: set[str], within: float = 60) -> set[str]:
    """Folders made since ``before`` that are still there after up to ``within`` s: another xdist
    worker's joined-world round trip makes and removes its own folder in the temporary folder
    meanwhile; a folder this run left is never removed, so it stays in the answer."""
    deadline = time.monotonic() + within
    while (left := _checkpoint_folders() - before) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


@pytest.mark.slow
def test_rank_zero_makes_and_removes_the_folder_when_the_launcher_gives_none():
    """run_local without a folder is what a joined (torchrun) world does: rank 0 makes one."""
    from harness.run.launch.local import run_local

    before = _checkpoint_folders()
    results = run_local(RunSetup.from_mapping(TINY), backend="gloo", timeout_s=300)
    assert _left_behind(before) == set()
    records = [r["entry"]["state_dict"] for r in results]
    assert all(e["round_trip_equal"] for rec in records for e in rec["entries"])
    # q_norm [16] on 2 ranks: 8 rows each, at 0 and 8
    q_norm = [next(e for e in rec["entries"] if e["fqn"] == "layers.0.self_attn.q_norm.weight") for rec in records]
    assert [(e["global_offset"], e["local_length"]) for e in q_norm] == [([0], 8), ([8], 8)]


@pytest.mark.slow
def test_a_failing_round_trip_names_the_rank_and_leaves_no_folder():
    from harness.run.runner import RunError, run_setup
    from tests.support.faults import Fault, injected

    before = _checkpoint_folders()
    setup = RunSetup.from_mapping({**TINY, "state_dict": {"round_trip": True, "reload_world_sizes": [1]}})
    with pytest.raises(RunError) as info:
        with injected(Fault(rank=1, phase="state_dict", kind="raise")):
            run_setup(setup, backend="gloo", timeout_s=300)
    assert info.value.rank == 1
    assert "injected fault: rank 1 raises at the start of state_dict" in str(info.value)
    assert _left_behind(before) == set()


@pytest.mark.slow
def test_a_round_trip_that_hangs_times_out_in_its_phase_and_leaves_no_folder():
    from harness.run.runner import RunTimeout, run_setup
    from tests.support.faults import Fault, injected

    timeout_s = hang_timeout_s(RunSetup.from_mapping(TINY), run_setup)  # the tiny step, not torch's import
    before = _checkpoint_folders()
    with pytest.raises(RunTimeout) as info:
        with injected(Fault(rank=1, phase="state_dict", kind="hang")):
            run_setup(RunSetup.from_mapping(TINY), backend="gloo", timeout_s=timeout_s)
    assert info.value.phases[1] == "state_dict", str(info.value)
    assert "rank 1 in state_dict" in str(info.value)
    assert _left_behind(before) == set()
