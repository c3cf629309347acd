"""Parameters as FSDP leaves them: the table after ``fully_shard`` and each unit at its hooks.

``fully_shard`` replaces every managed parameter by a ``DTensor`` (``Shard(0)`` on the
shard mesh dim). FSDP's pre-forward hook (registered with ``prepend=True``) swaps the
module's parameters for unsharded plain tensors (the document's Step 0); its post-forward
hook (appended) swaps the ``DTensor`` shards back when the unit reshards (Step 11). A module
hook registered after ``fully_shard`` (and after entering ``FSDPMemTracker``, which
re-registers FSDP's hooks) therefore runs right after FSDP's own: :class:`ParamStateHooks`
records what the module holds at those two points.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from .collectives import dtype_name

__all__ = ["Unit", "param_owner", "param_table", "ParamStateHooks"]


@dataclass(frozen=True)
class Unit:
    """One FSDP unit: the module ``fully_shard`` was applied to.

    Attributes:
        name: module FQN relative to the root ('' for the root); for a unit of several
            modules, torch's name for it: their FQNs joined by ", ".
        role: "layer", "root" or "module".
        layer: decoder layer index for a layer unit, else None.
        module: the module itself (the first of a unit of several modules).
        params: FQNs (relative to the root) of the parameters it manages, registration order.
        modules: every module of the unit (() means ``(module,)``).
        paths: each module's FQN relative to the root, in the order of ``modules`` (() means
            ``(name,)``).
    """

    name: str
    role: str
    layer: int | None
    module: nn.Module
    params: tuple[str, ...]
    modules: tuple[nn.Module, ...] = ()
    paths: tuple[str, ...] = ()

    def describe(self) -> dict[str, Any]:
        """The schema's ``fsdp_units`` entry."""
        return {"name": self.name, "role": self.role, "layer": self.layer, "params": list(self.params)}

    def holder(self, fqn: str) -> tuple[nn.Module, str]:
        """The unit's module that holds parameter ``fqn`` and the name relative to it, for
        ``get_parameter`` (FSDP swaps the parameter objects, so they are looked up by name)."""
        pairs = zip(self.paths or (self.name,), self.modules or (self.module,))
        path, module = max(
            ((p, m) for p, m in pairs if not p or fqn == p or fqn.startswith(p + ".")), key=lambda pm: len(pm[0])
        )
        return module, fqn[len(path) + 1 :] if path else fqn

    def get_parameter(self, fqn: str) -> torch.Tensor:
        """The tensor the unit's module holds now for parameter ``fqn`` (a DTensor shard or the
        unsharded tensor)."""
        module, relative = self.holder(fqn)
        return module.get_parameter(relative)


def param_owner(fqn: str, unit_names: list[str]) -> str:
    """The unit managing ``fqn``: the longest unit name that is a module prefix of it."""
    best = ""
    for name in unit_names:
        if name and (fqn == name or fqn.startswith(name + ".")) and len(name) > len(best):
            best = name
    return best


def _flat_tensors(value: Any) -> list[torch.Tensor]:
    """Every floating-point tensor in a (nested) tuple/list/dict, in order."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flat_tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _flat_tensors(v)]
    return []


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def param_table(root: nn.Module, unit_names: list[str] | dict[str, str]) -> list[dict[str, Any]]:
    """The schema's ``params`` list: every parameter of ``root``, ``named_parameters()`` order.

    ``unit_names``: parameter FQN -> the unit managing it (as FSDP's state says), or a list of
    unit names (the owner is then the longest unit name that is a module prefix of the FQN).
    """
    owners = unit_names if isinstance(unit_names, dict) else None
    rows = []
    for fqn, p in root.named_parameters():
        local = _local(p)
        is_dtensor = isinstance(p, DTensor)
        rows.append(
            {
                "fqn": fqn,
                "unit": owners.get(fqn, "") if owners is not None else param_owner(fqn, unit_names),
                "full_shape": list(p.shape),
                "local_shape": list(local.shape),
                "numel": int(p.numel()),
                "local_numel": int(local.numel()),
                "dtype": dtype_name(p.dtype),
                "element_size": int(p.element_size()),
                "is_dtensor": is_dtensor,
                "placements": [repr(pl) for pl in p.placements] if is_dtensor else [],
                "mesh_dim_names": list(p.device_mesh.mesh_dim_names or ()) if is_dtensor else [],
                "requires_grad": bool(p.requires_grad),
                "device": p.device.type,
            }
        )
    return rows


class ParamStateHooks:
    """Forward pre-/post-hooks on every unit recording what the unit's module holds.

    Register with :meth:`install` after ``fully_shard`` (and after entering
    ``FSDPMemTracker``); remove with :meth:`remove`. :attr:`states` collects the schema's
    ``param_states`` entries in the order the hooks fired (forward only: a recomputation in
    backward, under activation checkpointing, is not recorded).

    Args:
        units: the FSDP units.
        is_backward: returns True while autograd runs backward.
    """

    def __init__(self, units: list[Unit], is_backward: Callable[[], bool] = lambda: False) -> None:
        self.units = units
        self.states: list[dict[str, Any]] = []
        self._handles: list[Any] = []
        self._is_backward = is_backward

    def _snapshot(self, unit: Unit, point: str, tensors: Any = ()) -> None:
        if self._is_backward():
            return
        params = []
        total = 0
        for fqn in unit.params:
            t = unit.get_parameter(fqn)
            local = _local(t)
            total += int(local.numel()) * int(local.element_size())
            params.append(
                {
                    "fqn": fqn,
                    "is_dtensor": isinstance(t, DTensor),
                    "shape": list(local.shape),
                    "dtype": dtype_name(t.dtype),
                }
            )
        # the module's tensor inputs (after FSDP's pre-forward: cast_forward_inputs applied) or
        # outputs (after its post-forward: output_dtype applied)
        dtypes = [dtype_name(t.dtype) for t in _flat_tensors(tensors)]
        self.states.append(
            {
                "unit": unit.name,
                "point": point,
                "params": params,
                "bytes": total,
                ("input_dtypes" if point == "pre_forward" else "output_dtypes"): dtypes,
            }
        )

    def install(self) -> "ParamStateHooks":
        for unit in self.units:
            if len(unit.modules) > 1:  # a unit of several modules has no one module to hook
                continue
            self._handles.append(
                unit.module.register_forward_pre_hook(lambda m, args, u=unit: self._snapshot(u, "pre_forward", args))
            )
            self._handles.append(
                unit.module.register_forward_hook(lambda m, args, out, u=unit: self._snapshot(u, "post_forward", out))
            )
        return self

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
