"""Running a setup: the one entry point the CLI, the checks' fixtures and tests call.

:func:`run_setup` returns the observation document (``harness/contract/observation.schema.json``),
validated. Its ranks are simulated here with ``backend="fake"`` (``harness.run.launch.simulated``);
under torchrun (RANK, WORLD_SIZE, MASTER_ADDR set) this process is one rank of that world, and
rank 0 gathers the document: that is how a multi-node cluster is validated, the launcher owning
failures and a hang ending at the process group's timeout with who is stuck where; otherwise
``setup.world_size`` ranks are started here (``harness.run.launch.local.run_local``).

With ``setup.state_dict.round_trip`` the checkpoint goes to a temporary folder removed however the
run ends, and each of ``reload_world_sizes`` is a second launch that loads it (the document's
``reloads``; joined runs skip them)."""

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
    """Run one FSDP2 training step as ``setup`` says and return its observation document (None on a
    non-zero rank of a joined world).

    ``backend``: "auto", "gloo", "nccl" or "fake". ``timeout_s``: the whole run's deadline (joined:
    the process group timeout). ``trace_dir``: an existing folder for each rank's ``rank<r>.json``
    profiler trace. ``on_progress``: called with each rank's phase (not in a joined world).
    ``preflight``: first check this machine can hold the run (``harness.run.preflight``).
    Raises RunError (a rank failed), RunTimeout, PreflightError (nothing started), or
    ObservationError (the document does not match the schema: a harness bug)."""
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
        return build_observation(
            setup, results, launcher="local", simulated=False, environment=_when_all_died(results, backend, setup)
        )
    return _run_local_with_checkpoint(setup, backend, timeout_s, trace_dir, on_progress)


def _run_local_with_checkpoint(
    setup: RunSetup,
    backend: str,
    timeout_s: float,
    trace_dir: str | None,
    on_progress: Callable[[dict[int, str]], None] | None,
) -> dict:
    """The run, then one launch per reload world size, all within ``timeout_s``; the folder is removed after."""
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
    return build_observation(
        setup,
        results,
        launcher="local",
        simulated=False,
        reloads=reloads,
        environment=_when_all_died(results, backend, setup),
    )


def _when_all_died(results: list[dict], backend: str, setup: RunSetup) -> dict | None:
    """Where every rank died (recorded: ``setup.record_errors``), the environment as this process sees it
    (no rank reported one); None otherwise. Imports torch."""
    if any("death" not in r for r in results):
        return None
    import platform

    import torch

    from harness.run.launch.backend import resolve_backend

    pg_backend, device_type = resolve_backend(backend, setup.world_size)
    return {
        "torch_version": str(torch.__version__),
        "cuda_version": torch.version.cuda,
        "python_version": platform.python_version(),
        "backend": pg_backend,
        "device_type": device_type,
    }


def _reload_setup(setup: RunSetup, world_size: int) -> RunSetup:
    """``setup`` on a 1-D mesh of ``world_size`` ranks named as its shard dim (the last); as
    ``harness.run.rank.checkpoint.reload_step``'s setup, without importing torch here."""
    import dataclasses

    return dataclasses.replace(
        setup, mesh_shape=(world_size,), mesh_dim_names=(setup.mesh_dim_names[-1],), observe_ranks=None
    )
