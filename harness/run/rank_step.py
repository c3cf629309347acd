"""One rank's FSDP2 training step, as a :class:`~harness.load.setup.RunSetup` describes it, observed.

Given an initialized default process group (gloo, NCCL or the fake one), :func:`run_step`
puts together the stages, each in its own module:

1. ``harness.run.build``: the model with the setup's seed, identically on every rank (same
   full weights), in ``setup.model.dtype`` at construction (with ``setup.numerics`` off: on
   the meta device, materialized after ``fully_shard`` with only this rank's shards); the
   global batch (seeded) and this rank's samples ``r*B .. r*B+B-1``; the loss; the optimizer;
2. ``harness.run.build.replica_reference``, if ``setup.numerics``: the plain replica on this
   rank's chunk, its gradients averaged over ranks with a plain all-reduce;
3. ``harness.run.parallelize``: the device mesh and ``fully_shard`` on each decoder layer,
   then on the root (the document's section "FSDP2 设置"); a 2-D mesh is HSDP;
4. ``harness.run.instruments``: the recorders, entered in their one working order;
5. ``harness.run.loop``: the steps of ``harness.run.plan.step_plan`` (forward, loss,
   backward, ``optimizer.step()``; with ``setup.schedule`` its microbatches, runtime calls,
   clipping), phases marked. With a schedule and numerics, the single-process reference of
   the same plan (``harness.run.recorders.updates.schedule_reference``) replaces the replica
   of step 2, and each step's parameter updates are compared with it;

and returns the rank's entry of the observation document (schema:
``harness/schemas/observation.schema.json``, ``$defs/rank``).

Under the fake backend (``simulated=True``) the same code runs inside ``FakeTensorMode``:
no data, no numerics, only this rank's inputs are made; the mesh is built before entering
the fake mode (``DeviceMesh`` reads its rank map as real values).
"""

from __future__ import annotations

import contextlib
import functools
import platform
import time
from typing import Any, Callable

import torch
import torch.distributed as dist

import model as qwen3
from harness.load.setup import RunSetup
from harness.run.build import build_model, make_inputs, make_loss, make_optimizer, replica_reference, torch_dtype
from harness.run.instruments import Instruments
from harness.run.loop import run_steps
from harness.run.parallelize import apply_fsdp, build_mesh, init_local_shards, units_from_setup
from harness.run.plan import forward_count, global_batches, loss_function, step_plan
from harness.run.recorders.numerics import compare
from harness.run.recorders.phases import Phases
from harness.run.recorders.updates import ParamUpdates, schedule_reference

__all__ = ["run_step"]


def _device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU model from /proc/cpuinfo (no subprocess), or the machine."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine() or "cpu"


def _environment(device_type: str, device: torch.device) -> dict[str, Any]:
    return {
        "torch_version": str(torch.__version__),
        "python_version": platform.python_version(),
        "backend": str(dist.get_backend()),
        "device_type": device_type,
        "device_name": _device_name(device),
    }


def _tensor_mode(simulated: bool) -> contextlib.AbstractContextManager:
    if not simulated:
        return contextlib.nullcontext()
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode()


