"""The joined world: this process is one rank of a world torchrun (or any launcher) set up.

Every rank runs the step; rank 0 gathers all ranks' entries (``gather_object``) and returns the
document, the others None. The launcher owns failures; a hang ends at the run's timeout, each rank
printing who is stuck where (``harness.run.launch.joined_deadline``)."""

from __future__ import annotations

import os
import traceback
from typing import Any, Mapping

from harness.contract.observation import build_observation
from harness.load.setup import RunSetup
from harness.run.launch import flight_recorder
from harness.run.launch.backend import resolve_backend
from harness.run.launch.errors import RunError
from harness.run.launch.joined_deadline import JoinedDeadline, process_group_timeout_s
from harness.run.rank.local_placement import device_ordinal_problem, local_placement
from harness.run.rank.process_group import group_backend

__all__ = ["joined_world", "run_joined"]


def joined_world(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """``{"rank", "world_size", "local_rank", "local_world_size", "local_rank_variable"}`` when RANK,
    WORLD_SIZE and MASTER_ADDR are set, else None (``harness.run.rank.local_placement``)."""
    env = os.environ if environ is None else environ
    if not all(k in env for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR")):
        return None
    rank, world_size = int(env["RANK"]), int(env["WORLD_SIZE"])
    return {"rank": rank, "world_size": world_size, **local_placement(env, rank, world_size)}


def run_joined(
    setup: RunSetup, backend: str, timeout_s: float, world: dict[str, Any], trace_dir: str | None = None
) -> dict | None:
    """Run ``setup`` as this rank of ``world``; rank 0 returns the validated document, the others None.
    Raises RunError: the world's size is not the setup's, the ranks' setups differ, or this rank raised."""
    import torch.distributed as dist

    from harness.run.rank.step import run_step

    rank, world_size = world["rank"], world["world_size"]
    _check_world_size(setup, world)
    device_type, created, recorder_dir = _join(backend, world, timeout_s, setup.fsdp.offloads)
    try:
        from harness.run.launch.hang import StoreProgress, read_store

        store = dist.distributed_c10d._get_default_store()
        deadline = JoinedDeadline(
            timeout_s,
            rank,
            lambda: read_store(store, world_size),
            dump=(lambda: flight_recorder.dump(recorder_dir, world_size)) if recorder_dir else None,
        )
        with deadline:
            _check_same_setup(setup, rank, world_size)
            try:
                result = run_step(
                    setup, rank, world_size, device_type, trace_dir=trace_dir, collective_log=StoreProgress(store, rank)
                )
            except Exception as exc:
                tb = traceback.format_exc()
                raise RunError.rank_raised(rank, tb, after=_joined_diagnosis(store, world_size)) from exc
            gathered: list[Any] | None = [None] * world_size if rank == 0 else None
            dist.gather_object(result, gathered, dst=0)
        if rank != 0:
            return None
        return build_observation(setup, gathered, launcher="joined", simulated=False)
    finally:
        if created:
            dist.destroy_process_group()
        if recorder_dir:
            flight_recorder.clean_up(recorder_dir)


def _check_world_size(setup: RunSetup, world: dict[str, Any]) -> None:
    world_size = world["world_size"]
    if world_size == setup.world_size:
        return
    per_node = world["local_world_size"]
    processes = f"{per_node} process{'es' if per_node != 1 else ''}"
    shape = (
        f"{world_size // per_node} nodes x {processes}" if world_size % per_node == 0 else f"{processes} on this node"
    )
    # Every rank finds this; rank None: a world error, not one rank's (the CLI prints it once).
    raise RunError(
        f"joined a world of {world_size} ranks ({shape}), but setup.mesh.shape {list(setup.mesh_shape)} "
        f"needs {setup.world_size}: launch {setup.world_size} ranks (torchrun --nnodes N --nproc-per-node M "
        f"with N x M = {setup.world_size}) or change the spec's mesh",
        rank=None,
    )


def _join(
    backend: str, world: dict[str, Any], timeout_s: float, offloads: bool = False
) -> tuple[str, bool, str | None]:
    """(device type, whether this call made the default group, the flight recorder's folder or None).
    The group's timeout outlasts the run's (:func:`process_group_timeout_s`); with ``offloads`` the
    group is ``"cuda:nccl,cpu:gloo"``."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    pg_backend, device_type = resolve_backend(backend, world["world_size"], world["local_world_size"])
    if not dist.is_initialized():
        folder = None
        if device_type == "cuda":
            problem = device_ordinal_problem(
                world["local_rank"], torch.cuda.device_count(), world.get("local_rank_variable", "LOCAL_RANK")
            )
            if problem:  # before set_device, whose "invalid device ordinal" names no variable
                raise RunError(f"rank {world['rank']}: {problem}", rank=world["rank"])
            torch.cuda.set_device(world["local_rank"])
            folder = flight_recorder.make_folder()
            flight_recorder.enable(folder)
        dist.init_process_group(
            group_backend(pg_backend, offloads),
            init_method="env://",
            timeout=timedelta(seconds=process_group_timeout_s(timeout_s)),
        )
        return device_type, True, folder
    if dist.get_backend() != pg_backend:
        device_type = "cuda" if "nccl" in str(dist.get_backend()) else "cpu"  # "nccl" or "cuda:nccl,cpu:gloo"
    return device_type, False, None


def _joined_diagnosis(store: Any, world_size: int) -> str:
    """Where every rank was when this one failed (a collective that timed out: who never came)."""
    from harness.run.launch.hang import diagnose, per_rank_lines, read_store

    progress = read_store(store, world_size)
    if not any(p["entered"] for p in progress.values()):
        return ""
    return "\n".join(["", f"Diagnosis: {diagnose(progress)}.", *per_rank_lines(progress)])


def _check_same_setup(setup: RunSetup, rank: int, world_size: int) -> None:
    """One ``all_gather_object`` before the step: every rank must run the same setup, harness and torch,
    else RunError on every rank naming the ranks and hosts that differ."""
    import socket

    import torch
    import torch.distributed as dist

    mine = {"setup": setup.cache_key(), "torch": str(torch.__version__), "host": socket.gethostname()}
    everyone: list[Any] = [None] * world_size
    dist.all_gather_object(everyone, mine)
    reference = everyone[0]
    differ = [
        (r, e) for r, e in enumerate(everyone) if (e["setup"], e["torch"]) != (reference["setup"], reference["torch"])
    ]
    if differ:
        listed = "; ".join(f"rank {r} on {e['host']}: setup {e['setup']}, torch {e['torch']}" for r, e in differ)
        raise RunError(
            f"the ranks do not run the same spec: rank 0 on {reference['host']} has setup "
            f"{reference['setup']}, torch {reference['torch']}; {listed}. Give every node the same "
            "spec file and harness.",
            rank=None,
        )
