"""Collectives in issue order: sizes from the dispatcher, attribution from the profiler.

Two of torch's own signals, joined by position:

1. :class:`CollectiveRecorder`, a ``TorchDispatchMode``, sees every c10d op FSDP issues
   (``c10d._allgather_base_.default``, ``c10d._reduce_scatter_base_.default``,
   ``c10d.allreduce_.default`` for HSDP, ...) with its tensors and process group, hence dtype,
   element counts and group. This works unchanged with the fake process group under
   ``FakeTensorMode`` (the tensors are fake, the sizes real).
2. ``torch.profiler`` records FSDP's ``record_function`` labels
   (``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``, ``_fsdp_state.py``, torch
   2.13): ``FSDP::pre_forward (layers.0)``, ``FSDP::all_gather (layers.0)``,
   ``FSDP::backward_prefetch for layers.0``, ``FSDP::post_backward_reduce (layers.1)``,
   ``FSDP::root_post_backward_callback``, ... and an event per c10d op
   (``c10d::_allgather_base_``, nested under itself once per active dispatch mode).

:func:`attribute` matches the i-th dispatched op to the i-th outermost profiler c10d event of
the same name (it raises :class:`AttributionError` if the two lists disagree) and takes the
FSDP unit and label from the profiler event's enclosing ``FSDP::`` events. The profiler's own
``input_shapes``/``input_dtypes`` would give sizes too, but only with ``record_shapes=True``
and only as shapes; the dispatcher sees the tensors and the process group themselves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["CollectiveRecorder", "AttributionError", "Span", "attribute", "dtype_name", "parse_fsdp_label", "profiler_spans",
           "resolve_mesh_dims", "REDUCE_OPS"]

# Namespaces whose ops are collectives. ``_c10d_functional`` is what DTensor and compiled
# code use; eager FSDP2 issues the in-place ``c10d`` ops.
_NAMESPACES = ("c10d", "_c10d_functional")
# Not collectives: waits, and DTensor's autograd wrapper of a functional collective's result
# (clip_grad_norm_ over DTensor gradients dispatches it after its all_reduce).
_NOT_COLLECTIVES = {"wait_tensor", "wait", "work_wait", "_wrap_tensor_autograd"}

_OP_KIND = {
    "_allgather_base_": "all_gather",
    "allgather_": "all_gather",
    "allgather_coalesced_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather",
    "all_gather_into_tensor_out": "all_gather",
    "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "allreduce_": "all_reduce",
    "allreduce_coalesced_": "all_reduce",
    "all_reduce": "all_reduce",
    "all_reduce_": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "all_reduce_coalesced_": "all_reduce",
    "broadcast_": "broadcast",
    "broadcast": "broadcast",
    "alltoall_": "all_to_all",
    "alltoall_base_": "all_to_all",
    "all_to_all_single": "all_to_all",
    "barrier": "barrier",
    "monitored_barrier_": "barrier",
    "send": "send",
    "recv_": "recv",
    "recv_any_source_": "recv",
}


# c10d's ReduceOp.RedOpType values (torch/csrc/distributed/c10d/Types.hpp, torch 2.13): what the
# boxed ReduceOp of a dispatched c10d op reports through its one method, ``op()``.
REDUCE_OPS: dict[int, str] = {
    0: "SUM", 1: "AVG", 2: "PRODUCT", 3: "MIN", 4: "MAX", 5: "BAND", 6: "BOR", 7: "BXOR", 8: "PREMUL_SUM",
}


def _reduce_op(arguments: Mapping[str, Any]) -> str | None:
    """The ReduceOp a c10d op was called with, by name (None if it takes none).

    The dispatcher sees it as a ``torch.ScriptObject`` of class ``c10d.ReduceOp`` whose ``op()``
    returns the ``RedOpType`` value; a PREMUL_SUM's factor is not exposed by that object.
    """
    for value in arguments.values():
        if isinstance(value, torch.ScriptObject):
            try:
                if value._type().name() == "ReduceOp":
                    code = int(value.op())
                    return REDUCE_OPS.get(code, f"RedOpType({code})")
            except Exception:  # noqa: BLE001 - another kind of ScriptObject
                continue
    return None


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float16`` -> ``"float16"`` (the observation document's dtype names)."""
    return str(dtype).removeprefix("torch.")


