"""Hang diagnosis: which rank is stuck where, from each rank's last collective entered and completed.

The verdict is a pure function of the ranks' progress records (tested on hand-written records);
one real run on 3 gloo ranks hangs rank 1 at the start of backward and must be named as never
entering the backward all-gather of layers.1 that ranks 0 and 2 wait in.
"""

from __future__ import annotations

from harness.run.launch.hang import ProgressBoard, diagnose, per_rank_lines


def rec(seq, op="all_gather", unit="layers.0", phase="forward"):
    return {"seq": seq, "op": op, "unit": unit, "phase": phase}


def test_a_rank_that_never_entered_is_named_with_the_collective_its_peers_wait_in():
    progress = {
        0: {"entered": rec(3, unit="layers.1"), "completed": rec(2)},
        1: {"entered": rec(3, unit="layers.1"), "completed": rec(2)},
        2: {"entered": rec(2), "completed": rec(2)},
        3: {"entered": rec(3, unit="layers.1"), "completed": rec(2)},
    }
    assert diagnose(progress) == "rank 2 never entered all_gather #3 (layers.1, forward); ranks 0, 1, 3 wait in it"
    assert per_rank_lines(progress, {2: "forward"})[2] == (
        "rank 2: phase forward; last entered all_gather #2 (layers.0, forward); "
        "last completed all_gather #2 (layers.0, forward)"
    )


def test_a_peer_whose_work_ended_in_a_timeout_still_waits_in_it():
    """gloo marks a timed-out Work completed: a member of the group of a collective that another
    member never entered cannot have completed it, whatever its record says."""
    progress = {
        0: {"entered": rec(2), "completed": rec(1)},
        1: {"entered": rec(1), "completed": rec(1)},
        2: {"entered": rec(2), "completed": rec(2)},
    }
    assert diagnose(progress) == "rank 1 never entered all_gather #2 (layers.0, forward); ranks 0, 2 wait in it"


def test_ranks_of_another_group_that_completed_the_collective_are_not_waiting():
    """HSDP: shard groups {0, 1} and {2, 3}; rank 1 never entered #2, ranks 2 and 3 completed
    theirs on their own group."""
    group = {0: [0, 1, 2], 1: [0, 1, 2], 2: [2, 1, 2], 3: [2, 1, 2]}
    progress = {r: {"entered": {**rec(2), "group": group[r]}, "completed": rec(2 if r >= 2 else 1)} for r in (0, 2, 3)}
    progress[1] = {"entered": rec(1), "completed": rec(1)}
    assert diagnose(progress) == "rank 1 never entered all_gather #2 (layers.0, forward); rank 0 waits in it"


def test_every_rank_in_the_same_collective_is_a_mismatch_or_a_stuck_transport():
    progress = {r: {"entered": rec(4, "reduce_scatter", "layers.0", "backward"), "completed": rec(3)} for r in range(2)}
    assert diagnose(progress) == (
        "every rank entered reduce_scatter #4 (layers.0, backward) and ranks 0, 1 did not "
        "complete it (mismatched sizes or a stuck transport)"
    )


def test_ranks_outside_collectives_and_ranks_before_any():
    done = {r: {"entered": rec(5, unit=""), "completed": rec(5, unit="")} for r in range(2)}
    assert diagnose(done, {0: "optimizer", 1: "optimizer"}) == (
        "every rank completed all_gather #5 (root, forward), its last collective; they are stuck outside "
        "collectives (rank 0 in optimizer, rank 1 in optimizer)"
    )
    none = {r: {"entered": None, "completed": None} for r in range(2)}
    assert diagnose(none, {0: "setup", 1: "init_process_group"}) == (
        "no rank entered a collective (rank 0 in setup, rank 1 in init_process_group)"
    )


def test_the_board_round_trips_records_and_cuts_long_ones():
    import multiprocessing

    board = ProgressBoard(multiprocessing.get_context("spawn"), 2)
    board.writer(1).entered(rec(7, unit="layers.12"))
    board.writer(1).completed(rec(6))
    board.writer(0).entered(rec(1, unit="x" * 1000))  # cut: unreadable, read as no record
    board.writer(1).oldest_open(rec(5))
    assert board.read() == {
        0: {"entered": None, "completed": None, "oldest_open": None},
        1: {"entered": rec(7, unit="layers.12"), "completed": rec(6), "oldest_open": rec(5)},
    }
    board.writer(1).oldest_open(None)  # every collective it entered completed
    assert board.read()[1]["oldest_open"] is None


# --- NCCL: the rank's thread runs ahead of the GPU ---------------------------------------------------


def test_the_verdict_names_the_oldest_collective_not_completed_not_the_last_issued():
    """On NCCL ranks 0, 1, 3 issued up to #5 while their streams wait in #3, which rank 2 never
    entered: the verdict is about #3 (the last issued, #5, is not where anyone waits)."""
    progress = {
        r: {"entered": rec(5, unit="layers.2"), "completed": rec(2), "oldest_open": rec(3, unit="layers.1")}
        for r in (0, 1, 3)
    }
    progress[2] = {"entered": rec(2), "completed": rec(2), "oldest_open": None}
    assert diagnose(progress) == "rank 2 never entered all_gather #3 (layers.1, forward); ranks 0, 1, 3 wait in it"
    lines = per_rank_lines(progress)
    assert lines[0] == (
        "rank 0: last entered all_gather #5 (layers.2, forward); last completed all_gather #2 "
        "(layers.0, forward); oldest not completed all_gather #3 (layers.1, forward)"
    )
    assert lines[2].endswith("last completed all_gather #2 (layers.0, forward)")


