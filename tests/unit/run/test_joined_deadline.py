"""The run's deadline in a joined world (torchrun): at the run's timeout, before the process
group's (NCCL's watchdog), the rank prints the verdict from every rank's collectives in the
process group's store, asks the flight recorder for its dumps, and ends the process."""

from __future__ import annotations

import threading

import torch.distributed as dist

from harness.run.launch.hang import StoreProgress, read_store
from harness.run.launch.joined_deadline import (
    STORE_HOST_LINGER_S,
    JoinedDeadline,
    deadline_message,
    process_group_timeout_s,
)

GATHER_1 = {"seq": 1, "op": "all_gather", "unit": "layers.0", "phase": "forward"}
GATHER_2 = {"seq": 2, "op": "all_gather", "unit": "layers.1", "phase": "forward"}


def _stuck_world() -> dist.HashStore:
    """Rank 0 entered layer 1's all-gather and waits in it; rank 1 never came past layer 0's."""
    store = dist.HashStore()
    r0, r1 = StoreProgress(store, 0), StoreProgress(store, 1)
    for writer in (r0, r1):
        writer.entered(GATHER_1)
        writer.completed(GATHER_1)
    r0.entered(GATHER_2)
    r0.oldest_open(GATHER_2)
    return store


def test_the_process_group_outlives_the_runs_deadline():
    assert process_group_timeout_s(240) > 240


def test_at_the_deadline_the_rank_names_the_stuck_rank_and_collective_then_ends():
    store, written, ended = _stuck_world(), [], threading.Event()
    codes: list[int] = []

    def end(code: int) -> None:
        codes.append(code)
        ended.set()

    lingered: list[float] = []
    deadline = JoinedDeadline(
        0.05,
        0,
        lambda: read_store(store, 2),
        dump=lambda: ["/tmp/fr/nccl_trace_rank_0"],
        write=written.append,
        end=end,
        linger=lingered.append,
    )
    with deadline:
        assert ended.wait(10), "the deadline never fired"
    (text,) = written
    assert text.startswith("rank 0: the run did not finish within its timeout of 0.05 s")
    assert "Diagnosis: rank 1 never entered all_gather #2 (layers.1, forward); rank 0 waits in it." in text
    assert "rank 1: last entered all_gather #1 (layers.0, forward)" in text
    assert "NCCL flight recorder dumps (read with torchfrtrace): /tmp/fr/nccl_trace_rank_0" in text
    assert codes == [2]  # a failed run's exit status
    assert lingered == [STORE_HOST_LINGER_S]  # rank 0 hosts an env:// world's store: the peers still read it


def test_a_run_that_finishes_in_time_is_left_alone():
    fired: list[str] = []
    with JoinedDeadline(0.2, 0, lambda: {}, write=fired.append, end=fired.append, linger=fired.append):
        pass
    threading.Event().wait(0.4)
    assert fired == []


def test_the_message_without_collectives_or_dumps():
    text = deadline_message(3, 10, {0: {"entered": None}, 3: {"entered": None}}, [])
    assert (
        text
        == "rank 3: the run did not finish within its timeout of 10 s (joined world)\nno rank entered a collective\n"
    )
