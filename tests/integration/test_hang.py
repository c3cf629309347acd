"""Hang diagnosis on real ranks: an injected hang, locally and in a joined (torchrun-style) world,
names the stuck rank and the collective its peers wait in; a rank hung in a schedule phase
(``clip_grad_norm``) is reported in that phase (the phase table: tests/unit/contract/test_phase_table.py)."""

from __future__ import annotations

import time

import pytest

from tests.support import REPO
from tests.support.ranks import hang_timeout_s
from tests.support.specs import TINY_DIMS


def test_an_injected_hang_names_the_stuck_rank_and_collective():
    from harness.load.setup import ModelSetup, RunSetup
    from harness.run.launch.errors import RunTimeout
    from harness.run.launch.local import run_local
    from tests.support.faults import Fault, injected

    setup = RunSetup(model=ModelSetup(overrides={"num_hidden_layers": 2}), mesh_shape=(3,), numerics=False)
    timeout_s = hang_timeout_s(setup, run_local)  # the ranks' setup and forward, not torch's import
    start = time.monotonic()
    with pytest.raises(RunTimeout) as info:
        with injected(Fault(rank=1, phase="backward", kind="hang")):
            run_local(setup, backend="gloo", timeout_s=timeout_s)
    assert time.monotonic() - start < timeout_s + 160  # ends (plus starting and killing ranks on a loaded machine)
    # backward begins with layers.1's all-gather (#2 after the two forward all-gathers, #0 and #1)
    assert info.value.verdict == "rank 1 never entered all_gather #2 (layers.1, backward); ranks 0, 2 wait in it"
    assert "Diagnosis: rank 1 never entered all_gather #2 (layers.1, backward)" in str(info.value)
    assert info.value.progress[1]["completed"] == {
        "seq": 1,
        "op": "all_gather",
        "unit": "layers.1",
        "phase": "forward",
        "group": [0, 1, 3],
    }
    assert info.value.flight_recorder == []  # gloo: no NCCL flight recorder


_JOINED_RANK = """
import sys
from harness.load.setup import ModelSetup, RunSetup
from tests.support.faults import Fault, injected
from harness.run.runner import RunError, run_setup
setup = RunSetup(model=ModelSetup(overrides={"num_hidden_layers": 2}), mesh_shape=(3,), numerics=False)
with injected(Fault(rank=1, phase="backward", kind="hang")):
    try:
        run_setup(setup, backend="gloo", timeout_s=10)  # from the join, after torch's import
    except RunError as exc:
        print(exc)
        sys.exit(2)
"""


def test_a_hang_in_a_joined_world_names_the_stuck_rank(tmp_path):
    """A world set up as torchrun sets it (RANK, WORLD_SIZE, MASTER_ADDR): the ranks whose
    collective times out read every rank's progress from the process group's store."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    repo = str(REPO)
    procs = []
    for rank in range(3):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": "3",
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": "3",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "PYTHONPATH": repo,
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _JOINED_RANK],
                env=env,
                cwd=repo,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    try:
        outputs = {r: procs[r].communicate(timeout=240)[0] for r in (0, 2)}  # the peers end at the timeout
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for rank in (0, 2):
        assert procs[rank].returncode == 2, outputs[rank]
        assert (
            "Diagnosis: rank 1 never entered all_gather #2 (layers.1, backward); ranks 0, 2 wait in it."
            in outputs[rank]
        ), outputs[rank]


CLIP = {
    "model": {
        "config": "walkthrough",
        "body": "decoder_layers",
        "dtype": "float32",
        "overrides": {**TINY_DIMS, "num_hidden_layers": 1},
    },
    "mesh": {"shape": [2], "dim_names": ["dp"]},
    "numerics": False,
    "schedule": {"loss": "sum", "steps": [{"clip_grad_norm": {"max_norm": 1.0}}]},
}


def test_a_rank_hung_in_clip_grad_norm_is_reported_there_not_at_start_up():
    from harness.load.setup import RunSetup
    from harness.run.launch.errors import RunTimeout
    from harness.run.launch.local import run_local
    from tests.support.faults import Fault, injected

    setup = RunSetup.from_mapping(CLIP)
    timeout_s = hang_timeout_s(setup, run_local)  # the forkserver up: the timed run below is the step alone
    start = time.monotonic()
    with pytest.raises(RunTimeout) as info:
        with injected(Fault(rank=1, phase="clip_grad_norm", kind="hang")):
            run_local(setup, backend="gloo", timeout_s=timeout_s)
    assert time.monotonic() - start < timeout_s + 22
    # rank 1 hangs at the start of clip_grad_norm_; rank 0 waits there in its norm's all-reduce
    assert info.value.phases == {0: "clip_grad_norm", 1: "clip_grad_norm"}, str(info.value)
    assert "rank 1 in clip_grad_norm" in str(info.value)
    assert "No rank got past start-up" not in str(info.value)
    assert "A hang" in str(info.value)
