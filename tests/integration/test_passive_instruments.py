"""Observe without disturbing: no instrument keeps a torch object past its call or issues a collective.

Fast tests on a 1-rank gloo world in this process (a buffer freed when the step lets go of it,
a Partial norm read without a collective, a functional collective's reduce op); slow tests run
a small setup with and without an instrument and show that what the others record is the same
(``harness.report.compare``'s flattening, timings left out).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from harness.contract.observation import build_observation
from harness.contract.partial_values import fill_partial_norms
from harness.load.setup import RunSetup
from harness.report.compare import flatten_observation
from tests.support.specs import TINY_DIMS


def _log():
    log = type("Log", (), {})()
    log.entered_records, log.completed_records, log.open_records = [], [], []
    log.entered = lambda record: log.entered_records.append(dict(record))
    log.completed = lambda record: log.completed_records.append(dict(record))
    log.oldest_open = lambda record: log.open_records.append(record and dict(record))
    return log


@pytest.fixture()
def world(tmp_path: Path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdv'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_hang_progress_keeps_no_work_and_its_buffer_goes_with_the_step(world, op):
    """gloo's reduce-scatter work has no future: its record is marked "sync" and completed at the
    next phase; neither work is kept (its buffer goes with the step)."""
    import torch
    import torch.distributed as dist
    from torch.multiprocessing.reductions import StorageWeakRef

    from harness.run.rank.recorders.collectives import CollectiveRecorder
    from harness.run.rank.recorders.quiesce import settle_threads

    log = _log()
    recorder = CollectiveRecorder(lambda: "backward", {}, log)
    with recorder:
        if op == "all_gather":
            out, inp = torch.empty(8), torch.ones(8)
            work = dist.all_gather_into_tensor(out, inp, async_op=True)
        else:
            out, inp = torch.empty(8), torch.ones(8)
            work = dist.reduce_scatter_tensor(out, inp, async_op=True)
        work.wait()
        buffers = [StorageWeakRef(out.untyped_storage()), StorageWeakRef(inp.untyped_storage())]
        del work, out, inp
        settle_threads()
        assert all(b.expired() for b in buffers), "a collective's buffer outlived the step's last reference"
        recorder.settle()  # the next phase: a work without a future counts as completed
    # entered once; the reduce-scatter's slot written again with its "sync" mark
    assert [(r["seq"], r.get("sync", False)) for r in log.entered_records] == (
        [(0, False)] if op == "all_gather" else [(0, False), (0, True)]
    )
    assert [(r["seq"], r["op"]) for r in log.completed_records] == [(0, op)]
    # open from entered until completed; the reduce-scatter's again once marked "sync" (no future to watch)
    opened = [r and r["seq"] for r in log.open_records]
    assert opened == ([0, None] if op == "all_gather" else [0, 0, None])
    assert log.completed_records[0].get("sync", False) is (op == "reduce_scatter")


def test_a_functional_collective_carries_its_reduce_op(world):
    """DTensor's ``_c10d_functional.all_reduce`` passes "max" as a string: the record says MAX."""
    import torch
    import torch.distributed as dist

    from harness.run.rank.recorders.collectives import CollectiveRecorder

    recorder = CollectiveRecorder(lambda: "clip_grad_norm", {})
    group = dist.group.WORLD.group_name
    with recorder:
        for op in ("max", "sum"):
            torch.ops._c10d_functional.wait_tensor(torch.ops._c10d_functional.all_reduce(torch.ones(2), op, group))
    assert [(r["op"], r["reduce_op"]) for r in recorder.records] == [("all_reduce", "MAX"), ("all_reduce", "SUM")]


def test_a_partial_norm_is_read_without_a_collective(world):
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial

    from harness.load.schedule import ClipGradNorm
    from harness.run.rank.instruments import Instruments
    from harness.run.rank.recorders.phases import Phases

    mesh = init_device_mesh("cpu", (1,))
    norm = DTensor.from_local(torch.tensor(3.5), mesh, [Partial("max")])
    instruments = Instruments(Phases(), {})
    with instruments:
        instruments.record_grad_norm(0, norm, ClipGradNorm(max_norm=1.0, norm_type=math.inf))
    assert instruments.collectives.records == []  # full_tensor() would all-reduce here
    (record,) = instruments.grad_norms
    assert (record["local_value"], record["value"], record["placements"]) == (3.5, None, ["Partial(max)"])


def _norm(coords, local, placements):
    return {"coords": coords, "grad_norms": [{"local_value": local, "value": None, "placements": placements}]}


def test_partial_norms_reduce_over_their_mesh_dims():
    flat = [_norm([r], v, ["Partial(max)"]) for r, v in enumerate([1.0, 4.0, 2.0, 3.0])]
    fill_partial_norms(flat, [4])
    assert [e["grad_norms"][0]["value"] for e in flat] == [4.0] * 4
    hsdp = [_norm([i, j], float(2 * i + j), ["Replicate()", "Partial(sum)"]) for i in range(2) for j in range(2)]
    fill_partial_norms(hsdp, [2, 2])
    assert [e["grad_norms"][0]["value"] for e in hsdp] == [1.0, 1.0, 5.0, 5.0]
    some = [_norm([0], 1.0, ["Partial(max)"])]  # a rank missing (simulated runs observe some): left None
    fill_partial_norms(some, [4])
    assert some[0]["grad_norms"][0]["value"] is None
    replicated = [_norm([0], 2.0, ["Replicate()"])]
    replicated[0]["grad_norms"][0]["value"] = 2.0
    fill_partial_norms(replicated, [1])
    assert replicated[0]["grad_norms"][0]["value"] == 2.0


