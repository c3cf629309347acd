"""algbw and busbw from the timed rows of an observation, as nccl-tests computes them.

nccl-tests (NVIDIA/nccl-tests, ``doc/PERFORMANCE.md``): with S the size in bytes (the
all-gather's output, the reduce-scatter's input, the all-reduce's buffer), t the time of one
operation and n the ranks in the group,

    algbw = S / t
    busbw = algbw x (n - 1) / n          all-gather, reduce-scatter
    busbw = algbw x 2 (n - 1) / n        all-reduce

in GB/s with GB = 10^9 bytes. t is the mean over ranks of each rank's mean time per operation
(nccl-tests' default ``-a 1``, the average across ranks); ``#wrong`` is the sum over ranks of the
elements that differ from the expected result. Pure functions of the observation document.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from harness.calculator import busbw_factor

__all__ = ["BUS_FACTORS", "bus_factor", "BandwidthRow", "bandwidth_rows"]

BUS_FACTORS = {
    "all_gather": "(n-1)/n",
    "reduce_scatter": "(n-1)/n",
    "all_reduce": "2(n-1)/n",
}
"""nccl-tests' busbw correction per op, as written in its PERFORMANCE.md."""


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for ``op`` on ``n`` ranks (:func:`harness.calculator.busbw_factor`); ValueError: no factor."""
    if op not in BUS_FACTORS:
        raise ValueError(f"no nccl-tests bus factor for op {op!r}; expected one of {list(BUS_FACTORS)}")
    return busbw_factor(op, n)


@dataclass(frozen=True)
class BandwidthRow:
    """One row of the nccl-tests table, over all ranks.

    Attributes:
        name, source, op, dtype, group_size, mesh_dim, occurrences: as recorded.
        size_bytes: S in bytes; count: S in elements; requested_bytes: S before a CPU cap.
        time_us: the mean over ranks of the time per operation, microseconds.
        algbw, busbw: GB/s (10^9 bytes per second).
        wrong: elements differing from the expected values, summed over ranks.
        times_us: each rank's own time per operation, by rank.
        wrong_by_rank: each rank's #wrong.
        timer: cuda_events or wall_barrier.
    """

    name: str
    source: str
    op: str
    dtype: str
    size_bytes: int
    count: int
    requested_bytes: int
    group_size: int
    mesh_dim: str | None
    occurrences: int | None
    time_us: float
    algbw: float
    busbw: float
    wrong: int
    times_us: dict[int, float]
    wrong_by_rank: dict[int, int]
    timer: str
    warmup: int
    iterations: int

    @property
    def capped(self) -> bool:
        return self.requested_bytes > self.size_bytes


def _key(row: Mapping[str, Any]) -> tuple:
    return (
        row["name"],
        row["source"],
        row["op"],
        row["dtype"],
        row["size_bytes"],
        row["group_size"],
        row.get("mesh_dim"),
    )


def bandwidth_rows(obs: Mapping[str, Any]) -> list[BandwidthRow]:
    """The table's rows in the ranks' order; [] when no rank recorded ``bandwidth``.

    A step row on a subgroup (HSDP) is measured by each group on its own; rows with the same
    name, op, dtype, size and mesh dim are joined over every rank that timed them.
    """
    by_key: dict[tuple, list[tuple[int, Mapping[str, Any]]]] = {}
    for rank_doc in obs["ranks"]:
        for row in rank_doc.get("bandwidth") or ():
            by_key.setdefault(_key(row), []).append((rank_doc["rank"], row))
    out = []
    for timed in by_key.values():
        first = timed[0][1]
        times = {rank: row["time_s"] * 1e6 for rank, row in timed}
        time_us = sum(times.values()) / len(times)
        algbw = first["size_bytes"] / (time_us * 1e-6) / 1e9 if time_us > 0 else float("inf")
        out.append(
            BandwidthRow(
                name=first["name"],
                source=first["source"],
                op=first["op"],
                dtype=first["dtype"],
                size_bytes=first["size_bytes"],
                count=first["count"],
                requested_bytes=first["requested_bytes"],
                group_size=first["group_size"],
                mesh_dim=first.get("mesh_dim"),
                occurrences=first.get("occurrences"),
                time_us=time_us,
                algbw=algbw,
                busbw=algbw * bus_factor(first["op"], first["group_size"]),
                wrong=sum(row["wrong"] for _, row in timed),
                times_us=times,
                wrong_by_rank={rank: row["wrong"] for rank, row in timed},
                timer=first["timer"],
                warmup=first["warmup"],
                iterations=first["iterations"],
            )
        )
    return out