def _tensors(value: Any) -> list[torch.Tensor]:
    """Every tensor in a (possibly nested) list/tuple argument, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _numel(tensors: Iterable[torch.Tensor]) -> int:
    return sum(int(t.numel()) for t in tensors)


def _resolve_group(arguments: Mapping[str, Any]) -> Any:
    """The ProcessGroup an op runs on: a boxed ScriptObject (c10d) or a group name (functional)."""
    for value in arguments.values():
        if isinstance(value, torch.ScriptObject):
            try:
                return dist.ProcessGroup.unbox(value)
            except Exception:  # not a ProcessGroup (a ReduceOp, a Work)
                continue
    name = arguments.get("group_name")
    if isinstance(name, str):
        from torch.distributed.distributed_c10d import _resolve_process_group

        return _resolve_process_group(name)
    return None


def _arguments(func, args, kwargs) -> dict[str, Any]:
    """The op's arguments by their schema names (those passed, positionally or by keyword)."""
    arguments: dict[str, Any] = {}
    for i, arg in enumerate(func._schema.arguments):
        if i < len(args):
            arguments[arg.name] = args[i]
        elif arg.name in kwargs:
            arguments[arg.name] = kwargs[arg.name]
    return arguments


def _group_span(arguments: Mapping[str, Any]) -> list[int] | None:
    """The op's group as ``[first global rank, stride, size]`` (DeviceMesh groups are arithmetic
    progressions), or None when unknown or irregular: compact enough for a progress slot at any
    world size, and what hang diagnosis needs to tell who can complete a collective."""
    try:
        group = _resolve_group(arguments)
        ranks = dist.get_process_group_ranks(group) if group is not None else None
    except Exception:  # a group this process cannot resolve: leave membership unknown
        return None
    if not ranks:
        return None
    stride = ranks[1] - ranks[0] if len(ranks) > 1 else 1
    if any(b - a != stride for a, b in zip(ranks, ranks[1:])):
        return None
    return [ranks[0], stride, len(ranks)]


class CollectiveRecorder(TorchDispatchMode):
    """Records every c10d op dispatched while active, in issue order.

    Args:
        phase: returns the current phase name (``Phases.current``).
        group_dims: ProcessGroup ``group_name`` -> mesh dim name, or a tuple of the names of
            every mesh dim whose group it is (on a ``[1, 1]`` mesh both dims are the default
            group): :func:`resolve_mesh_dims` then chooses by how FSDP issued the collective.

    After the run, :attr:`records` holds one dict per op with the schema's collective fields
    except the profiler-derived ones (``unit``, ``fsdp_label``, ``fsdp_labels``, ``hook``),
    which :func:`attribute` adds.
    """

    def __init__(self, phase: Callable[[], str], group_dims: Mapping[str, Any], collective_log: Any = None) -> None:
        super().__init__()
        self.phase = phase
        self.group_dims = dict(group_dims)
        self.records: list[dict[str, Any]] = []
        self.progress = _Progress(collective_log) if collective_log is not None else None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: D105
        kwargs = kwargs or {}
        # Let tensor subclasses (DTensor) desugar first: their local ops come back through
        # this mode, so a collective issued by DTensor itself is seen on plain tensors.
        from torch.distributed.tensor import DTensor

        if any(issubclass(t, DTensor) for t in types):
            return NotImplemented
        namespace = func.namespace
        op_name = func._schema.name.split("::", 1)[-1]
        if namespace in _NAMESPACES and op_name not in _NOT_COLLECTIVES:
            arguments = _arguments(func, args, kwargs)
            if self.progress is not None:
                self.progress.entered(len(self.records), _OP_KIND.get(op_name, "other"), self.phase(),
                                      _group_span(arguments))
            if namespace == "c10d":
                # In-place ops: every buffer is an argument. Recorded before it runs, so a
                # collective that raises (gloo refusing PREMUL_SUM) is in the record too.
                self._record(func, op_name, arguments, None)
                out = func(*args, **kwargs)
                if self.progress is not None:
                    self.progress.issued(out)
                return out
            out = func(*args, **kwargs)
            self._record(func, op_name, arguments, out)
            if self.progress is not None:
                self.progress.issued(out)
            return out
        if namespace == "profiler" and self.progress is not None:
            return self.progress.label(func, op_name, args, kwargs)
        return func(*args, **kwargs)

    def __exit__(self, *exc: Any) -> Any:
        if self.progress is not None:
            self.progress.stop()
        return super().__exit__(*exc)

    def settle(self) -> None:
        """A new phase began: every collective issued so far was waited on; hang diagnosis
        reports them completed and lets go of their works (and the tensors they hold)."""
        if self.progress is not None:
            self.progress.settle(waited=True)

    def _record(self, func, op_name: str, arguments: Mapping[str, Any], out) -> None:
        ins: list[torch.Tensor] = []
        outs: list[torch.Tensor] = []
        for name, value in arguments.items():
            tensors = _tensors(value)
            if not tensors:
                continue
            if name.startswith("output"):
                outs += tensors
            elif name.startswith("input") or name == "self":
                ins += tensors
            else:  # in-place buffers: allreduce_/broadcast_ "tensors", barrier "tensor"
                ins += tensors
                outs += tensors
        if func.namespace == "_c10d_functional":  # functional: the result is the output
            outs = _tensors(out)
        kind = _OP_KIND.get(op_name, "other")
        first = (ins or outs or [None])[0]
        element_size = int(first.element_size()) if first is not None else 0
        numel_in, numel_out = _numel(ins), _numel(outs)
        if kind == "all_gather":
            buffer_numel = numel_out
        elif kind == "reduce_scatter":
            buffer_numel = numel_in
        else:
            buffer_numel = max(numel_in, numel_out)
        group = _resolve_group(arguments)
        group_size = int(group.size()) if group is not None else int(arguments.get("group_size", 1))
        group_name = getattr(group, "group_name", None) if group is not None else None
        self.records.append(
            {
                "index": len(self.records),
                "op": kind,
                "c10d_op": str(func),
                "dtype": dtype_name(first.dtype) if first is not None else "float32",
                "element_size": element_size,
                "numel_in": numel_in,
                "numel_out": numel_out,
                "buffer_bytes": buffer_numel * element_size,
                "group_size": group_size,
                "mesh_dim": self.group_dims.get(group_name) if group_name is not None else None,
                "reduce_op": _reduce_op(arguments),
                "phase": self.phase(),
            }
        )


