"""The bandwidth table in nccl-tests' column layout (out-of-place columns only: FSDP2's collectives
are out of place). Mixing ops and sizes, it adds the op and the row's name (a size of
``setup.bandwidth.sizes`` or ``step``; "capped from S" where a CPU cap applied)."""

from __future__ import annotations

from typing import Sequence

from harness.language.algbw_busbw import BandwidthRow

__all__ = ["nccl_type", "redop", "table_lines", "markdown_table"]

_NCCL_TYPES = {
    "float16": "half",
    "float32": "float",
    "float64": "double",
    "bfloat16": "bfloat16",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "int64": "int64",
}


def nccl_type(dtype: str) -> str:
    """nccl-tests' type name for a torch dtype name (``float16`` -> ``half``)."""
    return _NCCL_TYPES.get(dtype, dtype)


def redop(op: str) -> str:
    """nccl-tests' redop column: ``sum`` for reductions, ``none`` for all-gather."""
    return "none" if op == "all_gather" else "sum"


def _note(row: BandwidthRow) -> str:
    note = row.name
    if row.source == "step":
        note += f" ({row.occurrences}x in the step{', ' + row.mesh_dim if row.mesh_dim else ''})"
    if row.capped:
        note += f" capped from {row.requested_bytes:,} B"
    return note


def table_lines(rows: Sequence[BandwidthRow], *, world_size: int, timer: str | None = None) -> list[str]:
    """The table as text lines, headed as nccl-tests heads its output."""
    timer = timer or (rows[0].timer if rows else "")
    lines = [
        f"# nranks {world_size}  timer {timer}  warmup iters: {rows[0].warmup if rows else 0}  "
        f"iters: {rows[0].iterations if rows else 0}  (time: mean over ranks; GB = 10^9 B)",
        "#" + " " * 62 + "out-of-place",
        f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>5}  {'time':>9}  {'algbw':>7}  "
        f"{'busbw':>7}  {'#wrong':>6}  {'op':<14}  name",
        f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>5}  {'(us)':>9}  {'(GB/s)':>7}  "
        f"{'(GB/s)':>7}  {'':>6}",
    ]
    for r in rows:
        lines.append(
            f"{r.size_bytes:>12}  {r.count:>12}  {nccl_type(r.dtype):>8}  {redop(r.op):>6}  {-1:>5}  "
            f"{r.time_us:>9.1f}  {r.algbw:>7.2f}  {r.busbw:>7.2f}  {r.wrong:>6}  {r.op:<14}  {_note(r)}"
        )
    return lines


def markdown_table(rows: Sequence[BandwidthRow]) -> list[str]:
    """The same columns as a Markdown table."""
    out = [
        "| size (B) | count (elements) | type | redop | root | time (us) | algbw (GB/s) | busbw (GB/s) | #wrong "
        "| op | name |",
        "|---:|---:|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r.size_bytes:,} | {r.count:,} | {nccl_type(r.dtype)} | {redop(r.op)} | -1 | {r.time_us:.1f} | "
            f"{r.algbw:.2f} | {r.busbw:.2f} | {r.wrong} | {r.op} | {_note(r)} |"
        )
    return out
