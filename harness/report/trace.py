"""One timeline for every rank: per-rank ``torch.profiler`` Chrome traces merged into one file.

Each rank's profiler (``torch.autograd.profiler.profile(use_kineto=True)``, exported with
``export_chrome_trace``) writes a Chrome trace event file (the JSON object format:
``{"traceEvents": [...], "baseTimeNanoseconds": ..., ...}``; event fields ``ph``, ``name``,
``pid``, ``tid``, ``ts`` and ``dur`` in microseconds). Every rank's events carry its own OS
process id, so opened side by side they do not line up by rank. :func:`merge_traces` puts
them in one trace with one process per rank:

- every event of rank r gets ``pid = r`` (its thread ids are kept);
- the ranks' own process metadata (``process_name``, ``process_labels``,
  ``process_sort_index``) is replaced by ``process_name`` "rank r" and
  ``process_sort_index`` r;
- timestamps are moved onto the earliest rank's ``baseTimeNanoseconds`` (Kineto writes
  ``ts`` relative to it), so events of all ranks share one clock (on one host, the same
  clock; across nodes, as good as the nodes' clocks agree);
- flow-event ids (``ph`` s / t / f, e.g. the forward-backward links) are made unique per
  rank, so no arrow joins two ranks.

Then Perfetto (ui.perfetto.dev) or chrome://tracing shows FSDP's labels (``FSDP::pre_forward``,
``FSDP::all_gather``, ``FSDP::post_backward_reduce``, ...) and the c10d collectives
(``c10d::_allgather_base_``, ``c10d::_reduce_scatter_base_``) of all ranks on one timeline.
:func:`compact_trace` keeps only those events (and the ranks' metadata): a file of a few
hundred events instead of tens of thousands.

Pure functions of dicts, plus two small file helpers; nothing here imports torch.
"""

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
    """The profiler's event name of a dispatcher op: ``"c10d._allgather_base_.default"`` ->
    ``"c10d::_allgather_base_"`` (the observation's ``c10d_op`` field)."""
    namespace, name = c10d_op.split(".", 1)
    return f"{namespace}::{name.rsplit('.', 1)[0]}"


def _events(trace: Mapping[str, Any], where: str) -> list[Mapping[str, Any]]:
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        raise TraceError(f"{where}: traceEvents: expected a list of trace events")
    return events


def merge_traces(traces: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """One Chrome trace with one process per rank (module docstring).

    Args:
        traces: rank -> that rank's Chrome trace (a JSON object with ``traceEvents``).

    Returns:
        ``{"traceEvents": [...], "displayTimeUnit": "ms", "baseTimeNanoseconds": ...,
        "otherData": {"ranks": [...]}}``: first each rank's process metadata, then its events
        in their original order, ranks ascending.

    Raises:
        TraceError: a trace has no ``traceEvents`` list.
    """
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
    """Names of the outermost ``c10d::`` events of process ``pid``, in time order.

    The profiler shows one dispatched op as nested events of the same name (one level per
    active dispatch mode): an event inside a same-named event on the same thread is not counted.
    """
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
    """rank -> trace, from the ``rank<r>.json`` files in ``folder``.

    Raises:
        TraceError: no such file, or a file that is not JSON (names the file).
    """
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
    """Where a merged trace and an observation disagree: per rank, the profiled ``c10d::``
    collectives must be the observation's (outside ``setup``, when the profiler is not yet
    on), in order. Returns one line per rank that differs (empty: they agree)."""
    problems = []
    for rank, expected in _iter_collectives(observation):
        seen = collective_events(trace, rank)
        if seen != expected:
            problems.append(f"rank {rank}: observation {expected}, trace {seen}")
    return problems