class _Progress:
    """Live progress for hang diagnosis (``harness.run.hang``): each collective as it is
    entered, with the FSDP unit of the ``FSDP::`` labels open at that moment (FSDP's
    ``record_function`` calls dispatch ``profiler._record_function_enter_new`` / ``_exit``, which
    this mode sees whether or not a profiler runs), and as its ``Work`` completes (a daemon
    thread polls ``Work.is_completed()``: gloo's works do not all offer a future)."""

    POLL_S = 0.05

    def __init__(self, sink: Any) -> None:
        import threading

        self.sink = sink
        self.local = threading.local()
        self.current: dict[str, Any] | None = None
        self.pending: list[tuple[Any, dict[str, Any]]] = []
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread: Any = None

    def label(self, func, op_name: str, args, kwargs):
        out = func(*args, **kwargs)
        stack = getattr(self.local, "stack", None)
        if stack is None:
            stack = self.local.stack = []
        if op_name.startswith("_record_function_enter"):
            stack.append(str(args[0]) if args else "")
        elif op_name.startswith("_record_function_exit") and stack:
            stack.pop()
        return out

    def _unit(self) -> str | None:
        for name in reversed(getattr(self.local, "stack", None) or []):
            if name.startswith("FSDP::"):
                unit = parse_fsdp_label(name)[1]
                if unit is not None:
                    return unit
        return None

    def entered(self, seq: int, op: str, phase: str, group: list[int] | None = None) -> None:
        self.current = {"seq": seq, "op": op, "unit": self._unit(), "phase": phase}
        if group is not None:
            self.current["group"] = group
        self.sink.entered(self.current)

    def issued(self, out: Any) -> None:
        record, self.current = self.current, None
        works = [w for w in _works(out)]
        if not works:  # nothing asynchronous to wait for: done when the op returns
            self.sink.completed(record)
            return
        with self.lock:
            self.pending.append((works, record))
        if self.thread is None:
            import threading

            self.thread = threading.Thread(target=self._poll, name="fsdp2-harness-progress", daemon=True)
            self.thread.start()

    def _poll(self) -> None:
        while not self.stopped.wait(self.POLL_S):
            self.settle()

    def settle(self, *, waited: bool = False) -> None:
        """Report the works that ended since the last look and let go of them: a ``Work`` keeps
        its tensors (a reduce-scatter's output, which the sharded gradients view) alive, and
        FSDPMemTracker would count them after ``zero_grad`` freed the gradients.

        ``waited``: the rank's thread moved on to a new phase, so every collective issued before
        was waited on (FSDP waits for its all-gathers in forward and for its reduce-scatters by
        the end of backward): report them all completed. gloo's ``reduce_scatter_tensor`` returns
        a ``Work`` whose ``is_completed()`` stays False after ``wait()`` (torch 2.13)."""
        with self.lock:  # the poll thread and the rank's thread both settle: one at a time, in order
            states = [(w, r, [_state(x) for x in w]) for w, r in self.pending]
            done = [(r, st) for _, r, st in states if waited or "pending" not in st]
            self.pending = [(w, r) for w, r, st in states if not waited and "pending" in st]
            # a failed work (a timeout) ended but did not complete: it stays the rank's open collective
            for record, _ in sorted((d for d in done if "failed" not in d[1]), key=lambda d: d[0]["seq"]):
                self.sink.completed(record)

    def stop(self) -> None:
        self.stopped.set()


