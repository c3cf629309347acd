"""Running a setup: the one entry point the CLI, the checks' fixtures and tests call.

``run_setup(setup, backend=..., timeout_s=...)`` returns the observation document
(``harness/contract/observation.schema.json``), validated. Where the ranks come from:

- ``backend="fake"``: simulated in this process (``harness.run.launch.simulated``), any world size;
- under ``torchrun`` or any launcher that sets RANK, WORLD_SIZE and MASTER_ADDR: this process
  is one rank of that world ("joined"): every rank runs the step, rank 0 gathers all ranks'
  entries (``gather_object``) and returns the document, the other ranks return None. This is
  how a real multi-node cluster is validated. The launcher owns failure handling there; a
  hang ends at the process group's timeout (``timeout_s``) with an error that says which rank
  is stuck where (each rank's collectives are reported to the process group's store);
- otherwise ``setup.world_size`` ranks are started here (``harness.run.launch.local.run_local``).

With ``setup.state_dict.round_trip`` a local run saves its checkpoint into a temporary folder
made here and removed here when the run ends, however it ends; each of
``setup.state_dict.reload_world_sizes`` is then a second launch of that many ranks
(``harness.run.rank.checkpoint.reload_step``) that loads the same checkpoint. Their records are the
document's ``reloads``. Joined runs make the folder on rank 0 and skip the reloads (another
world cannot be launched from inside one).

``backend="auto"``: NCCL with one GPU per rank when at least world-size GPUs are visible
(per node when joined: LOCAL_WORLD_SIZE), gloo on CPU otherwise.
"""

from __future__ import annotations

import tempfile
import time
from typing import Callable

from harness.contract.instrument_names import chosen_instruments
from harness.contract.names import BACKENDS
from harness.contract.observation import ObservationError, build_observation
from harness.load.setup import RunSetup
from harness.run.launch.errors import RunError, RunTimeout
from harness.run.launch.joined import joined_world, run_joined
from harness.run.launch.local import run_local
from harness.run.launch.session import session_dir

__all__ = ["run_setup", "RunError", "RunTimeout", "ObservationError"]


def run_setup(
    setup: RunSetup,
    *,
    backend: str = "auto",
    timeout_s: float = 300.0,
    trace_dir: str | None = None,
    on_progress: Callable[[dict[int, str]], None] | None = None,
    preflight: bool = True,
) -> dict | None:
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
            rank processes, memory per rank, a simulation's time (against ``timeout_s``) and
            memory. False skips it.

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
    chosen_instruments(setup.instruments)  # an unknown name is refused before any rank starts
    world = joined_world()
    if preflight:
        from harness.run.preflight import check

        check(setup, backend, joined=world is not None, timeout_s=timeout_s)
    if backend == "fake":
        from harness.run.launch.simulated import run_simulated

        return run_simulated(setup, timeout_s=timeout_s, trace_dir=trace_dir, on_progress=on_progress)
    if world is not None:
        return run_joined(setup, backend, timeout_s, world, trace_dir)
    if not setup.state_dict.round_trip:
        results = run_local(setup, backend=backend, timeout_s=timeout_s, trace_dir=trace_dir, on_progress=on_progress)
        return build_observation(setup, results, launcher="local", simulated=False)
    return _run_local_with_checkpoint(setup, backend, timeout_s, trace_dir, on_progress)


def _run_local_with_checkpoint(
    setup: RunSetup,
    backend: str,
    timeout_s: float,
    trace_dir: str | None,
    on_progress: Callable[[dict[int, str]], None] | None,
) -> dict:
    """The run, then one launch per reload world size, all within ``timeout_s``; the checkpoint
    folder is removed when this returns or raises (the launches have killed their ranks by then)."""
    deadline = time.monotonic() + timeout_s

    def remaining(what: str) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RunTimeout(f"run timed out after {timeout_s:g} s before {what}", pending=[], phases={})
        return left

    # in this process's session folder: removed with it after a SIGKILL too (sweep_stale)
    with tempfile.TemporaryDirectory(prefix="fsdp2-checkpoint-", dir=session_dir()) as folder:
        results = run_local(
            setup,
            backend=backend,
            timeout_s=timeout_s,
            step_kwargs={"checkpoint_dir": folder},
            trace_dir=trace_dir,
            on_progress=on_progress,
        )
        reloads = []
        for size in setup.state_dict.reload_world_sizes:
            reloaded = _reload_setup(setup, size)
            ranks = run_local(
                reloaded,
                backend=backend,
                timeout_s=remaining(f"reloading on {size} ranks"),
                step="harness.run.rank.checkpoint:reload_step",
                step_kwargs={"checkpoint_dir": folder, "saved_world_size": setup.world_size},
            )
            reloads.append(
                {
                    "world_size": size,
                    "mesh_shape": list(reloaded.mesh_shape),
                    "mesh_dim_names": list(reloaded.mesh_dim_names),
                    "ranks": ranks,
                }
            )
    return build_observation(setup, results, launcher="local", simulated=False, reloads=reloads)


def _reload_setup(setup: RunSetup, world_size: int) -> RunSetup:
    """``setup`` on a 1-D mesh of ``world_size`` ranks named as its shard dim (the last); as
    ``harness.run.rank.checkpoint.reload_step``'s setup, without importing torch here."""
    import dataclasses

    return dataclasses.replace(
        setup, mesh_shape=(world_size,), mesh_dim_names=(setup.mesh_dim_names[-1],), observe_ranks=None
    )
