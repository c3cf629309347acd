"""A dispatched c10d op's arguments resolved: by schema name, its tensors, group and ReduceOp.
Nothing is kept."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import torch
import torch.distributed as dist

from .c10d_ops import FUNCTIONAL_REDUCE_OPS, REDUCE_OPS

__all__ = ["arguments", "tensors", "numel", "resolve_group", "group_span", "reduce_op"]


def arguments(func, args, kwargs) -> dict[str, Any]:
    """The op's arguments by their schema names (those passed, positionally or by keyword)."""
    named: dict[str, Any] = {}
    for i, arg in enumerate(func._schema.arguments):
        if i < len(args):
            named[arg.name] = args[i]
        elif arg.name in kwargs:
            named[arg.name] = kwargs[arg.name]
    return named


def tensors(value: Any) -> list[torch.Tensor]:
    """Every tensor in a (possibly nested) list/tuple argument, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors(v)]
    return []


def numel(found: Iterable[torch.Tensor]) -> int:
    """Elements of all ``found`` tensors together."""
    return sum(int(t.numel()) for t in found)


def resolve_group(named: Mapping[str, Any]) -> Any:
    """The ProcessGroup an op runs on: a boxed ScriptObject (c10d) or a group name (functional)."""
    for value in named.values():
        if isinstance(value, torch.ScriptObject):
            try:
                return dist.ProcessGroup.unbox(value)
            except Exception:  # not a ProcessGroup (a ReduceOp, a Work)
                continue
    name = named.get("group_name")
    if isinstance(name, str):
        from torch.distributed.distributed_c10d import _resolve_process_group

        return _resolve_process_group(name)
    return None


def group_span(named: Mapping[str, Any]) -> list[int] | None:
    """The op's group as ``[first global rank, stride, size]``; None when unknown or irregular."""
    try:
        group = resolve_group(named)
        ranks = dist.get_process_group_ranks(group) if group is not None else None
    except Exception:  # a group this process cannot resolve: leave membership unknown
        return None
    if not ranks:
        return None
    stride = ranks[1] - ranks[0] if len(ranks) > 1 else 1
    if any(b - a != stride for a, b in zip(ranks, ranks[1:])):
        return None
    return [ranks[0], stride, len(ranks)]


def reduce_op(named: Mapping[str, Any]) -> str | None:
    """The ReduceOp's name (``"SUM"``, ...; None if none): a c10d ``ReduceOp``'s ``op()``, or a
    functional op's string."""
    functional = named.get("reduce_op")
    if isinstance(functional, str):
        return FUNCTIONAL_REDUCE_OPS.get(functional.lower(), functional.upper())
    for value in named.values():
        if isinstance(value, torch.ScriptObject):
            try:
                if value._type().name() == "ReduceOp":
                    code = int(value.op())
                    return REDUCE_OPS.get(code, f"RedOpType({code})")
            except Exception:  # noqa: BLE001 - another kind of ScriptObject
                continue
    return None
