"""Attribution: each recorded collective's FSDP unit, label and hook, from the profiler.

The i-th dispatched op is the i-th outermost profiler c10d event of the same name; its unit and
label come from the FSDP ``record_function`` labels around it (torch 2.13 ``_fsdp_param_group.py``,
``_fsdp_state.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from .c10d_ops import NAMESPACES, OP_KIND

__all__ = [
    "AttributionError",
    "Span",
    "attribute",
    "call_span_name",
    "called_unit",
    "host_events",
    "parse_fsdp_label",
    "profiler_spans",
    "resolve_mesh_dims",
]

# Labels FSDP builds with FSDPParamGroup._with_fqn: "FSDP::<name>" for the root (module FQN
# ''), "FSDP::<name> (<fqn>)" otherwise, with " [pg=<n>]" appended when a module has several
# parameter groups. Labels made by FSDPState ("FSDP::root_pre_forward", "FSDP::inputs_to_device",
# "FSDP::cast_forward_inputs", "FSDP::root_post_backward_callback") name no unit.
_UNIT_LABELS = {
    "FSDP::all_gather",
    "FSDP::all_gather_copy_out",
    "FSDP::pre_forward",
    "FSDP::post_forward",
    "FSDP::pre_backward",
    "FSDP::post_backward",
    "FSDP::post_backward_accumulate",
    "FSDP::post_backward_reshard",
    "FSDP::post_backward_reduce",
    "FSDP::post_backward_rs_wait",
}
# The loop's own span around a manual FSDPModule call ("HARNESS::call unshard layers.0"): before the
# root's lazy init FSDP's labels carry no FQN ("FSDP::all_gather"), which would read as the root.
CALL_MARK = "HARNESS::call "
_CALL = re.compile(r"^HARNESS::call (?P<method>\S+) (?P<unit>\S+)$")
_WITH_FQN = re.compile(r"^(?P<label>FSDP::[A-Za-z_]+)(?: \((?P<fqn>[^)]*)\))?(?: \[pg=\d+\])?$")
_PREFETCH = re.compile(r"^(?P<label>FSDP::(?:forward|backward)_prefetch) for ?(?P<fqn>.*)$")
# Labels that carry data, not a hook: the hook is the innermost enclosing label of another kind.
_NOT_HOOKS = {"FSDP::all_gather", "FSDP::all_gather_copy_out"}


def call_span_name(method: str, unit: str) -> str:
    """The profiler span the loop opens around ``unit.<method>()`` (``unit`` "" is the root)."""
    return f"{CALL_MARK}{method} {unit or 'root'}"


def called_unit(span: "Span", calls: Iterable["Span"]) -> str | None:
    """The unit of the innermost loop call span around ``span`` (by wall time), None outside all."""
    around = [c for c in calls if c.start <= span.start and span.end <= c.end]
    if not around:
        return None
    unit = _CALL.match(around[-1].name)["unit"]
    return "" if unit == "root" else unit


def parse_fsdp_label(name: str) -> tuple[str, str | None]:
    """Split an FSDP profiler label into (label, unit): ``"FSDP::all_gather (layers.0)"`` ->
    ``("FSDP::all_gather", "layers.0")``; the unit is "" for the root, None for a label that names
    none."""
    m = _PREFETCH.match(name)
    if m:
        return m["label"], m["fqn"]
    m = _WITH_FQN.match(name)
    if m:
        label = m["label"]
        if m["fqn"] is not None:
            return label, m["fqn"]
        return label, ("" if label in _UNIT_LABELS else None)
    return name, None


class AttributionError(RuntimeError):
    """The dispatcher's and the profiler's lists of collectives do not line up."""


@dataclass(frozen=True)
class Span:
    """One profiler event: name, [start, end] in ns, thread."""

    name: str
    start: int
    end: int
    thread: int

    def contains(self, other: "Span") -> bool:
        return self.thread == other.thread and self.start <= other.start and other.end <= self.end


def _profiler_name(c10d_op: str) -> str:
    """``"c10d._allgather_base_.default"`` -> ``"c10d::_allgather_base_"``."""
    namespace, name = c10d_op.split(".", 1)
    return f"{namespace}::{name.rsplit('.', 1)[0]}"


_COLLECTIVE_EVENT_NAMES = {f"{ns}::{op}" for ns in NAMESPACES for op in OP_KIND}


def host_events(prof: Any) -> Iterator[Any]:
    """The raw Kineto events of a finished profile that ran on the CPU (not a CUDA trace's GPU copies)."""
    from torch.autograd import DeviceType

    return (ev for ev in prof.kineto_results.events() if ev.device_type() == DeviceType.CPU)


def profiler_spans(prof: Any) -> list[Span]:
    """The FSDP label and collective events of a finished profile (raw Kineto events: ~50x cheaper
    than ``FunctionEvent``)."""
    spans = []
    for ev in host_events(prof):
        name = ev.name()
        if name.startswith(("FSDP::", CALL_MARK)) or name in _COLLECTIVE_EVENT_NAMES:
            spans.append(Span(name, ev.start_ns(), ev.end_ns(), ev.start_thread_id()))
    spans.sort(key=lambda sp: (sp.start, -sp.end))
    return spans


def attribute(records: list[dict[str, Any]], spans: Iterable[Span]) -> list[dict[str, Any]]:
    """Add ``unit``, ``fsdp_label``, ``fsdp_labels`` and ``hook`` to each record (in place; returns them).

    Each comes from the innermost enclosing label: ``hook`` from one that is not a data movement
    (``all_gather``, ``all_gather_copy_out``). Raises AttributionError where the profiler saw other
    collectives.
    """
    spans = sorted(spans, key=lambda sp: (sp.start, -sp.end))
    labels_all = [sp for sp in spans if sp.name.startswith("FSDP::")]
    calls = [sp for sp in spans if sp.name.startswith(CALL_MARK)]
    collectives_all = [sp for sp in spans if not sp.name.startswith(("FSDP::", CALL_MARK))]
    # The profiler shows one op as nested events of the same name (one level per active
    # dispatch mode, with "PythonDispatchMode" events between them), and a functional
    # collective (``_c10d_functional::all_reduce``, DTensor's) with the c10d op it calls inside
    # it: keep the outermost.
    seen: list[Span] = []
    for sp in collectives_all:
        if not any(o.contains(sp) for o in seen[-8:]):
            seen.append(sp)
    if len(seen) != len(records):
        raise AttributionError(
            f"the dispatcher saw {len(records)} collectives, the profiler {len(seen)}: "
            f"dispatcher {[r['c10d_op'] for r in records]}, profiler {[sp.name for sp in seen]}"
        )
    for record, sp in zip(records, seen):
        expected = _profiler_name(record["c10d_op"])
        if sp.name != expected:
            raise AttributionError(
                f"collective #{record['index']}: the dispatcher saw {record['c10d_op']}, "
                f"the profiler {sp.name} at the same position"
            )
        labels = [lab.name for lab in labels_all if lab.start <= sp.start and lab.contains(sp)]  # outermost first
        unit = None
        for name in reversed(labels):
            unit = parse_fsdp_label(name)[1]
            if unit is not None:
                break
        if unit == "":  # a label with no FQN: the root's, or any unit's before the root's lazy init
            unit = called_unit(sp, calls) or ""
        hook = None
        for name in reversed(labels):
            label = parse_fsdp_label(name)[0]
            if label not in _NOT_HOOKS:
                hook = label.removeprefix("FSDP::")
                break
        record["unit"] = unit
        record["fsdp_label"] = parse_fsdp_label(labels[-1])[0] if labels else None
        record["fsdp_labels"] = labels
        record["hook"] = hook
    return records


def resolve_mesh_dims(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Where a record's group serves several mesh dims (``[1, 1]``), pick the one FSDP2 issues it on
    (``foreach_reduce``): all-reduce on dim 0, other ops on the last."""
    for record in records:
        dims = record.get("mesh_dim")
        if isinstance(dims, (tuple, list)):
            record["mesh_dim"] = dims[0] if record["op"] == "all_reduce" else dims[-1]
    return records