def test_a_rank_past_the_oldest_open_collective_completed_it():
    """Every rank entered #3; rank 1's stream is past it (its oldest open is #4), ranks 0 and 2 are in it."""
    progress = {
        r: {"entered": rec(6), "completed": rec(2), "oldest_open": rec(3, "reduce_scatter", "layers.0", "backward")}
        for r in (0, 2)
    }
    progress[1] = {"entered": rec(6), "completed": rec(3), "oldest_open": rec(4)}
    assert diagnose(progress) == (
        "every rank entered reduce_scatter #3 (layers.0, backward) and ranks 0, 2 did not "
        "complete it (mismatched sizes or a stuck transport)"
    )


def test_no_open_collective_anywhere_is_the_old_verdict():
    done = {r: {"entered": rec(5, unit=""), "completed": rec(5, unit=""), "oldest_open": None} for r in range(2)}
    assert diagnose(done, {0: "optimizer", 1: "optimizer"}).startswith("every rank completed all_gather #5 (root")


class Sink:
    def __init__(self):
        self.oldest = "never written"
        self.completed_seqs = []

    def entered(self, record):
        pass

    def completed(self, record):
        self.completed_seqs.append(record["seq"])

    def oldest_open(self, record):
        self.oldest = record and record["seq"]


class PendingFuture:  # an NCCL work's future: completes when the GPU gets there
    def __init__(self):
        self.callbacks = []

    def add_done_callback(self, callback):
        self.callbacks.append(callback)

    def value(self):
        return None

    def finish(self):
        for callback in self.callbacks:
            callback(self)


def test_hang_progress_reports_the_oldest_open_collective_as_works_complete(monkeypatch):
    from harness.run.rank.recorders import hang_progress

    futures = {}
    monkeypatch.setattr(hang_progress, "_futures", lambda out: [futures.setdefault(out, PendingFuture())])
    sink = Sink()
    progress = hang_progress.HangProgress(sink)
    for seq in range(3):  # the CPU issues #0, #1, #2 before the GPU finishes any
        progress.entered(seq, "all_gather", "forward")
        progress.issued(seq)
    assert sink.oldest == 0
    futures[1].finish()  # another stream's #1 finishes first: #0 still open
    assert (sink.oldest, sink.completed_seqs) == (0, [1])
    futures[0].finish()
    assert sink.oldest == 2
    progress.entered(3, "reduce_scatter", "backward")
    progress.raised()  # refused (gloo and PREMUL_SUM): nothing waits in it
    assert sink.oldest == 2
    futures[2].finish()
    assert sink.oldest is None


# --- NCCL's dispatch: a synchronous op hands back no Work; nothing to watch is marked "sync" -----------


def test_nothing_to_watch_is_none_whatever_the_op_handed_back():
    """NCCL's synchronous ops hand back a boxed Work that unboxes to None; a functional
    collective hands back a tensor: neither is a completion to watch (seen: None.get_future())."""
    import torch
    import torch.distributed as dist

    from harness.run.rank.recorders.hang_progress import _futures

    no_work = dist.distributed_c10d.Work.boxed(None)
    assert dist.distributed_c10d.Work.unbox(no_work) is None  # what NCCL hands back, torch 2.11
    assert _futures((torch.ones(2), no_work)) is None
    assert _futures(no_work) is None
    assert _futures(torch.ones(2)) is None  # _c10d_functional.all_reduce: completed by wait_tensor
    assert _futures(None) is None


def test_a_collective_with_nothing_to_watch_is_marked_sync_and_completed_at_the_next_phase(monkeypatch):
    from harness.run.rank.recorders import hang_progress

    monkeypatch.setattr(hang_progress, "_futures", lambda out: None)
    sink = Sink()
    entered = []
    sink.entered = lambda record: entered.append(dict(record))
    progress = hang_progress.HangProgress(sink)
    progress.entered(0, "all_reduce", "backward")
    progress.issued("no work")
    assert (sink.oldest, sink.completed_seqs) == (0, [])  # not done when its op returns
    assert entered[-1]["sync"] is True  # the rank's slot carries the mark
    progress.settle()
    assert (sink.oldest, sink.completed_seqs) == (None, [0])


def test_a_sync_collective_in_the_verdict_says_its_completion_was_not_observed():
    progress = {r: {"entered": rec(4, "all_reduce", "layers.0", "backward"), "completed": rec(3)} for r in range(2)}
    for r in range(2):
        progress[r]["oldest_open"] = {**rec(4, "all_reduce", "layers.0", "backward"), "sync": True}
    verdict = diagnose(progress)
    assert verdict.startswith("every rank entered all_reduce #4 (layers.0, backward) and ranks 0, 1 did not")
    assert "synchronous: the backend gave nothing to watch" in verdict
    del progress[0]["oldest_open"]["sync"], progress[1]["oldest_open"]["sync"]
    assert "synchronous" not in diagnose(progress)
