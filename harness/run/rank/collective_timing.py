"""Timing collectives in nccl-tests' terms after the step: ``setup.bandwidth``'s sweep and the step's
own collectives replayed. Each row is one collective at one size S, in bytes, as nccl-tests counts it
(``doc/PERFORMANCE.md`` of NVIDIA/nccl-tests); docs/cluster-validation.md, "How each row is timed".
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.distributed as dist

__all__ = ["PlannedRow", "unit_numel", "plan_rows", "run_bandwidth"]


@dataclass(frozen=True)
class PlannedRow:
    """One row to time: ``numel`` is S in elements (divisible by ``group_size``)."""

    name: str
    source: str
    op: str
    dtype: torch.dtype
    numel: int
    requested_numel: int
    group_size: int
    mesh_dim: str | None
    occurrences: int | None


def unit_numel(config_name: str, group_size: int) -> int:
    """Elements FSDP2 all-gathers for one decoder layer of ``config_name`` on ``group_size`` ranks (built
    on meta; each parameter's dim 0 padded to a multiple of ``group_size``, as FSDP2 pads its shards)."""
    import model as qwen3

    config = qwen3.get_config(config_name)
    # MoE first: Qwen3MoeConfig is a Qwen3Config, and a dense layer would drop its experts
    layer_class = qwen3.Qwen3MoeDecoderLayer if isinstance(config, qwen3.Qwen3MoeConfig) else qwen3.Qwen3DecoderLayer
    with torch.device("meta"):
        layer = layer_class(config, 0)
    total = 0
    for p in layer.parameters():
        rows = math.ceil(p.shape[0] / group_size) * group_size
        total += rows * (p.numel() // p.shape[0])
    return total


def _capped(numel: int, element_size: int, group_size: int, max_bytes: int | None) -> int:
    if max_bytes is None or numel * element_size <= max_bytes:
        return numel
    per_rank = max(1, max_bytes // (element_size * group_size))
    return per_rank * group_size


def plan_rows(
    bandwidth: Any,
    step_collectives: Sequence[Mapping[str, Any]],
    *,
    world_size: int,
    default_dtype: torch.dtype,
    device_type: str,
) -> list[PlannedRow]:
    """The rows a rank times, in order: the sweep (each size, each op, on the world), then the step's
    recorded collectives. ``default_dtype``: where ``bandwidth.dtype`` is None; ``device_type`` "cpu"
    applies ``bandwidth.cpu_max_bytes``."""
    from harness.run.rank.build import torch_dtype

    dtype = torch_dtype(bandwidth.dtype) if bandwidth.dtype else default_dtype
    element_size = torch.empty((), dtype=dtype).element_size()
    cap = bandwidth.cpu_max_bytes if device_type == "cpu" else None
    rows = []
    for size in bandwidth.sizes:
        if size.layer_of is not None:
            numel = unit_numel(size.layer_of, world_size)
        else:
            numel = math.ceil(size.numel / world_size) * world_size
        for op in bandwidth.ops:
            rows.append(
                PlannedRow(
                    size.name,
                    "sweep",
                    op,
                    dtype,
                    _capped(numel, element_size, world_size, cap),
                    numel,
                    world_size,
                    None,
                    None,
                )
            )
    if bandwidth.step:
        seen: dict[tuple, int] = {}
        for c in step_collectives:
            if c["op"] not in ("all_gather", "reduce_scatter", "all_reduce"):
                continue
            numel = c["buffer_bytes"] // c["element_size"] if c["element_size"] else 0
            key = (c["op"], c["dtype"], numel, c["group_size"], c["mesh_dim"])
            seen[key] = seen.get(key, 0) + 1
        for (op, dtype_name, numel, group_size, mesh_dim), count in seen.items():
            rows.append(
                PlannedRow("step", "step", op, torch_dtype(dtype_name), numel, numel, group_size, mesh_dim, count)
            )
    return rows


CHECK_CHUNK = 3 * 2**20
"""Elements compared at a time when counting ``wrong``: the comparison's float64 copies stay
under 3 x 8 x CHECK_CHUNK bytes (75 MB) whatever the row's size (a multiple of 3: the pattern's period)."""


def _periodic(
    values: Sequence[float], offset: int, numel: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """``numel`` elements, element i ``values[(offset + i) % 3]``, built in ``dtype`` (nothing wider)."""
    base = torch.tensor([values[(offset + k) % 3] for k in range(3)], dtype=dtype, device=device)
    return base.repeat(-(-numel // 3))[:numel]


def _pattern(numel: int, seed: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Element i is ``(i + seed) % 3 - 1``: small integers, exact in every float dtype."""
    return _periodic((-1, 0, 1), seed, numel, dtype, device)


def _exact_sum_ranks(dtype: torch.dtype) -> int:
    """The largest n for which every integer in [-n, n] is exact in ``dtype``: 2 / eps (256 in bfloat16)."""
    return int(round(2 / torch.finfo(dtype).eps))


def _count_wrong(out: torch.Tensor, values: Sequence[float], offset: int, n: int) -> int:
    """Elements of ``out`` off ``values[(offset + i) % 3]``: exactly, or beyond the dtype's rounding of a
    sum over n ranks it cannot hold exactly; NaN is wrong."""
    tolerance = 0.0 if n <= _exact_sum_ranks(out.dtype) else torch.finfo(out.dtype).eps * n
    wrong = torch.zeros((), dtype=torch.int64, device=out.device)
    for lo in range(0, out.numel(), CHECK_CHUNK):
        segment = out[lo : lo + CHECK_CHUNK]
        expected = _periodic(values, offset + lo, segment.numel(), torch.float64, out.device)
        wrong += (~((segment.double() - expected).abs() <= tolerance)).sum()
    return int(wrong)


def _time_row(
    row: PlannedRow, rank: int, group: Any, device: torch.device, warmup: int, iterations: int
) -> tuple[float, int]:
    """(mean seconds per operation on this rank, #wrong) for one row."""
    n = row.group_size
    group_rank = dist.get_rank(group) if group is not None else rank
    chunk = row.numel // n
    if row.op == "all_gather":
        inp = _pattern(chunk, group_rank, row.dtype, device)
        out = torch.empty(row.numel, dtype=row.dtype, device=device)

        def op() -> None:
            dist.all_gather_into_tensor(out, inp, group=group)  # noqa: E704
    elif row.op == "reduce_scatter":
        inp = _pattern(row.numel, group_rank, row.dtype, device)
        out = torch.empty(chunk, dtype=row.dtype, device=device)

        def op() -> None:
            dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.SUM, group=group)  # noqa: E704
    else:
        source = _pattern(row.numel, group_rank, row.dtype, device)
        out = torch.empty_like(source)

        def op() -> (
            None
        ):  # dist.all_reduce works in place: each operation first restores its input (a local copy, timed with it)
            out.copy_(source)
            dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)

    for _ in range(warmup):
        op()
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    dist.barrier(group=group)
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iterations):
            op()
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1e3
    else:
        t0 = time.perf_counter()
        for _ in range(iterations):
            op()
        seconds = time.perf_counter() - t0
    wrong = _wrong(row, out, group_rank, device)
    return seconds / iterations, wrong


def _wrong(row: PlannedRow, out: torch.Tensor, group_rank: int, device: torch.device) -> int:
    n, chunk = row.group_size, row.numel // row.group_size
    if row.op == "all_gather":  # chunk j is rank j's input
        return sum(_count_wrong(out[j * chunk : (j + 1) * chunk], (-1, 0, 1), j, n) for j in range(n))
    # the sum over ranks j of pattern(numel, j) has period 3 too: element i is sums[i % 3];
    # restricted to this rank's chunk (reduce-scatter) or whole (all-reduce)
    sums = [sum((k + j) % 3 - 1 for j in range(n)) for k in range(3)]
    return _count_wrong(out, sums, group_rank * chunk if row.op == "reduce_scatter" else 0, n)


def run_bandwidth(
    rows: Sequence[PlannedRow],
    *,
    rank: int,
    device: torch.device,
    warmup: int,
    iterations: int,
    group_of: Callable[[str | None], Any],
) -> list[dict[str, Any]]:
    """Time every row on this rank; the rank entry's ``bandwidth`` records (schema ``bandwidth_row``).
    Collective: every rank calls it with the same rows in the same order. ``group_of(mesh_dim)``: that
    dim's process group (None: the world)."""
    from harness.run.rank.recorders.collectives import dtype_name

    out = []
    for row in rows:
        group = group_of(row.mesh_dim)
        with warnings.catch_warnings():
            # torch 2.13 marks all_gather_into_tensor / reduce_scatter_tensor deprecated (FutureWarning,
            # once per call site and rank); they are the functions FSDP2's collectives correspond to.
            warnings.simplefilter("ignore", FutureWarning)
            seconds, wrong = _time_row(row, rank, group, device, warmup, iterations)
        element_size = torch.empty((), dtype=row.dtype).element_size()
        out.append(
            {
                "name": row.name,
                "source": row.source,
                "op": row.op,
                "dtype": dtype_name(row.dtype),
                "element_size": element_size,
                "size_bytes": row.numel * element_size,
                "count": row.numel,
                "requested_bytes": row.requested_numel * element_size,
                "group_size": row.group_size,
                "mesh_dim": row.mesh_dim,
                "occurrences": row.occurrences,
                "warmup": warmup,
                "iterations": iterations,
                "time_s": seconds,
                "wrong": wrong,
                "timer": "cuda_events" if device.type == "cuda" else "wall_barrier",
            }
        )
    return out
