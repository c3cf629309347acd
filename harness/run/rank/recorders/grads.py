"""Gradient dtypes per parameter and each FSDP unit's resolved mixed-precision dtypes, per step.

:func:`grad_records` (after each step's optimizer step, before the next ``zero_grad``): for every
parameter of the root (``named_parameters()``: the sharded ``DTensor`` parameters), whether it
requires a gradient, the dtype and local shape of its gradient (None: it has none) and its
``Parameter.grad_dtype`` (the dtype autograd is asked to accumulate its gradient in; torch >= 2.9).

:func:`unit_dtype_records` (after each forward phase, once FSDP's lazy init has run): for every
unit with parameters, the dtypes its ``FSDPParamGroup`` resolved from its *trainable* parameters
at lazy init (``_init_mp_dtypes``, torch 2.13 ``_fsdp_param_group.py``): ``_orig_dtype`` (what
reduced gradients are cast back to) and ``_reduce_dtype`` (the reduce-scatter's dtype; None:
the gradients' own). A unit whose parameters were all frozen at its first forward resolves both
to None, and lazy init does not run again (pytorch/pytorch#186998).

Both read torch's state as it is (no patching, no collective) and keep no torch object: each
call returns plain records (``harness/contract/observation.schema.json``: rank ``grads``,
``unit_dtypes``).
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
    """One record per parameter of ``root``: ``step_index``, ``fqn``, ``requires_grad``,
    ``grad_dtype`` and ``grad_local_shape`` (None without a gradient), ``param_grad_dtype``
    (``Parameter.grad_dtype``; None where torch has none).

    Read under ``no_grad`` with the dispatch modes off: a DTensor gradient's ``to_local()`` is
    neither a graph node nor anything FSDPMemTracker or the collective recorder sees."""
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
    """One record per unit that manages parameters: ``step_index``, ``microbatch``, ``unit``,
    ``orig_dtype`` and ``reduce_dtype`` as its ``FSDPParamGroup`` resolved them (None: unresolved or
    no casting), ``trainable`` (its sharded parameters requiring a gradient now) and ``params``."""
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
