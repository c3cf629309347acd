"""Parameters as FSDP leaves them: the units, the table after ``fully_shard``, one parameter's state."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import nn
from torch._subclasses.fake_tensor import is_fake
from torch.distributed.tensor import DTensor

from .collectives import dtype_name

__all__ = ["Unit", "param_owner", "param_table", "buffer_table", "pinned", "finite", "tensor_state", "flat_tensors"]


@dataclass(frozen=True)
class Unit:
    """One FSDP unit: the module(s) ``fully_shard`` was applied to.

    ``name``: FQN relative to the root ('' for the root; several modules: torch's name, FQNs joined
    by ", "); ``role``: "layer", "root" or "module"; ``layer``: the decoder layer index or None;
    ``params``: FQNs it manages; ``modules``/``paths``: () means ``(module,)``/``(name,)``.
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
        """The unit's module holding parameter ``fqn`` and its name there (FSDP swaps parameter objects)."""
        pairs = zip(self.paths or (self.name,), self.modules or (self.module,))
        path, module = max(
            ((p, m) for p, m in pairs if not p or fqn == p or fqn.startswith(p + ".")), key=lambda pm: len(pm[0])
        )
        return module, fqn[len(path) + 1 :] if path else fqn

    def get_parameter(self, fqn: str) -> torch.Tensor:
        """The tensor the unit's module holds now for ``fqn`` (a DTensor shard or unsharded)."""
        module, relative = self.holder(fqn)
        return module.get_parameter(relative)


def param_owner(fqn: str, unit_names: list[str]) -> str:
    """The unit managing ``fqn``: the longest unit name that is a module prefix of it."""
    best = ""
    for name in unit_names:
        if name and (fqn == name or fqn.startswith(name + ".")) and len(name) > len(best):
            best = name
    return best


def flat_tensors(value: Any) -> list[torch.Tensor]:
    """Every floating-point tensor in a (nested) tuple, list, mapping or dataclass, in order."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in flat_tensors(v)]
    if isinstance(value, Mapping):  # dict, and a UserDict (schedule forward_input)
        return [t for v in value.values() for t in flat_tensors(v)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [t for f in dataclasses.fields(value) for t in flat_tensors(getattr(value, f.name))]
    return []


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def pinned(t: torch.Tensor) -> bool | None:
    """Whether ``t``'s local storage is pinned host memory; False on a device; None on ``meta`` or
    fake tensors."""
    local = _local(t)
    if local.device.type == "meta" or is_fake(local):
        return None
    return bool(local.is_pinned()) if local.device.type == "cpu" else False


def finite(t: torch.Tensor) -> bool | None:
    """Whether every element of ``t``'s local storage is finite; None on ``meta`` or fake tensors."""
    local = _local(t)
    if local.device.type == "meta" or is_fake(local):
        return None
    return bool(torch.isfinite(local.detach()).all()) if local.is_floating_point() else True


def buffer_table(root: nn.Module) -> list[dict[str, Any]]:
    """The schema's ``buffers`` list, one row per buffer of ``root``."""
    return [
        {
            "fqn": fqn,
            "shape": list(b.shape),
            "dtype": dtype_name(b.dtype),
            "device": b.device.type,
            "finite": finite(b),
        }
        for fqn, b in root.named_buffers()
    ]


def param_table(root: nn.Module, unit_names: list[str] | dict[str, str]) -> list[dict[str, Any]]:
    """The schema's ``params`` list; ``unit_names``: FQN -> unit (None: no unit manages it, as
    ``ignored_params``), or unit names (:func:`param_owner`)."""
    owners = unit_names if isinstance(unit_names, dict) else None
    rows = []
    for fqn, p in root.named_parameters():
        local = _local(p)
        is_dtensor = isinstance(p, DTensor)
        rows.append(
            {
                "fqn": fqn,
                "unit": owners.get(fqn) if owners is not None else param_owner(fqn, unit_names),
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
                "pinned": pinned(p),
                "finite": finite(p),
            }
        )
    return rows


def tensor_state(fqn: str, t: torch.Tensor) -> dict[str, Any]:
    """What parameter ``fqn`` is now as ``t`` (``shape``: a DTensor's local one; ``grad``: one is attached)."""
    is_dtensor = isinstance(t, DTensor)
    local = _local(t)
    return {
        "fqn": fqn,
        "is_dtensor": is_dtensor,
        "shape": list(local.shape),
        "full_shape": list(t.shape),
        "placements": [repr(pl) for pl in t.placements] if is_dtensor else [],
        "device": local.device.type,
        "dtype": dtype_name(t.dtype),
        "grad": t.grad is not None if t.is_leaf else False,
    }
