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
5. ``harness.run.loop``: the steps (forward, loss, backward, ``optimizer.step()``), phases
   marked;
6. ``harness.run.checkpoint``, if ``setup.state_dict.round_trip`` (real runs): after the
   recorders have stopped, the state-dict round trip (phase ``state_dict``);

and returns the rank's entry of the observation document (schema:
``harness/schemas/observation.schema.json``, ``$defs/rank``).

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
from typing import Any, Callable

import torch
import torch.distributed as dist

import model as qwen3
from harness.load.setup import RunSetup
from harness.run.build import build_model, make_inputs, make_loss, make_optimizer, replica_reference, torch_dtype
from harness.run.instruments import Instruments
from harness.run.loop import run_steps, step_plan
from harness.run.parallelize import apply_fsdp, build_mesh, init_local_shards, units_from_setup
from harness.run.recorders.environment import rank_environment
from harness.run.recorders.numerics import compare
from harness.run.recorders.phases import Phases

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
        loss_fn = make_loss(setup.model.body)
        reference = None
        if numerics_on:
            with phases.phase("replica"):
                reference = replica_reference(setup, root, inputs.tensor, loss_fn, dtype, world_size, coords)
        materialize = (functools.partial(init_local_shards, device=device, std=config.initializer_range,
                                         seed=setup.seed, rank=rank) if meta_init else None)
        with Instruments(phases, group_dims, collective_log) as instruments:
            with phases.phase("setup"):
                units = apply_fsdp(root, mesh, units_from_setup(setup, root), materialize=materialize)
                optimizer = make_optimizer(setup, root.parameters())
            with instruments.observing(root, optimizer, units, inputs=(inputs.tensor,)):
                outcome = run_steps(step_plan(setup, inputs.tensor), root, loss_fn, optimizer, phases, instruments)
        t_observe = time.perf_counter()
        pieces = instruments.pieces()
        if trace_dir is not None:  # the profiler's Chrome trace of this rank's step (report/trace.py merges them)
            instruments.profiler.export_chrome_trace(os.path.join(trace_dir, f"rank{rank}.json"))
        # SGD and AdamW read .grad and leave it as backward left it: comparing after the
        # step is comparing the reduce-scattered gradients (kept out of the memory tracker).
        numerics = compare(reference, root, outcome.output, outcome.loss) if reference is not None else None

    observe_s = time.perf_counter() - t_observe
    state_dict = None
    if setup.state_dict.round_trip and not simulated:
        from harness.run.checkpoint import fresh_sharded, round_trip, shared_folder

        with phases.phase("state_dict"), shared_folder(checkpoint_dir) as folder:
            state_dict = round_trip(root, optimizer, functools.partial(fresh_sharded, setup, mesh, device, rank),
                                    folder, write_reference=bool(setup.state_dict.reload_world_sizes))
    bandwidth = None
    if setup.bandwidth is not None and not simulated:
        with phases.phase("bandwidth"):
            bandwidth = _time_collectives(setup, pieces["collectives"], mesh, rank, world_size, device, dtype)
    timings = dict(phases.timings_s)
    timings["observe"] = observe_s
    timings["total"] = time.perf_counter() - t_start
    entry = {"rank": rank, "coords": coords, "input": inputs.describe(), **pieces, "numerics": numerics, "timings_s": timings}
    if bandwidth is not None:
        entry["bandwidth"] = bandwidth
    if not simulated:  # one process simulates every rank: it has no per-rank host or device
        entry["environment"] = rank_environment(rank, world_size, device, str(dist.get_backend()))
    if state_dict is not None:
        entry["state_dict"] = state_dict
    return {"entry": entry, "fsdp_units": [u.describe() for u in units], "environment": _environment(device_type, device)}
