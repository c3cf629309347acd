"""``torch.distributed.checkpoint.state_dict``'s options on the trained FSDP2 model, after the step.

For ``setup.state_dict.get_model`` and ``set_model`` (docs/specs.md, "State-dict round trip"), every
rank records what each call returns or leaves, compared bitwise with the trained values as
``DTensor.full_tensor()`` gives them, independent of the helpers under test. Source: torch 2.13's
``StateDictOptions`` and FSDP2's rank-0 broadcast meta-device flow (pytorch/pytorch#124651).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor

from harness.load.setup import GetModelStateDict, SetModelStateDict, StateDictSetup
from harness.run.rank.recorders.collectives import dtype_name

__all__ = ["state_dict_options"]

Fresh = Callable[[str], nn.Module]
"""``fresh(into)`` -> a model sharded like the run's: "sharded" (filled) or "meta" (left on meta)."""


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal (dtype, shape, values); a tensor on the meta device holds no values."""
    if a.device.type == "meta" or b.device.type == "meta":
        return False
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.detach().cpu(), b.detach().cpu())


def _describe(t: torch.Tensor) -> dict[str, Any]:
    local = _local(t)
    return {
        "is_dtensor": isinstance(t, DTensor),
        "device": local.device.type,
        "shape": list(t.shape),
        "local_shape": list(local.shape),
        "placements": [repr(p) for p in t.placements] if isinstance(t, DTensor) else [],
        "dtype": dtype_name(t.dtype),
    }


def _get(root: nn.Module, call: GetModelStateDict, local: dict, full: dict) -> dict[str, Any]:
    options = StateDictOptions(full_state_dict=call.full_state_dict, cpu_offload=call.cpu_offload)
    state = get_model_state_dict(root, options=options)
    entries = []
    for fqn, t in state.items():
        if not isinstance(t, torch.Tensor):
            continue
        if isinstance(t, DTensor):
            equal = fqn in local and _same(t.to_local(), local[fqn])
        else:
            equal = fqn in full and _same(t, full[fqn])
        entries.append({"fqn": fqn, **_describe(t), "equal": equal})
    return {"id": call.id, "keys": len(state), "entries": entries}


def _given(call: SetModelStateDict, rank: int, sharded: dict, full: dict) -> dict[str, Any]:
    """The state dict this rank hands over: full or sharded, ``{}`` off rank 0 with ``broadcast_from_rank0``."""
    if call.broadcast_from_rank0 and rank != 0:
        return {}
    source = full if call.full_state_dict else sharded
    given = {k: v for k, v in source.items() if k not in call.drop}
    for name in call.add:
        given[name] = torch.zeros(1)
    return given


def _set(call: SetModelStateDict, rank: int, fresh: Fresh, sharded: dict, local: dict, full: dict) -> dict[str, Any]:
    model = fresh(call.into)
    before = {fqn: _same(_local(t), local[fqn]) for fqn, t in model.state_dict().items() if fqn in local}
    given = _given(call, rank, sharded, full)
    options = StateDictOptions(
        full_state_dict=call.full_state_dict,
        broadcast_from_rank0=call.broadcast_from_rank0,
        cpu_offload=call.cpu_offload,
        strict=call.strict,
    )
    record: dict[str, Any] = {"id": call.id, "given_keys": len(given), "error": None}
    try:
        result = set_model_state_dict(model, given, options=options)
        record["missing_keys"] = sorted(result.missing_keys)
        record["unexpected_keys"] = sorted(result.unexpected_keys)
    except Exception as exc:  # what torch raised is the observation; the ranks go on in step
        record.update(error={"type": type(exc).__name__, "message": str(exc)}, missing_keys=None, unexpected_keys=None)
    entries = []
    for fqn, t in model.state_dict().items():
        described = _describe(t)
        del described["shape"], described["dtype"]
        equal = fqn in local and _same(_local(t), local[fqn])
        entries.append({"fqn": fqn, **described, "equal": equal, "equal_before_load": before.get(fqn, False)})
    record["meta_params"] = [n for n, p in model.named_parameters() if p.device.type == "meta"]
    record["meta_buffers"] = [n for n, b in model.named_buffers() if b.device.type == "meta"]
    gathered = _gathered_equal(model, full, ready=record["error"] is None and not record["meta_params"])
    record["gathered"] = gathered is not None
    for e in entries:
        equal, dtype = gathered.get(e["fqn"], (None, None)) if gathered is not None else (None, None)
        e.update(gathered_equal=equal, gathered_dtype=dtype)
    record["entries"] = entries
    return record


def _gather_dtypes(model: nn.Module) -> dict[str, torch.dtype]:
    """Parameter FQN -> the dtype its unit's all-gather casts it to: a set ``param_dtype`` for a floating
    parameter, else its own (torch 2.13's ``FSDPParam.init_dtype_attrs``); read while sharded."""
    names = {id(p): n for n, p in model.named_parameters()}
    out: dict[str, torch.dtype] = {}
    for unit in model.modules():
        group = getattr(fully_shard.state(unit), "_fsdp_param_group", None) if isinstance(unit, FSDPModule) else None
        for fp in group.fsdp_params if group is not None else ():
            name = names.get(id(fp.sharded_param))
            own = fp.sharded_param.dtype
            cast = group.mp_policy.param_dtype
            if name is not None:
                out[name] = cast if cast is not None and own.is_floating_point else own
    return out


def _gathered_equal(model: nn.Module, full: dict, *, ready: bool) -> "dict[str, tuple[bool, str]] | None":
    """FSDP's own all-gather of the loaded shards (``unshard()`` every unit) against the trained full
    tensors cast to the gather dtype, per FQN (equal, dtype name); None: not gathered, as some rank
    was not ``ready`` (agreed by a MIN all-reduce: the gathers are collective)."""
    device = next(iter(full.values())).device if full else torch.device("cpu")
    flag = torch.tensor([1 if ready else 0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    if not int(flag.item()):
        return None
    dtypes = _gather_dtypes(model)
    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    with torch.no_grad():
        for unit in units:
            unit.unshard()
        out = {}
        for n, p in model.named_parameters():
            reference = full[n].to(dtypes.get(n, full[n].dtype)) if n in full else None
            out[n] = (reference is not None and _same(p, reference), dtype_name(p.dtype))
        for unit in units:
            unit.reshard()
    return out


def state_dict_options(root: nn.Module, setup: StateDictSetup, fresh: Fresh, rank: int) -> dict[str, Any]:
    """Run ``setup.get_model`` and ``setup.set_model`` on the trained ``root``; this rank's record,
    ``{"get_model": [...], "set_model": [...]}``. Collective, after the optimizer step."""
    with torch.no_grad():
        sharded = {k: v.detach() for k, v in root.state_dict().items() if isinstance(v, torch.Tensor)}
        local = {k: _local(v).clone() for k, v in sharded.items()}
        full = {k: v.full_tensor() if isinstance(v, DTensor) else v.clone() for k, v in sharded.items()}
    return {
        "get_model": [_get(root, call, local, full) for call in setup.get_model],
        "set_model": [_set(call, rank, fresh, sharded, local, full) for call in setup.set_model],
    }
