"""The rank's entry of the observation document, from what its instruments recorded.

Schema: ``harness/contract/observation.schema.json``, ``$defs/rank``. :func:`error_result` is
the entry of a rank that raised where the spec expects errors.
"""

from __future__ import annotations

import platform
import time
import traceback
from typing import Any

import torch
import torch.distributed as dist

from harness.run.rank.hooks import HookError
from harness.run.rank.parallelize import unit_state
from harness.run.rank.process_group import device_backend
from harness.run.rank.recorders.collectives import resolve_mesh_dims
from harness.run.rank.recorders.environment import cpu_name
from harness.run.rank.recorders.params import pinned
from harness.run.rank.recorders.phases import Phases

__all__ = ["environment", "group_dims", "where_after_step", "compile_counts", "error_result"]


def environment(device_type: str, device: torch.device) -> dict[str, Any]:
    """``{torch_version, cuda_version, python_version, backend, device_type, device_name}``; ``backend``
    serves ``device_type`` ("nccl" for ``"cuda:nccl,cpu:gloo"``); a CPU's name from /proc/cpuinfo."""
    return {
        "torch_version": str(torch.__version__),
        "cuda_version": torch.version.cuda,
        "python_version": platform.python_version(),
        "backend": device_backend(str(dist.get_backend()), device_type),
        "device_type": device_type,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name(),
    }


def group_dims(setup: Any, mesh: Any, world: Any = None) -> dict[str, Any]:
    """Process group name -> the mesh dim it serves (a tuple of names where one group serves
    several dims, as a size-1 dim's group can), for attributing each recorded collective;
    ``world``: expert parallelism's 1-D mesh ``dp`` of the whole world, or None."""
    dims: dict[str, Any] = {}
    named = [(mesh, i, name) for i, name in enumerate(setup.mesh_dim_names)]
    named += [(world, 0, "dp")] if world is not None else []
    for m, i, name in named:
        group = m.get_group(i).group_name
        dims[group] = (
            (*dims[group], name)
            if isinstance(dims.get(group), tuple)
            else ((dims[group], name) if group in dims else name)
        )
    return dims


def where_after_step(
    rows: list[dict[str, Any]], sharded: list[tuple[str, torch.Tensor]], optimizer: torch.optim.Optimizer
) -> None:
    """Add to each ``params`` row where its gradient and optimizer state live after the step
    (``grad_device``, ``optstate_device``; None without) and ``grad_pinned`` (``Tensor.is_pinned()``)."""
    by_fqn = dict(sharded)
    for row in rows:
        p = by_fqn.get(row["fqn"])
        if p is None:
            continue
        grad = p.grad
        row["grad_device"] = grad.device.type if grad is not None else None
        row["grad_pinned"] = pinned(grad) if grad is not None else None
        devices = sorted(
            {v.device.type for v in optimizer.state.get(p, {}).values() if isinstance(v, torch.Tensor) and v.dim() > 0}
        )
        row["optstate_device"] = devices[0] if len(devices) == 1 else (None if not devices else ",".join(devices))


def compile_counts() -> dict[str, Any]:
    """What dynamo captured in this process (0 graphs under a dispatch mode, as the step's
    collective recorder is: ``ran_eager`` then says the compiled units ran eagerly)."""
    from torch._dynamo.utils import counters

    graphs = int(counters["stats"].get("unique_graphs", 0))
    return {
        "unique_graphs": graphs,
        "graph_breaks": int(sum(counters["graph_break"].values())),
        "ran_eager": graphs == 0,
    }


def _error_record(exc: BaseException, phase: str) -> dict[str, Any]:
    """The schema's ``ranks[].error``. A hook's error is the exception the hook raised (torch's own type,
    e.g. ValueError), and ``hook`` says which hook; HookError itself only where nothing was chained."""
    hook = None
    if isinstance(exc, HookError) and exc.__cause__ is not None:
        hook, exc = str(exc), exc.__cause__
    return {
        "type": type(exc).__name__,
        "qualname": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "message": str(exc),
        "phase": phase,
        "traceback": "".join(traceback.format_exception(exc)[-3:])[-2000:],
        "hook": hook,
    }


def error_result(
    exc: BaseException,
    phases: Phases,
    got: dict[str, Any],
    rank: int,
    coords: list[int],
    t_start: float,
    env: dict[str, Any],
) -> dict[str, Any]:
    """The rank's result when it raised and the spec expects errors: what was recorded up to
    the error (``got``: "instruments", "inputs", "units" where they exist), and the error itself
    (type, message, phase, the last lines of its traceback)."""
    pieces: dict[str, Any] = {"params": [], "param_states": [], "steps": [], "collectives": [], "memory": []}
    instruments = got.get("instruments")
    if instruments is not None:
        try:
            pieces = instruments.pieces()
        except Exception:  # noqa: BLE001 - observing never entered, or the profiler disagrees
            records = [
                dict(r, unit=None, fsdp_label=None, fsdp_labels=[], hook=None) for r in instruments.collectives.records
            ]
            pieces["collectives"] = resolve_mesh_dims(records)
            pieces["fully_shard_calls"] = instruments.fully_shard_calls.record  # what sharding did before the error
    inputs = got.get("inputs")
    timings = dict(phases.timings_s)
    timings["total"] = time.perf_counter() - t_start
    no_input = {"name": "hidden_states", "shape": [], "dtype": "float32", "samples": []}
    entry = {
        "rank": rank,
        "coords": coords,
        "input": inputs.describe() if inputs is not None else no_input,
        **pieces,
        "numerics": None,
        "timings_s": timings,
        "error": _error_record(exc, phases.failed_in or phases.current),
    }
    described = []
    for u in got.get("units") or []:
        try:
            described.append({**u.describe(), "state": unit_state(u)})
        except Exception:  # noqa: BLE001 - the state is as broken as the run
            described.append(u.describe())
    return {"entry": entry, "fsdp_units": described, "environment": env}