def run_step(
    setup: RunSetup,
    rank: int,
    world_size: int,
    device_type: str,
    *,
    simulated: bool = False,
    on_phase: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run and record one rank's step; the default process group must be initialized.

    Args:
        setup: what to run.
        rank: this rank (``dist.get_rank()``).
        world_size: ``setup.world_size`` (``dist.get_world_size()``).
        device_type: "cpu" or "cuda" (for CUDA, the current device is this rank's GPU).
        simulated: the fake process group is active: run under ``FakeTensorMode``, no numerics.
        on_phase: called with each phase name as it starts (the launcher reports a hung rank's
            last phase).

    Returns:
        ``{"entry": <the rank's entry of the document>, "fsdp_units": [...],
        "environment": {torch_version, python_version, backend, device_type, device_name}}``.

    Raises:
        ValueError: ``world_size`` is not the setup's, or the setup names an unknown body or
            optimizer.
    """
    t_start = time.perf_counter()
    if world_size != setup.world_size:
        raise ValueError(f"world size {world_size} but setup.mesh.shape {list(setup.mesh_shape)} needs {setup.world_size}")
    phases = Phases(sync=torch.cuda.synchronize if device_type == "cuda" else None, on_enter=on_phase)
    device = torch.device("cuda", torch.cuda.current_device()) if device_type == "cuda" else torch.device("cpu")
    dtype = torch_dtype(setup.model.dtype)
    config = qwen3.get_config(setup.model.config, **dict(setup.model.overrides))
    numerics_on = setup.numerics and not simulated
    # Without numerics, no rank needs the full weights: build on meta, shard, then materialize
    # only this rank's shards (FSDP2's meta-device init). A full model on every rank at once
    # would not fit here for Qwen3-0.6B on 8 ranks.
    meta_init = not simulated and not numerics_on
    mesh = build_mesh(setup, device_type)  # first, outside FakeTensorMode
    group_dims = {mesh.get_group(i).group_name: name for i, name in enumerate(setup.mesh_dim_names)}
    coords = [int(c) for c in mesh.get_coordinate()]

    with _tensor_mode(simulated):
        with phases.phase("setup"):
            root = build_model(setup, config, dtype, torch.device("meta") if meta_init else device,
                               init=not simulated and not meta_init)
            inputs = make_inputs(setup, config, rank, world_size, dtype, device, local_only=simulated)
        schedule = setup.schedule
        loss_fn = make_loss(setup.model.body) if schedule is None else loss_function(schedule.loss_for(setup.model.body))
        B, count = setup.batch_per_rank, forward_count(schedule)
        batches = global_batches(setup, config, dtype, count, rows=B if simulated else None) if schedule else None
        local = slice(0, B) if simulated else slice(rank * B, (rank + 1) * B)
        plan = step_plan(setup, inputs.tensor, lambda n: [b[local].clone().to(device) for b in batches])
        reference = schedule_ref = None
        if numerics_on and schedule is None:
            with phases.phase("replica"):
                reference = replica_reference(setup, root, inputs.tensor, loss_fn, dtype, world_size, coords)
        elif numerics_on:
            with phases.phase("replica"):
                mp = setup.fsdp.mixed_precision
                compute = torch_dtype(mp.param_dtype) if mp is not None and mp.param_dtype else dtype
                reduce = torch_dtype(mp.reduce_dtype) if mp is not None and mp.reduce_dtype else compute
                schedule_ref = schedule_reference(
                    root, plan, [b.to(device) for b in batches],
                    loss_fn=loss_fn, make_optimizer=lambda ps: make_optimizer(setup, ps), world_size=world_size,
                    rank=rank, shard_count=setup.mesh_shape[-1], shard_index=coords[-1],
                    compute_dtype=compute, reduce_dtype=reduce)
        materialize = (functools.partial(init_local_shards, device=device, std=config.initializer_range,
                                         seed=setup.seed, rank=rank) if meta_init else None)
        with Instruments(phases, group_dims) as instruments:
            with phases.phase("setup"):
                units = apply_fsdp(root, mesh, units_from_setup(setup, root), materialize=materialize)
                optimizer = make_optimizer(setup, root.parameters())
            updates = (ParamUpdates(root, setup.mesh_shape[-1], coords[-1])
                       if schedule is not None and not simulated else None)
            with instruments.observing(root, optimizer, units, inputs=(inputs.tensor,), updates=updates):
                outcome = run_steps(plan, root, loss_fn, optimizer, phases, instruments)
        t_observe = time.perf_counter()
        pieces = instruments.pieces()
        # SGD and AdamW read .grad and leave it as backward left it: comparing after the
        # step is comparing the reduce-scattered gradients (kept out of the memory tracker).
        numerics = compare(reference, root, outcome.output, outcome.loss) if reference is not None else None
        if schedule_ref is not None:
            numerics = schedule_ref.numerics(updates.params, outcome.output, outcome.loss)
            updates.against(schedule_ref)
            for norm in pieces["grad_norms"]:
                norm["reference"] = schedule_ref.grad_norms.get(norm["step_index"])

    timings = dict(phases.timings_s)
    timings["observe"] = time.perf_counter() - t_observe
    timings["total"] = time.perf_counter() - t_start
    entry = {"rank": rank, "coords": coords, "input": inputs.describe(), **pieces, "numerics": numerics, "timings_s": timings}
    return {"entry": entry, "fsdp_units": [u.describe() for u in units], "environment": _environment(device_type, device)}
