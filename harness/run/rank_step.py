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
6. ``harness.run.checkpoint``, if ``setup.state_dict.round_trip`` (real runs): after the
   recorders have stopped, the state-dict round trip (phase ``state_dict``);

and returns the rank's entry of the observation document (schema:
``harness/contract/observation.schema.json``, ``$defs/rank``).

Under the fake backend (``simulated=True``) the same code runs inside ``FakeTensorMode``:
no data, no numerics, only this rank's inputs are made; the mesh is built before entering
the fake mode (``DeviceMesh`` reads its rank map as real values).
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import time
import traceback
from typing import Any, Callable

import torch
import torch.distributed as dist

import model as qwen3
from harness.load.setup import RunSetup
from harness.run.build import (build_model, make_inputs, make_loss, make_optimizer, reference_from_rank_0,
                               replica_reference, torch_dtype)
from harness.run.instruments import Instruments
from harness.run.loop import run_steps
from harness.run.parallelize import (ShardUnit, apply_fsdp, build_mesh, freeze_params, init_local_shards,
                                     init_shards_like_full, unit_state, units_from_setup)
from harness.run.plan import forward_count, global_batches, loss_function, step_plan
from harness.run.recorders.collectives import dtype_name, resolve_mesh_dims
from harness.run.recorders.environment import cpu_name, rank_environment
from harness.run.recorders.numerics import compare
from harness.run.recorders.phases import Phases
from harness.run.recorders.updates import ParamUpdates, schedule_reference

__all__ = ["run_step"]


def _device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU model from /proc/cpuinfo (no subprocess), or the machine."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()


def _environment(device_type: str, device: torch.device) -> dict[str, Any]:
    return {
        "torch_version": str(torch.__version__),
        "python_version": platform.python_version(),
        "backend": str(dist.get_backend()),
        "device_type": device_type,
        "device_name": _device_name(device),
    }


def _time_collectives(setup: RunSetup, collectives: list[dict[str, Any]], mesh: Any, rank: int, world_size: int,
                      device: torch.device, dtype: torch.dtype) -> list[dict[str, Any]]:
    """``setup.bandwidth``'s rows timed on this rank (``harness.run.bandwidth``), after the step."""
    from harness.run.bandwidth import plan_rows, run_bandwidth

    mp = setup.fsdp.mixed_precision
    gather_dtype = torch_dtype(mp.param_dtype) if mp is not None and mp.param_dtype else dtype
    rows = plan_rows(setup.bandwidth, collectives, world_size=world_size, default_dtype=gather_dtype,
                     device_type=device.type)
    return run_bandwidth(rows, rank=rank, device=device, warmup=setup.bandwidth.warmup,
                         iterations=setup.bandwidth.iterations,
                         group_of=lambda dim: None if dim is None else mesh.get_group(dim))


