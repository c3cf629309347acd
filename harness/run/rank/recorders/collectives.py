"""Collectives in issue order, from the dispatcher: :class:`CollectiveRecorder`.

A ``TorchDispatchMode`` sees every c10d op FSDP issues with its tensors and process group (under the
fake process group too). It keeps plain values only and issues nothing.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import torch
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode

from . import c10d_arguments as c10d_args
from .attribution import AttributionError, Span, attribute, parse_fsdp_label, profiler_spans, resolve_mesh_dims
from .c10d_ops import NAMESPACES, REDUCE_OPS, dtype_name, is_collective, op_kind
from .hang_progress import HangProgress

__all__ = [
    "CollectiveRecorder",
    "AttributionError",
    "Span",
    "attribute",
    "dtype_name",
    "parse_fsdp_label",
    "profiler_spans",
    "resolve_mesh_dims",
    "REDUCE_OPS",
    "record_of",
]

# The namespaces whose ops the recorder looks at; every other op (the step's compute, and under
# FakeTensorMode the device queries, prim.device, two of every three ops dispatched) goes straight on.
_LOOKED_AT = frozenset(NAMESPACES) | {"profiler"}


def record_of(
    func, op_name: str, named: Mapping[str, Any], out: Any, index: int, phase: str, group_dims: Mapping[str, Any]
) -> dict[str, Any]:
    """The observation's collective record of one dispatched op (``named``: its arguments), without
    the profiler's fields."""
    ins: list[torch.Tensor] = []
    outs: list[torch.Tensor] = []
    for name, value in named.items():
        found = c10d_args.tensors(value)
        if not found:
            continue
        if name.startswith("output"):
            outs += found
        elif name.startswith("input") or name == "self":
            ins += found
        else:  # in-place buffers: allreduce_/broadcast_ "tensors", barrier "tensor"
            ins += found
            outs += found
    if func.namespace == "_c10d_functional":  # functional: the result is the output
        outs = c10d_args.tensors(out)
    kind = op_kind(op_name)
    first = (ins or outs or [None])[0]
    element_size = int(first.element_size()) if first is not None else 0
    numel_in, numel_out = c10d_args.numel(ins), c10d_args.numel(outs)
    if kind == "all_gather":
        buffer_numel = numel_out
    elif kind == "reduce_scatter":
        buffer_numel = numel_in
    else:
        buffer_numel = max(numel_in, numel_out)
    group = c10d_args.resolve_group(named)
    group_size = int(group.size()) if group is not None else int(named.get("group_size", 1))
    group_name = getattr(group, "group_name", None) if group is not None else None
    return {
        "index": index,
        "op": kind,
        "c10d_op": str(func),
        "dtype": dtype_name(first.dtype) if first is not None else "float32",
        "element_size": element_size,
        "numel_in": numel_in,
        "numel_out": numel_out,
        "buffer_bytes": buffer_numel * element_size,
        "group_size": group_size,
        "mesh_dim": group_dims.get(group_name) if group_name is not None else None,
        "reduce_op": c10d_args.reduce_op(named),
        "phase": phase,
    }


class CollectiveRecorder(TorchDispatchMode):
    """Records every c10d op dispatched while active in :attr:`records`, in issue order
    (:func:`attribute` adds the profiler's fields).

    ``group_dims``: ``group_name`` -> mesh dim name, or the names of every dim sharing that group
    (:func:`resolve_mesh_dims` picks); ``collective_log``: a sink for
    :class:`~.hang_progress.HangProgress`, or None.
    """

    def __init__(self, phase: Callable[[], str], group_dims: Mapping[str, Any], collective_log: Any = None) -> None:
        super().__init__()
        self.phase = phase
        self.group_dims = dict(group_dims)
        self.records: list[dict[str, Any]] = []
        self.progress = HangProgress(collective_log) if collective_log is not None else None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: D105
        kwargs = kwargs or {}
        # Let tensor subclasses (DTensor) desugar first: their local ops come back through
        # this mode, so a collective issued by DTensor itself is seen on plain tensors.
        if any(issubclass(t, DTensor) for t in types):
            return NotImplemented
        namespace = func.namespace
        if namespace not in _LOOKED_AT:
            return func(*args, **kwargs)
        op_name = func._schema.name.split("::", 1)[-1]
        if is_collective(namespace, op_name):
            named = c10d_args.arguments(func, args, kwargs)
            if self.progress is not None:
                self.progress.entered(len(self.records), op_kind(op_name), self.phase(), c10d_args.group_span(named))
            if namespace == "c10d":
                # In-place ops: every buffer is an argument. Recorded before it runs, so a
                # collective that raises (gloo refusing PREMUL_SUM) is in the record too.
                self.records.append(
                    record_of(func, op_name, named, None, len(self.records), self.phase(), self.group_dims)
                )
                out = self._run(func, args, kwargs)
            else:
                out = self._run(func, args, kwargs)
                self.records.append(
                    record_of(func, op_name, named, out, len(self.records), self.phase(), self.group_dims)
                )
            if self.progress is not None:
                self.progress.issued(out)
            return out
        if namespace == "profiler" and self.progress is not None:
            return self.progress.label(func, op_name, args, kwargs)
        return func(*args, **kwargs)

    def _run(self, func: Any, args: tuple, kwargs: dict) -> Any:
        """Run a collective; one that raises is not left open in the hang progress."""
        try:
            return func(*args, **kwargs)
        except BaseException:
            if self.progress is not None:
                self.progress.raised()
            raise

    def __exit__(self, *exc: Any) -> Any:
        if self.progress is not None:
            self.progress.stop()
        return super().__exit__(*exc)

    def settle(self) -> None:
        """A new phase began: hang progress completes the ``"sync"`` collectives."""
        if self.progress is not None:
            self.progress.settle()
