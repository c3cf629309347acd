"""Gradient dtypes per parameter and each FSDP unit's resolved mixed-precision dtypes, per step.

A unit resolves its dtypes from its trainable parameters at lazy init (torch 2.13
``_init_mp_dtypes``): one whose parameters were all frozen at its first forward keeps both None
(pytorch/pytorch#186998).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.utils._python_dispatch import _disable_current_modes

from .collectives import dtype_name
from .params import Unit

__all__ = ["grad_records", "unit_dtype_records"]


def _name(dtype: torch.dtype | None) -> str | None:
    return dtype_name(dtype) if dtype is not None else None


def _local_shape(t: torch.Tensor) -> list[int]:
    return list((t.to_local() if hasattr(t, "to_local") else t).shape)


def grad_records(root: nn.Module, step_index: int) -> list[dict[str, Any]]:
    """One record per parameter of ``root``, read with the dispatch modes off (``param_grad_dtype``:
    torch >= 2.9)."""
    with torch.no_grad(), _disable_current_modes():
        return _grad_records(root, step_index)


def _grad_records(root: nn.Module, step_index: int) -> list[dict[str, Any]]:
    out = []
    for fqn, p in root.named_parameters():
        grad = p.grad
        out.append(
            {
                "step_index": step_index,
                "fqn": fqn,
                "requires_grad": bool(p.requires_grad),
                "grad_dtype": _name(grad.dtype) if grad is not None else None,
                "grad_local_shape": _local_shape(grad) if grad is not None else None,
                "param_grad_dtype": _name(getattr(p, "grad_dtype", None)),
            }
        )
    return out


def unit_dtype_records(units: Sequence[Unit], step_index: int, microbatch: int | None) -> list[dict[str, Any]]:
    """One record per unit with parameters: ``orig_dtype`` and ``reduce_dtype`` (None: unresolved or
    no casting)."""
    out = []
    for unit in units:
        group = getattr(fully_shard.state(unit.module), "_fsdp_param_group", None)
        if group is None:
            continue
        params = [fp.sharded_param for fp in group.fsdp_params]
        out.append(
            {
                "step_index": step_index,
                "microbatch": microbatch,
                "unit": unit.name,
                "orig_dtype": _name(getattr(group, "_orig_dtype", None)),
                "reduce_dtype": _name(getattr(group, "_reduce_dtype", None)),
                "trainable": sum(bool(p.requires_grad) for p in params),
                "params": len(params),
            }
        )
    return out
