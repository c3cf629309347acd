"""Running a setup: the one entry point the CLI, the checks' fixtures and tests call.

``run_setup(setup, backend=..., timeout_s=...)`` returns the observation document
(``harness/contract/observation.schema.json``), validated. Where the ranks come from:

- ``backend="fake"``: simulated in this process (``harness.run.simulate``), any world size;
- under ``torchrun`` or any launcher that sets RANK, WORLD_SIZE and MASTER_ADDR: this process
  is one rank of that world ("joined"): every rank runs the step, rank 0 gathers all ranks'
  entries (``gather_object``) and returns the document, the other ranks return None. This is
  how a real multi-node cluster is validated. The launcher owns failure handling there; a
  hang ends at the process group's timeout (``timeout_s``) with an error that says which rank
  is stuck where (each rank's collectives are reported to the process group's store);
- otherwise ``setup.world_size`` ranks are started here (``harness.run.launch.run_local``).

With ``setup.state_dict.round_trip`` a local run saves its checkpoint into a temporary folder
made here and removed here when the run ends, however it ends; each of
``setup.state_dict.reload_world_sizes`` is then a second launch of that many ranks
(``harness.run.checkpoint.reload_step``) that loads the same checkpoint. Their records are the
document's ``reloads``. Joined runs make the folder on rank 0 and skip the reloads (another
world cannot be launched from inside one).

``backend="auto"``: NCCL with one GPU per rank when at least world-size GPUs are visible
(per node when joined: LOCAL_WORLD_SIZE), gloo on CPU otherwise.
"""

from __future__ import annotations

import tempfile
import time
import traceback
from typing import Any, Callable

from harness.contract.names import BACKENDS
from harness.run.launch import RunError, RunTimeout, joined_world, resolve_backend, run_local
from harness.contract.observation import ObservationError, build_observation
from harness.load.setup import RunSetup

__all__ = ["run_setup", "RunError", "RunTimeout", "ObservationError"]