def _works(out: Any) -> list[Any]:
    """The ``Work`` objects a c10d op returned (boxed as ScriptObjects)."""
    found = []
    for value in out if isinstance(out, (tuple, list)) else [out]:
        if isinstance(value, torch.ScriptObject):
            try:
                found.append(dist.distributed_c10d.Work.unbox(value))
            except Exception:  # not a Work
                continue
    return found


def _state(work: Any) -> str:
    """"pending", "ok" or "failed" (``Work.is_completed``). Not ``Work.is_success``: torch 2.13
    deprecates it and prints a warning from every rank on each call; a failed collective raises
    in the rank that waits on it, which the launcher reports."""
    try:
        return "ok" if work.is_completed() else "pending"
    except Exception:
        return "failed"


# --- attribution from the profiler ------------------------------------------------------------

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
_WITH_FQN = re.compile(r"^(?P<label>FSDP::[A-Za-z_]+)(?: \((?P<fqn>[^)]*)\))?(?: \[pg=\d+\])?$")
_PREFETCH = re.compile(r"^(?P<label>FSDP::(?:forward|backward)_prefetch) for ?(?P<fqn>.*)$")
# Labels that carry data, not a hook: the hook is the innermost enclosing label of another kind.
_NOT_HOOKS = {"FSDP::all_gather", "FSDP::all_gather_copy_out"}


def parse_fsdp_label(name: str) -> tuple[str, str | None]:
    """Split an FSDP profiler label into (label, unit).

    ``"FSDP::all_gather (layers.0)"`` -> ``("FSDP::all_gather", "layers.0")``;
    ``"FSDP::pre_forward"`` -> ``("FSDP::pre_forward", "")`` (the root unit);
    ``"FSDP::backward_prefetch for layers.0"`` -> ``("FSDP::backward_prefetch", "layers.0")``;
    ``"FSDP::root_pre_forward"`` -> ``("FSDP::root_pre_forward", None)`` (no unit).
    """
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


_COLLECTIVE_EVENT_NAMES = {f"{ns}::{op}" for ns in _NAMESPACES for op in _OP_KIND}


def profiler_spans(prof: Any) -> list[Span]:
    """The FSDP label and collective events of a finished ``torch.autograd.profiler.profile``.

    Reads the raw Kineto events (``prof.kineto_results.events()``): building the profiler's
    ``FunctionEvent`` tree costs ~50x more (about 1.5 s for 30k events on this machine).
    """
    spans = []
    for ev in prof.kineto_results.events():
        name = ev.name()
        if name.startswith("FSDP::") or name in _COLLECTIVE_EVENT_NAMES:
            spans.append(Span(name, ev.start_ns(), ev.end_ns(), ev.start_thread_id()))
    spans.sort(key=lambda sp: (sp.start, -sp.end))
    return spans


def attribute(records: list[dict[str, Any]], spans: Iterable[Span]) -> list[dict[str, Any]]:
    """Add ``unit``, ``fsdp_label``, ``fsdp_labels`` and ``hook`` to each collective record.

    Args:
        records: :attr:`CollectiveRecorder.records`, in issue order.
        spans: :func:`profiler_spans` of a profiler that was active over the same ops.

    The unit is the one named by the innermost enclosing label that names a unit;
    ``fsdp_label`` is the innermost enclosing label without its unit suffix; ``hook`` is the
    innermost enclosing label that is not a data movement (``all_gather``,
    ``all_gather_copy_out``), without the ``FSDP::`` prefix: ``pre_forward``,
    ``pre_backward``, ``backward_prefetch``, ``post_backward_reduce``, ...

    Returns:
        ``records``, each updated in place.

    Raises:
        AttributionError: the profiler saw a different number or sequence of collectives.
    """
    spans = sorted(spans, key=lambda sp: (sp.start, -sp.end))
    labels_all = [sp for sp in spans if sp.name.startswith("FSDP::")]
    collectives_all = [sp for sp in spans if not sp.name.startswith("FSDP::")]
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
    """Give each record whose group serves several mesh dims the one FSDP issued it on.

    A ``[1, 1]`` HSDP mesh (or any mesh whose dims share a process group) leaves the group name
    ambiguous. FSDP2 issues all-gathers and reduce-scatters on the shard group (the last mesh
    dim) and the gradient all-reduce on the replicate group (dim 0) (``foreach_reduce``,
    ``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``): an ambiguous all-reduce is
    attributed to the first candidate dim, any other op to the last. Records with one mesh dim
    are left as they are. Updates ``records`` in place and returns it.
    """
    for record in records:
        dims = record.get("mesh_dim")
        if isinstance(dims, (tuple, list)):
            record["mesh_dim"] = dims[0] if record["op"] == "all_reduce" else dims[-1]
    return records
