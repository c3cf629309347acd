"""One timeline for every rank: per-rank ``torch.profiler`` Chrome traces merged into one file.

Each rank's ``export_chrome_trace`` file (``{"traceEvents": [...], "baseTimeNanoseconds": ...}``,
``ts`` and ``dur`` in microseconds) carries its own OS pid. :func:`merge_traces` gives every event
of rank r ``pid = r``, replaces the process metadata with "rank r", moves timestamps onto the
earliest rank's ``baseTimeNanoseconds`` (one clock) and makes flow-event ids unique per rank.
:func:`compact_trace` keeps only FSDP's labels and the collectives. Nothing here imports torch."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

__all__ = [
    "merge_traces",
    "compact_trace",
    "collective_events",
    "profiler_name",
    "read_rank_traces",
    "write_merged",
    "TraceError",
    "RANK_FILE",
]

#: Per-rank trace file name written by ``harness.run.rank.step.run_step(trace_dir=...)``.
RANK_FILE = re.compile(r"^rank(\d+)\.json$")

_PROCESS_META = {"process_name", "process_labels", "process_sort_index"}
_FLOW_PHASES = {"s", "t", "f"}
_FLOW_ID_STRIDE = 1 << 32
# Events a compact trace keeps: FSDP's record_function labels, dispatcher-level collectives,
# and the backend's own collective spans (gloo:all_gather, nccl:all_gather, ...).
_COMPACT_NAME = re.compile(r"^(FSDP::|c10d::|gloo:|nccl:|ProfilerStep)")


class TraceError(ValueError):
    """A trace that cannot be merged; the message names the file or rank and what is wrong."""


def profiler_name(c10d_op: str) -> str:
    """``"c10d._allgather_base_.default"`` -> ``"c10d::_allgather_base_"``: the profiler's event name of
    the observation's ``c10d_op``."""
    namespace, name = c10d_op.split(".", 1)
    return f"{namespace}::{name.rsplit('.', 1)[0]}"


def _events(trace: Mapping[str, Any], where: str) -> list[Mapping[str, Any]]:
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        raise TraceError(f"{where}: traceEvents: expected a list of trace events")
    return events


def merge_traces(traces: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """One Chrome trace of ``traces`` (rank -> trace), one process per rank: ``{"traceEvents",
    "displayTimeUnit": "ms", "baseTimeNanoseconds", "otherData": {"ranks"}}``, each rank's metadata
    then its events, ranks ascending. Raises TraceError: a trace has no ``traceEvents`` list."""
    if not traces:
        raise TraceError("no rank traces to merge")
    bases = {r: int(t.get("baseTimeNanoseconds") or 0) for r, t in traces.items()}
    base = min(bases.values())
    merged: list[dict[str, Any]] = []
    for rank in sorted(traces):
        events = _events(traces[rank], f"rank {rank}")
        shift_us = (bases[rank] - base) / 1000.0
        merged.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
        merged.append({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
        for ev in events:
            if ev.get("ph") == "M" and ev.get("name") in _PROCESS_META:
                continue
            out = dict(ev)
            out["pid"] = rank
            if shift_us and isinstance(out.get("ts"), (int, float)):
                out["ts"] = out["ts"] + shift_us
            if out.get("ph") in _FLOW_PHASES and isinstance(out.get("id"), int):
                out["id"] = rank * _FLOW_ID_STRIDE + out["id"]
            merged.append(out)
    return {
        "traceEvents": merged,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base,
        "otherData": {"ranks": sorted(traces), "merged_by": "harness.report.trace.merge_traces"},
    }


def compact_trace(trace: Mapping[str, Any]) -> dict[str, Any]:
    """``trace`` with only metadata, FSDP:: labels, c10d:: ops and backend collective spans."""
    events = [
        ev
        for ev in _events(trace, "trace")
        if ev.get("ph") == "M" or (ev.get("ph") == "X" and _COMPACT_NAME.match(str(ev.get("name", ""))))
    ]
    return {**{k: v for k, v in trace.items() if k != "traceEvents"}, "traceEvents": events}


def collective_events(trace: Mapping[str, Any], pid: int) -> list[str]:
    """Names of the outermost ``c10d::`` events of process ``pid``, in time order (one dispatched op is
    nested same-named events, one per active dispatch mode)."""
    spans = sorted(
        (
            (float(ev["ts"]), -float(ev.get("dur", 0)), ev.get("tid"), ev["name"])
            for ev in _events(trace, "trace")
            if ev.get("ph") == "X" and ev.get("pid") == pid and str(ev.get("name", "")).startswith("c10d::")
        ),
        key=lambda s: s[:2],
    )
    kept: list[tuple[float, float, Any, str]] = []
    for ts, neg_dur, tid, name in spans:
        end = ts - neg_dur
        if any(k_name == name and k_tid == tid and k_ts <= ts and end <= k_end for k_ts, k_end, k_tid, k_name in kept):
            continue
        kept.append((ts, end, tid, name))
    return [name for _, _, _, name in kept]


def read_rank_traces(folder: str | Path) -> dict[int, dict[str, Any]]:
    """rank -> trace from ``folder``'s ``rank<r>.json`` files; TraceError names a missing or non-JSON file."""
    folder = Path(folder)
    traces = {}
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        m = RANK_FILE.match(path.name)
        if not m:
            continue
        try:
            traces[int(m.group(1))] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise TraceError(f"{path}: not a readable Chrome trace: {exc}") from None
    if not traces:
        raise TraceError(f"{folder}: no rank<r>.json trace files")
    return traces


def write_merged(folder: str | Path, out: str | Path, *, compact: bool = False) -> dict[str, Any]:
    """Merge the rank traces in ``folder`` into ``out`` (compacted if asked); returns the trace."""
    merged = merge_traces(read_rank_traces(folder))
    if compact:
        merged = compact_trace(merged)
    Path(out).write_text(json.dumps(merged, separators=(",", ":")), encoding="utf-8")
    return merged


def ranks_of(trace: Mapping[str, Any]) -> list[int]:
    """The ranks named by ``process_name`` metadata ("rank N") of a merged trace."""
    out = []
    for ev in _events(trace, "trace"):
        if ev.get("ph") == "M" and ev.get("name") == "process_name":
            m = re.fullmatch(r"rank (\d+)", str(ev.get("args", {}).get("name", "")))
            if m and int(m.group(1)) == ev.get("pid"):
                out.append(ev["pid"])
    return sorted(out)


def _iter_collectives(observation: Mapping[str, Any]) -> Iterable[tuple[int, list[str]]]:
    for rank_doc in observation["ranks"]:
        yield (
            rank_doc["rank"],
            [profiler_name(c["c10d_op"]) for c in rank_doc["collectives"] if c.get("phase") != "setup"],
        )


def missing_collectives(trace: Mapping[str, Any], observation: Mapping[str, Any]) -> list[str]:
    """One line per rank whose profiled ``c10d::`` collectives (outside ``setup``) are not the
    observation's, in order; empty when they agree."""
    problems = []
    for rank, expected in _iter_collectives(observation):
        seen = collective_events(trace, rank)
        if seen != expected:
            problems.append(f"rank {rank}: observation {expected}, trace {seen}")
    return problems