def run_step(
    setup: RunSetup,
    rank: int,
    world_size: int,
    device_type: str,
    *,
    simulated: bool = False,
    on_phase: Callable[[str], None] | None = None,
    collective_log: Any = None,
    trace_dir: str | None = None,
    checkpoint_dir: str | None = None,
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
        collective_log: receives each collective as entered and completed (``harness.run.hang``:
            the launcher says which rank is stuck in which collective); None for nowhere.
        trace_dir: if given, an existing folder: the profiler's Chrome trace of the step
            (forward, backward, optimizer; FSDP:: labels and c10d ops) is written there as
            ``rank<rank>.json`` (``torch.autograd.profiler.profile.export_chrome_trace``).
        checkpoint_dir: for ``setup.state_dict.round_trip``: a folder every rank shares, made
            and removed by the launcher; None: rank 0 makes one and removes it
            (``harness.run.checkpoint.shared_folder``).

    Returns:
        ``{"entry": <the rank's entry of the document>, "fsdp_units": [...],
        "environment": {torch_version, python_version, backend, device_type, device_name}}``;
        the entry has ``state_dict`` when the setup asks for the round trip (not simulated).

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
    one_replica = numerics_on and setup.numerics_reference == "rank_0" and setup.schedule is None
    init = _init_mode(setup, numerics_on, one_replica)
    meta_init = not simulated and init != "full"
    mesh = build_mesh(setup, device_type)  # first, outside FakeTensorMode
    group_dims = _group_dims(setup, mesh)
    coords = [int(c) for c in mesh.get_coordinate()]
    got: dict[str, Any] = {}  # what exists so far, for the observation of a recorded error

    schedule = setup.schedule
    loss_fn = make_loss(setup.model.body) if schedule is None else loss_function(schedule.loss_for(setup.model.body))
    B, count = setup.batch_per_rank, forward_count(schedule)
    local = slice(0, B) if simulated else slice(rank * B, (rank + 1) * B)

    def inputs_and_plan() -> tuple[Any, list[Any] | None, Any]:
        """This rank's inputs, the schedule's global batches (None without one) and the step plan."""
        made = got["inputs"] = make_inputs(setup, config, rank, world_size, dtype, device, local_only=simulated)
        batches = global_batches(setup, config, dtype, count, rows=B if simulated else None) if schedule else None
        return made, batches, step_plan(setup, made.tensor, lambda n: [b[local].clone().to(device) for b in batches])

    try:
        with contextlib.ExitStack() as stack:
            with phases.phase("setup"):
                if simulated:
                    # fully_shard outside FakeTensorMode, on a model without data: inside the
                    # fake mode its per-rank ops cost ~10x (harness.run.simulate)
                    from harness.run.simulate import materialize_fake, storage_for_sharding

                    root = build_model(setup, config, dtype, torch.device("meta"), init=False)
                    storage_for_sharding(root, setup.mesh_shape[-1])
                else:
                    root = build_model(setup, config, dtype, torch.device("meta") if meta_init else device,
                                       init=not meta_init)
                    inputs, batches, plan = inputs_and_plan()
            shard_units = units_from_setup(setup, root)
            reference = schedule_ref = None
            if one_replica:
                with phases.phase("replica"):
                    reference = _reference_from_rank_0(setup, config, dtype, device, loss_fn, world_size, root,
                                                       meta_init, shard_units, checkpoint_dir)
            elif numerics_on:
                with phases.phase("replica"):
                    reference, schedule_ref = _replica_references(
                        setup, config, dtype, device, loss_fn, rank, coords, root, meta_init, shard_units,
                        inputs, batches, plan)
            materialize = _materializer(setup, config, init, meta_init, device, rank)
            instruments = got["instruments"] = Instruments(phases, group_dims, collective_log,
                                                           track_memory=setup.track_memory)
            if not simulated:
                stack.enter_context(instruments)  # fully_shard's collectives and meta init's recorded
            with phases.phase("setup"):
                units = got["units"] = apply_fsdp(
                    root, mesh, shard_units, materialize=materialize,
                    forward_prefetch=setup.fsdp.forward_prefetch, backward_prefetch=setup.fsdp.backward_prefetch,
                    freeze=setup.freeze.params, freeze_after=setup.freeze.after_fully_shard)
            if simulated:
                # FSDP2 issues no collective in fully_shard (tests/integration/test_simulated_agrees.py compares
                # every collective of 8 real ranks, whose recorder covers it, with the simulated ones)
                from torch._subclasses.fake_tensor import FakeTensorMode

                stack.enter_context(FakeTensorMode(allow_non_fake_inputs=True))
                stack.enter_context(instruments)  # on top of FakeTensorMode: sees each c10d op first
                with phases.phase("setup"):
                    materialize_fake(root, device)
                    inputs, batches, plan = inputs_and_plan()
            with phases.phase("setup"):
                optimizer = make_optimizer(setup, root.parameters())
                sharded = list(root.named_parameters())  # the shards, whatever the module holds later
            updates = (ParamUpdates(root, setup.mesh_shape[-1], coords[-1])
                       if schedule is not None and not simulated else None)
            with instruments.observing(root, optimizer, units, inputs=(inputs.tensor,), updates=updates):
                outcome = run_steps(plan, root, loss_fn, optimizer, phases, instruments)
        t_observe = time.perf_counter()
        pieces = instruments.pieces()
        _where_after_step(pieces["params"], sharded, optimizer)
        if trace_dir is not None:  # the profiler's Chrome trace of this rank's step (report/trace.py merges them)
            instruments.profiler.export_chrome_trace(os.path.join(trace_dir, f"rank{rank}.json"))
        # SGD and AdamW read .grad and leave it as backward left it: comparing after the
        # step is comparing the reduce-scattered gradients (kept out of the memory tracker).
        numerics = (compare(reference, root, outcome.output, outcome.loss, params=sharded)
                    if reference is not None else None)
        if schedule_ref is not None:
            numerics = schedule_ref.numerics(updates.params, outcome.output, outcome.loss)
            updates.against(schedule_ref)
            for norm in pieces["grad_norms"]:
                norm["reference"] = schedule_ref.grad_norms.get(norm["step_index"])
    except Exception as exc:
        if not setup.record_errors:
            raise
        return _error_result(exc, phases, got, rank, coords, t_start, _environment(device_type, device))

    observe_s = time.perf_counter() - t_observe
    entry = {"rank": rank, "coords": coords, "input": inputs.describe(), **pieces, "numerics": numerics,
             "output": {"shape": list(outcome.output.shape), "dtype": dtype_name(outcome.output.dtype),
                        "loss_dtype": dtype_name(outcome.loss.dtype)}}
    if not simulated:  # one process simulates every rank: it has no per-rank host or device
        entry.update(_after_the_step(setup, phases, root, optimizer, mesh, rank, world_size, device, dtype,
                                     pieces["collectives"], checkpoint_dir))
    entry["timings_s"] = {**phases.timings_s, "observe": observe_s, "total": time.perf_counter() - t_start}
    if setup.record_errors:
        entry["error"] = None
    if any(u.after is not None and u.after.compile for u in shard_units):
        from torch._dynamo.utils import counters  # what dynamo captured (0 graphs under a dispatch mode)

        entry["compile"] = {"unique_graphs": int(counters["stats"].get("unique_graphs", 0)),
                            "graph_breaks": int(sum(counters["graph_break"].values()))}
    fsdp_units = [{**u.describe(), "state": unit_state(u)} for u in units]
    return {"entry": entry, "fsdp_units": fsdp_units, "environment": _environment(device_type, device)}


def _group_dims(setup: RunSetup, mesh: Any) -> dict[str, Any]:
    """Process group name -> the mesh dim it serves (a tuple of names where one group serves
    several dims, as a size-1 dim's group can), for attributing each recorded collective."""
    group_dims: dict[str, Any] = {}
    for i, name in enumerate(setup.mesh_dim_names):
        group = mesh.get_group(i).group_name
        group_dims[group] = (*group_dims[group], name) if isinstance(group_dims.get(group), tuple) else \
            ((group_dims[group], name) if group in group_dims else name)
    return group_dims


def _init_mode(setup: RunSetup, numerics_on: bool, one_replica: bool) -> str:
    """``setup.init``, or its default: "full" builds the full model on every rank; "meta" builds
    on meta, shards, then fills each rank's shards with the full init's values (one replica on
    rank 0 needs no full model elsewhere); "local": meta, each rank drawing its own shards,
    without numerics (a full model on every rank at once would not fit here for Qwen3-0.6B on
    8 ranks)."""
    return setup.init or ("meta" if one_replica else "full" if numerics_on else "local")


def _materializer(setup: RunSetup, config: Any, init: str, meta_init: bool, device: torch.device,
                  rank: int) -> Callable[..., Any] | None:
    """How ``apply_fsdp`` gives a meta-built model its shards' values; None for a full init."""
    if init == "meta":
        return functools.partial(init_shards_like_full, device=device, seed=setup.seed)
    if meta_init:
        return functools.partial(init_local_shards, device=device, std=config.initializer_range,
                                 seed=setup.seed, rank=rank)
    return None


def _replica_references(setup: RunSetup, config: Any, dtype: torch.dtype, device: torch.device, loss_fn: Any,
                        rank: int, coords: list[int], root: torch.nn.Module, meta_init: bool,
                        shard_units: list[ShardUnit], inputs: Any, batches: list[Any] | None,
                        plan: Any) -> tuple[Any, Any]:
    """``numerics_reference: each_rank``: this rank's replica (the model itself under a full
    init, else a full model of its own) gives (the one-step reference, None), or with a
    schedule (None, the schedule's single-process reference)."""
    world_size = setup.world_size
    replica = root if not meta_init else build_model(setup, config, dtype, device, init=True)
    if setup.freeze.params:
        freeze_params(replica, setup.freeze.params)
    reference = schedule_ref = None
    if setup.schedule is None:
        reference = replica_reference(setup, replica, inputs.tensor, loss_fn, dtype, world_size, coords,
                                      divisors=_divisors(shard_units, replica, world_size),
                                      shard_dims=_shard_dims(shard_units, replica))
    else:
        mp = setup.fsdp.mixed_precision
        compute = torch_dtype(mp.param_dtype) if mp is not None and mp.param_dtype else dtype
        reduce = torch_dtype(mp.reduce_dtype) if mp is not None and mp.reduce_dtype else compute
        schedule_ref = schedule_reference(
            replica, plan, [b.to(device) for b in batches],
            loss_fn=loss_fn, make_optimizer=lambda ps: make_optimizer(setup, ps), world_size=world_size,
            rank=rank, shard_count=setup.mesh_shape[-1], shard_index=coords[-1],
            compute_dtype=compute, reduce_dtype=reduce)
    if replica is root and setup.freeze.after_fully_shard:
        for p in root.parameters():  # frozen again after fully_shard, as the setup says
            p.requires_grad_(True)
    return reference, schedule_ref


def _after_the_step(setup: RunSetup, phases: Phases, root: torch.nn.Module, optimizer: Any, mesh: Any, rank: int,
                    world_size: int, device: torch.device, dtype: torch.dtype, collectives: list[dict[str, Any]],
                    checkpoint_dir: str | None) -> dict[str, Any]:
    """A real rank's parts of its entry made after the recorders stopped: its host and device
    (``environment``), the state-dict round trip and the bandwidth rows where the setup asks."""
    parts: dict[str, Any] = {}
    if setup.state_dict.round_trip:
        from harness.run.checkpoint import fresh_sharded, round_trip, shared_folder

        with phases.phase("state_dict"), shared_folder(checkpoint_dir) as folder:
            parts["state_dict"] = round_trip(root, optimizer, functools.partial(fresh_sharded, setup, mesh, device, rank),
                                             folder, write_reference=bool(setup.state_dict.reload_world_sizes))
    if setup.bandwidth is not None:
        with phases.phase("bandwidth"):
            parts["bandwidth"] = _time_collectives(setup, collectives, mesh, rank, world_size, device, dtype)
    parts["environment"] = rank_environment(rank, world_size, device, str(dist.get_backend()))
    return parts


def _reference_from_rank_0(setup: RunSetup, config: Any, dtype: torch.dtype, device: torch.device, loss_fn: Any,
                           world_size: int, root: torch.nn.Module, meta_init: bool, shard_units: list[ShardUnit],
                           checkpoint_dir: str | None) -> Any:
    """``numerics_reference: rank_0``: rank 0 holds the only replica (``build.reference_from_rank_0``)."""
    from harness.run.checkpoint import shared_folder

    def build_replica() -> torch.nn.Module:
        replica = root if not meta_init else build_model(setup, config, dtype, device, init=True)
        if setup.freeze.params:
            freeze_params(replica, setup.freeze.params)
        return replica

    with shared_folder(checkpoint_dir) as folder:
        reference = reference_from_rank_0(setup, config, dtype, device, loss_fn, world_size, build_replica, folder,
                                          divisors=_divisors(shard_units, root, world_size),
                                          shard_dims=_shard_dims(shard_units, root))
    if not meta_init and setup.freeze.after_fully_shard:
        for p in root.parameters():  # rank 0 froze its replica, this model: frozen again after fully_shard
            p.requires_grad_(True)
    return reference


def _owners(units: list[ShardUnit], root: torch.nn.Module) -> dict[str, ShardUnit]:
    """Parameter FQN -> the unit whose module path is its longest prefix (the root otherwise)."""
    paths = {p: u for u in units for p in u.module_paths}
    return {fqn: paths[max((p for p in paths if p == "" or fqn == p or fqn.startswith(p + ".")), key=len)]
            for fqn, _ in root.named_parameters()}


def _divisors(units: list[ShardUnit], root: torch.nn.Module, world_size: int) -> dict[str, float]:
    """Parameter FQN -> what FSDP divides its summed gradient by: the unit's
    ``gradient_divide_factor`` if set, else the data-parallel size (the world)."""
    out = {}
    for fqn, unit in _owners(units, root).items():
        factor = unit.after.gradient_divide_factor if unit.after is not None else None
        out[fqn] = float(factor) if factor is not None else float(world_size)
    return out


def _shard_dims(units: list[ShardUnit], root: torch.nn.Module) -> dict[str, int]:
    """Parameter FQN -> the dim its unit's ``shard_placement`` rules shard it on (rules in order,
    as the harness's ``shard_placement_fn`` applies them); parameters no rule names are left out (0)."""
    from harness.load.units import match_params

    out = {}
    for fqn, unit in _owners(units, root).items():
        for pattern, dim in unit.shard_placement:
            if match_params(pattern, [fqn]):
                out[fqn] = dim
                break
    return out


def _error_result(exc: BaseException, phases: Phases, got: dict[str, Any], rank: int, coords: list[int],
                  t_start: float, environment: dict[str, Any]) -> dict[str, Any]:
    """The rank's result when it raised and the spec expects errors: what was recorded up to
    the error, and the error itself (type, message, phase, the last lines of its traceback)."""
    pieces: dict[str, Any] = {"params": [], "param_states": [], "steps": [], "collectives": [], "memory": []}
    instruments = got.get("instruments")
    if instruments is not None:
        try:
            pieces = instruments.pieces()
        except Exception:  # noqa: BLE001 - observing never entered, or the profiler disagrees
            records = [dict(r, unit=None, fsdp_label=None, fsdp_labels=[], hook=None)
                       for r in instruments.collectives.records]
            pieces["collectives"] = resolve_mesh_dims(records)
    inputs = got.get("inputs")
    timings = dict(phases.timings_s)
    timings["total"] = time.perf_counter() - t_start
    entry = {
        "rank": rank, "coords": coords,
        "input": inputs.describe() if inputs is not None else {"name": "hidden_states", "shape": [], "dtype": "float32", "samples": []},
        **pieces, "numerics": None, "timings_s": timings,
        "error": {
            "type": type(exc).__name__,
            "qualname": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "message": str(exc),
            "phase": phases.failed_in or phases.current,
            "traceback": "".join(traceback.format_exception(exc)[-3:])[-2000:],
        },
    }
    described = []
    for u in got.get("units") or []:
        try:
            described.append({**u.describe(), "state": unit_state(u)})
        except Exception:  # noqa: BLE001 - the state is as broken as the run
            described.append(u.describe())
    return {"entry": entry, "fsdp_units": described, "environment": environment}


def _where_after_step(rows: list[dict[str, Any]], sharded: list[tuple[str, torch.Tensor]],
                      optimizer: torch.optim.Optimizer) -> None:
    """Add to each ``params`` row where its gradient and optimizer state live after the step
    (``grad_device``: None without a gradient; ``optstate_device``: None without state), beside
    the shard's ``device``: what ``CPUOffloadPolicy`` moves."""
    by_fqn = dict(sharded)
    for row in rows:
        p = by_fqn.get(row["fqn"])
        if p is None:
            continue
        grad = p.grad
        row["grad_device"] = grad.device.type if grad is not None else None
        devices = sorted({v.device.type for v in optimizer.state.get(p, {}).values() if isinstance(v, torch.Tensor) and v.dim() > 0})
        row["optstate_device"] = devices[0] if len(devices) == 1 else (None if not devices else ",".join(devices))
