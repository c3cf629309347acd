"""Rank side of ``benchmarks/bench_observe_cost.py``: one rank process runs the same setup once per
instrument variant, and the spec hooks that time each step.

``paired_steps`` is the rank body (``run_local(step="observe_cost_ranks:paired_steps")``; this
folder is on the ranks' path because the script runs from it): on the same ranks, in the same
process group, it runs ``harness.run.rank.step.run_step`` for each variant (the setup with
``instruments`` set), in alternating order round by round, so that the variants share the machine's
load and the process's warm caches. ``step_started`` / ``started_at`` are the setup's hooks:
``before_step`` notes ``time.perf_counter()`` (CLOCK_MONOTONIC, one clock for every process) and
``time.process_time()`` (the rank process's CPU time, every thread of it), and
``observe`` hands it to the entry's ``custom`` records. The schedule's reference replays
``before_step`` before the real steps; the real step's call comes last and wins.
"""

from __future__ import annotations

import dataclasses
import gc
import resource
import time
from typing import Any

_STARTED: dict[int, tuple[float, float]] = {}


def step_started(model: Any, step_index: int, rank: int, world_size: int) -> None:
    _STARTED[step_index] = (time.perf_counter(), time.process_time())


def started_at(model: Any, step_index: int, rank: int, world_size: int) -> dict[str, float]:
    wall, cpu = _STARTED[step_index]
    return {"start_s": wall, "start_cpu_s": cpu}


def paired_steps(
    setup: Any,
    rank: int,
    world_size: int,
    device_type: str,
    *,
    variants: list[tuple[str, list[str] | None]],
    rounds: int,
    **kwargs: Any,
) -> dict[str, Any]:
    """Per variant name, per round: this rank's step start times (wall and CPU, s), its phase timings
    (s) and the process's peak resident memory after it (bytes)."""
    from harness.run.rank.step import run_step

    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in variants}
    for r in range(rounds):
        for name, names in variants if r % 2 == 0 else variants[::-1]:
            chosen = dataclasses.replace(setup, instruments=None if names is None else tuple(names))
            entry = run_step(chosen, rank, world_size, device_type, **kwargs)["entry"]
            gc.collect()  # the last variant's model and recorders go before the next is built
            runs[name].append(
                {
                    "starts_s": [c["values"]["start_s"] for c in entry["custom"]],
                    "cpu_starts_s": [c["values"]["start_cpu_s"] for c in entry["custom"]],
                    "timings_s": entry["timings_s"],
                    # the process's peak so far (bytes): a variant that leaves memory behind shows here
                    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                }
            )
    return {"rank": rank, "runs": runs}