def test_settle_threads_returns_in_a_quiet_process():
    from harness.run.rank.recorders.quiesce import settle_threads

    assert settle_threads() in (True, False)  # bounded either way
    import time

    t0 = time.perf_counter()
    settle_threads(max_wait_s=0.02)
    assert time.perf_counter() - t0 < 1.0


# --- with and without each instrument, real ranks --------------------------------------------


def _run(setup: RunSetup, step: str | None = None) -> dict:
    from harness.run.launch.local import run_local

    results = run_local(setup, backend="gloo", timeout_s=600, step=step)
    return build_observation(setup, results, launcher="local", simulated=False)


def _without(flat: dict, *parts: str) -> dict:
    """The flat observation less ``parts``, and less the peak snapshots: torch updates a peak at
    every op, so a peak moves with gloo's worker thread, instrument or not (README, "Reproducible
    observations")."""
    return {
        k: v
        for k, v in flat.items()
        if k.part not in parts and not (k.part == "memory" and "Peak" in str(k.selector[1]))
    }


def _small(**extra) -> RunSetup:
    return RunSetup.from_mapping(
        {
            "model": {"overrides": TINY_DIMS, "dtype": "float32"},
            "mesh": {"shape": [2], "dim_names": ["dp"]},
            "optimizer": {"name": "adamw", "lr": 0.01},
            **extra,
        }
    )


@pytest.mark.slow
def test_the_memory_tracker_changes_nothing_the_others_record():
    on, off = _run(_small()), _run(_small(track_memory=False))
    assert _without(flatten_observation(on), "memory", "setup") == _without(flatten_observation(off), "memory", "setup")


@pytest.mark.slow
def test_hang_progress_changes_nothing_the_others_record():
    """Memory included: the works it used to keep held the collectives' buffers."""
    on, off = _run(_small()), _run(_small(), step="tests.support.passive_bodies:without_hang_progress")
    assert _without(flatten_observation(on)) == _without(flatten_observation(off))


@pytest.mark.slow
def test_the_grad_norm_recorder_issues_no_collective():
    """``norm_type: inf`` returns a Partial(max) norm: torch all-reduces once (MAX), the recorder never."""
    clip = {"schedule": {"loss": "sum", "steps": [{"clip_grad_norm": {"max_norm": 1.0, "norm_type": math.inf}}]}}
    on, off = _run(_small(**clip)), _run(_small(**clip), step="tests.support.passive_bodies:without_grad_norm_recorder")
    assert _without(flatten_observation(on), "grad_norms") == _without(flatten_observation(off), "grad_norms")
    for rank in on["ranks"]:
        reduces = [(c["phase"], c["reduce_op"]) for c in rank["collectives"] if c["op"] == "all_reduce"]
        assert reduces == [("clip_grad_norm", "MAX")]
        (norm,) = rank["grad_norms"]
        assert norm["placements"] == ["Partial(max)"] and norm["value"] == pytest.approx(norm["reference"], rel=1e-5)


@pytest.mark.slow
def test_the_parameter_update_tracker_changes_nothing_the_others_record():
    """Its copies of the shards at each step's start and end were counted as activation memory."""
    steps = {"schedule": {"steps": [{"repeat": 2}]}, "numerics": False}
    on, off = _run(_small(**steps)), _run(_small(**steps), step="tests.support.passive_bodies:without_param_updates")
    assert _without(flatten_observation(on), "param_updates") == _without(flatten_observation(off), "param_updates")


@pytest.mark.slow
def test_the_parameter_state_hooks_change_nothing_the_others_record():
    """Forward and backward hooks, the loop's points and the fully_shard call record: memory included."""
    steps = {"schedule": {"steps": [{"microbatches": 2}, {}]}, "numerics": False}
    on = _run(_small(**steps))
    off = _run(_small(**steps), step="tests.support.passive_bodies:without_param_states")
    parts = ("param_states", "fully_shard_calls")
    assert _without(flatten_observation(on), *parts) == _without(flatten_observation(off), *parts)
    points = {s["point"] for s in on["ranks"][0]["param_states"]}
    assert points == {
        "pre_forward",
        "post_forward",
        "pre_backward",
        "post_backward",
        "after_backward",
        "after_optimizer_step",
        "after_zero_grad",
    }


@pytest.mark.slow
def test_the_gradient_and_unit_dtype_records_change_nothing_the_others_record():
    """They read every gradient after each step and each unit's dtypes after each forward: memory included."""
    steps = {"schedule": {"steps": [{"microbatches": 2}, {}]}, "numerics": False}
    on = _run(_small(**steps))
    off = _run(_small(**steps), step="tests.support.passive_bodies:without_grad_records")
    parts = ("grads", "unit_dtypes")
    assert _without(flatten_observation(on), *parts) == _without(flatten_observation(off), *parts)
    assert on["ranks"][0]["grads"] and on["ranks"][0]["unit_dtypes"] and not off["ranks"][0]["grads"]
