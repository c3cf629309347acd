"""Per-rank profiler traces merged into one Chrome trace, one process per rank.

The merge is tested here on hand-made traces; tests/cli/test_outputs_of_one_run.py holds a real run of the
walkthrough (``run --trace``) to the same functions.
"""

from __future__ import annotations

import pytest

from harness.report.trace import (
    TraceError,
    collective_events,
    compact_trace,
    merge_traces,
    missing_collectives,
    profiler_name,
    ranks_of,
    read_rank_traces,
)


def rank_trace(os_pid: int, base_ns: int, *, flow_id: int = 7) -> dict:
    """A small Kineto-like trace: process and thread metadata, a label, a collective nested in
    itself (one op seen through two dispatch modes), a backend span on another thread, a flow."""
    return {
        "schemaVersion": 1,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base_ns,
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": os_pid, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "process_sort_index", "pid": os_pid, "tid": 0, "args": {"sort_index": os_pid}},
            {"ph": "M", "name": "thread_name", "pid": os_pid, "tid": os_pid, "args": {"name": "main"}},
            {"ph": "X", "name": "FSDP::pre_forward (layers.0)", "pid": os_pid, "tid": os_pid, "ts": 100.0, "dur": 50.0},
            {"ph": "X", "name": "c10d::_allgather_base_", "pid": os_pid, "tid": os_pid, "ts": 110.0, "dur": 20.0},
            {"ph": "X", "name": "c10d::_allgather_base_", "pid": os_pid, "tid": os_pid, "ts": 111.0, "dur": 10.0},
            {"ph": "X", "name": "gloo:all_gather", "pid": os_pid, "tid": 99, "ts": 112.0, "dur": 30.0},
            {"ph": "X", "name": "aten::mm", "pid": os_pid, "tid": os_pid, "ts": 160.0, "dur": 5.0},
            {"ph": "X", "name": "c10d::_reduce_scatter_base_", "pid": os_pid, "tid": os_pid, "ts": 200.0, "dur": 5.0},
            {"ph": "s", "id": flow_id, "pid": os_pid, "tid": os_pid, "ts": 160.0, "cat": "fwdbwd", "name": "fwdbwd"},
            {
                "ph": "f",
                "id": flow_id,
                "pid": os_pid,
                "tid": os_pid,
                "ts": 200.0,
                "cat": "fwdbwd",
                "name": "fwdbwd",
                "bp": "e",
            },
        ],
    }


def test_one_process_per_rank_named_rank_n():
    merged = merge_traces({0: rank_trace(4242, 10_000_000), 1: rank_trace(5151, 10_000_000)})
    events = merged["traceEvents"]
    assert {e["pid"] for e in events} == {0, 1}
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}
    assert ranks_of(merged) == [0, 1]
    # the ranks' own process metadata is replaced, their threads are kept
    assert not any(e["ph"] == "M" and e.get("args", {}).get("name") == "python" for e in events)
    assert sum(e["name"] == "thread_name" for e in events) == 2
    assert sum(e["ph"] == "X" for e in events) == 2 * 6


def test_timestamps_move_onto_the_earliest_base():
    """Kineto writes ts relative to baseTimeNanoseconds: a rank whose base is 2 ms later has
    every event 2000 us later on the merged clock."""
    merged = merge_traces({0: rank_trace(1, 5_000_000), 1: rank_trace(2, 7_000_000)})
    assert merged["baseTimeNanoseconds"] == 5_000_000
    first = {e["pid"]: e["ts"] for e in merged["traceEvents"] if e.get("name") == "FSDP::pre_forward (layers.0)"}
    assert first == {0: 100.0, 1: 2100.0}


def test_flow_ids_do_not_join_ranks():
    merged = merge_traces({0: rank_trace(1, 0), 1: rank_trace(2, 0)})
    ids = {(e["pid"], e["id"]) for e in merged["traceEvents"] if e["ph"] in ("s", "f")}
    assert len({i for _, i in ids}) == 2  # one id per rank, both ends of a flow keep it


def test_nested_same_op_counts_once():
    merged = merge_traces({3: rank_trace(1, 0)})
    assert collective_events(merged, 3) == ["c10d::_allgather_base_", "c10d::_reduce_scatter_base_"]
    assert profiler_name("c10d._allgather_base_.default") == "c10d::_allgather_base_"


def test_compact_keeps_labels_and_collectives_only():
    compact = compact_trace(merge_traces({0: rank_trace(1, 0)}))
    kept = {e["name"] for e in compact["traceEvents"] if e["ph"] == "X"}
    assert kept == {
        "FSDP::pre_forward (layers.0)",
        "c10d::_allgather_base_",
        "gloo:all_gather",
        "c10d::_reduce_scatter_base_",
    }


def test_bad_input_names_what_is_wrong(tmp_path):
    with pytest.raises(TraceError, match="rank 2: traceEvents"):
        merge_traces({2: {"traceEvents": None}})
    with pytest.raises(TraceError, match="no rank<r>.json"):
        read_rank_traces(tmp_path)
    (tmp_path / "rank0.json").write_text("{not json")
    with pytest.raises(TraceError, match="rank0.json: not a readable Chrome trace"):
        read_rank_traces(tmp_path)


def test_missing_collective_is_reported_per_rank():
    merged = merge_traces({0: rank_trace(1, 0)})
    obs = {
        "ranks": [
            {
                "rank": 0,
                "collectives": [
                    {"c10d_op": "c10d._allgather_base_.default", "phase": "forward"},
                    {"c10d_op": "c10d._reduce_scatter_base_.default", "phase": "backward"},
                    {"c10d_op": "c10d._allgather_base_.default", "phase": "setup"},  # before the profiler starts
                ],
            }
        ]
    }
    assert missing_collectives(merged, obs) == []
    obs["ranks"][0]["collectives"].append({"c10d_op": "c10d.allreduce_.default", "phase": "backward"})
    (problem,) = missing_collectives(merged, obs)
    assert problem.startswith("rank 0:") and "c10d::allreduce_" in problem