def run_setup(setup: RunSetup, *, backend: str = "auto", timeout_s: float = 300.0,
              trace_dir: str | None = None,
              on_progress: Callable[[dict[int, str]], None] | None = None,
              preflight: bool = True) -> dict | None:
    """Run one FSDP2 training step as ``setup`` says and return its observation document.

    Args:
        setup: the run setup.
        backend: "auto", "gloo", "nccl" or "fake".
        timeout_s: deadline for the whole run (local), or the process group timeout (joined).
        trace_dir: an existing folder: every rank writes its ``torch.profiler`` Chrome trace of
            the step there as ``rank<r>.json`` (joined: on its own node's file system).
        on_progress: called in this process with each rank's phase (rank -> phase name) as
            ranks move on (local and simulated runs; a joined world reports none).
        preflight: first check that this machine can hold the run (``harness.run.preflight``):
            rank processes, memory per rank, simulated world size. False skips it.

    Returns:
        The validated observation document; None on a non-zero rank of a joined world.

    Raises:
        RunError: a rank failed; the message names it and carries its traceback.
        RunTimeout: (a RunError) the run did not finish in ``timeout_s``.
        ObservationError: the recorded document does not match the schema (a harness bug).
        PreflightError: (a RunError) the run would not fit this machine; nothing was started.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: expected one of {BACKENDS}")
    world = joined_world()
    if preflight:
        from harness.run.preflight import check

        check(setup, backend, joined=world is not None)
    if backend == "fake":
        from harness.run.simulate import run_simulated

        return run_simulated(setup, timeout_s=timeout_s, trace_dir=trace_dir, on_progress=on_progress)
    if world is not None:
        return _run_joined(setup, backend, timeout_s, world, trace_dir)
    if not setup.state_dict.round_trip:
        results = run_local(setup, backend=backend, timeout_s=timeout_s, trace_dir=trace_dir, on_progress=on_progress)
        return build_observation(setup, results, launcher="local", simulated=False)
    return _run_local_with_checkpoint(setup, backend, timeout_s, trace_dir, on_progress)


def _joined_diagnosis(store: Any, world_size: int) -> str:
    """Where every rank was when this one failed (a collective that timed out: who never came)."""
    from harness.run.hang import diagnose, per_rank_lines, read_store

    progress = read_store(store, world_size)
    if not any(p["entered"] for p in progress.values()):
        return ""
    return "\n".join(["", f"Diagnosis: {diagnose(progress)}.", *per_rank_lines(progress)])


def _check_same_setup(setup: RunSetup, rank: int, world_size: int) -> None:
    """Every rank of a joined world must run the same setup (the same spec, harness and torch):
    one collective (``all_gather_object``) compares them before the step.

    Raises:
        RunError: (on every rank, rank None) naming the ranks and hosts whose setup or torch differs.
    """
    import socket

    import torch
    import torch.distributed as dist

    mine = {"setup": setup.cache_key(), "torch": str(torch.__version__), "host": socket.gethostname()}
    everyone: list[Any] = [None] * world_size
    dist.all_gather_object(everyone, mine)
    reference = everyone[0]
    differ = [(r, e) for r, e in enumerate(everyone) if (e["setup"], e["torch"]) != (reference["setup"], reference["torch"])]
    if differ:
        listed = "; ".join(f"rank {r} on {e['host']}: setup {e['setup']}, torch {e['torch']}" for r, e in differ)
        raise RunError(f"the ranks do not run the same spec: rank 0 on {reference['host']} has setup "
                       f"{reference['setup']}, torch {reference['torch']}; {listed}. Give every node the same "
                       "spec file and harness.", rank=None)


def _run_local_with_checkpoint(setup: RunSetup, backend: str, timeout_s: float, trace_dir: str | None,
                               on_progress: Callable[[dict[int, str]], None] | None) -> dict:
    """The run, then one launch per reload world size, all within ``timeout_s``; the checkpoint
    folder is removed when this returns or raises (the launches have killed their ranks by then)."""
    deadline = time.monotonic() + timeout_s

    def remaining(what: str) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RunTimeout(f"run timed out after {timeout_s:g} s before {what}", pending=[], phases={})
        return left

    with tempfile.TemporaryDirectory(prefix="fsdp2-checkpoint-") as folder:
        results = run_local(setup, backend=backend, timeout_s=timeout_s, step_kwargs={"checkpoint_dir": folder},
                            trace_dir=trace_dir, on_progress=on_progress)
        reloads = []
        for size in setup.state_dict.reload_world_sizes:
            reloaded = _reload_setup(setup, size)
            ranks = run_local(reloaded, backend=backend, timeout_s=remaining(f"reloading on {size} ranks"),
                              step="harness.run.checkpoint:reload_step",
                              step_kwargs={"checkpoint_dir": folder, "saved_world_size": setup.world_size})
            reloads.append({"world_size": size, "mesh_shape": list(reloaded.mesh_shape),
                            "mesh_dim_names": list(reloaded.mesh_dim_names), "ranks": ranks})
    return build_observation(setup, results, launcher="local", simulated=False, reloads=reloads)


def _reload_setup(setup: RunSetup, world_size: int) -> RunSetup:
    """``setup`` on a 1-D mesh of ``world_size`` ranks named as its shard dim (the last); as
    ``harness.run.checkpoint.reload_setup``, without importing torch here."""
    import dataclasses

    return dataclasses.replace(setup, mesh_shape=(world_size,), mesh_dim_names=(setup.mesh_dim_names[-1],),
                               observe_ranks=None)


def _run_joined(setup: RunSetup, backend: str, timeout_s: float, world: dict[str, Any],
                trace_dir: str | None = None) -> dict | None:
    """This process is one rank of a launcher's world (see module docstring)."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from harness.run.rank_step import run_step

    rank, world_size = world["rank"], world["world_size"]
    if world_size != setup.world_size:
        per_node = world["local_world_size"]
        shape = (f"{world_size // per_node} nodes x {per_node} processes" if world_size % per_node == 0
                 else f"{per_node} processes on this node")
        # Every rank finds this; rank None: a world error, not one rank's (the CLI prints it once).
        raise RunError(
            f"joined a world of {world_size} ranks ({shape}), but setup.mesh.shape {list(setup.mesh_shape)} "
            f"needs {setup.world_size}: launch {setup.world_size} ranks (torchrun --nnodes N --nproc-per-node M "
            f"with N x M = {setup.world_size}) or change the spec's mesh",
            rank=None,
        )
    pg_backend, device_type = resolve_backend(backend, world_size, world["local_world_size"])
    created = False
    if not dist.is_initialized():
        if device_type == "cuda":
            torch.cuda.set_device(world["local_rank"])
        dist.init_process_group(pg_backend, init_method="env://", timeout=timedelta(seconds=timeout_s))
        created = True
    elif dist.get_backend() != pg_backend:
        pg_backend = str(dist.get_backend())
        device_type = "cuda" if pg_backend == "nccl" else "cpu"
    try:
        _check_same_setup(setup, rank, world_size)
        from harness.run.hang import StoreProgress

        store = dist.distributed_c10d._get_default_store()
        try:
            result = run_step(setup, rank, world_size, device_type, trace_dir=trace_dir,
                              collective_log=StoreProgress(store, rank))
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
