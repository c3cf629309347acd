"""The simulated backend: the fake process group and ``FakeTensorMode`` in this process.

``torch.testing._internal.distributed.fake_pg``'s backend "fake" is a process group of any size
whose collectives complete at once; under ``FakeTensorMode`` tensors have no storage. For each of
``setup.observe_ranks`` (default: every rank up to :data:`ALL_RANKS_UP_TO`, else rank 0)
:func:`run_simulated` runs the real run's rank step (``run_step(..., simulated=True)``) as that
rank. The document has a real run's form (``numerics: null``, ``environment.simulated: true``,
backend "fake"); timings are the simulation's. It needs a process without a default process
group; ``timeout_s`` is checked between ranks. Details: ``harness.run.rank.fake``."""

from __future__ import annotations

import time
import traceback
import warnings
from typing import Any, Callable

from harness.contract.names import RANK_PHASES, rank_phase_code
from harness.contract.observation import build_observation
from harness.run.launch.errors import RunError, RunTimeout
from harness.run.launch.held_signals import signals_held

__all__ = ["run_simulated", "ALL_RANKS_UP_TO"]

# Simulating a rank costs well under a second for the walkthrough: small worlds record them all,
# so a spec written for real ranks checks every rank when simulated too.
ALL_RANKS_UP_TO = 8


def run_simulated(
    setup: Any,
    *,
    timeout_s: float = 300.0,
    trace_dir: str | None = None,
    on_progress: Callable[[dict[int, str]], None] | None = None,
) -> dict[str, Any]:
    """The validated observation document of ``setup`` simulated with the fake backend.

    ``trace_dir``: an existing folder for each rank's ``rank<r>.json`` trace; ``on_progress``: called
    with each simulated rank's phase. Raises RunError (a rank raised, or this process already has a
    default process group) or RunTimeout (with the ranks still to simulate)."""
    world_size = setup.world_size
    default = range(world_size) if world_size <= ALL_RANKS_UP_TO else (0,)
    ranks = sorted(set(setup.observe_ranks if setup.observe_ranks else default))
    bad = [r for r in ranks if not 0 <= r < world_size]
    if bad:
        raise RunError(f"setup.observe_ranks {bad}: not ranks of a world of {world_size}")
    deadline = time.monotonic() + timeout_s
    phases = dict.fromkeys(ranks, RANK_PHASES[0])

    # held to the safe points of the run: each simulated rank entering a phase (harness.run.launch.held_signals)
    with signals_held() as deliver_signals:
        # torch's own import (seconds, in this process) is held too: a Ctrl-C inside it left numpy
        # half-imported (a RecursionError traceback later) or ended the CLI by SIGINT (status -2)
        import torch.distributed as dist

        if dist.is_initialized():
            raise RunError(
                "the fake backend runs in this process and needs it free of a default process group "
                f"(one is initialized: backend {dist.get_backend()}); run it outside torchrun"
            )
        deliver_signals()
        return _simulate(setup, ranks, phases, deadline, timeout_s, trace_dir, on_progress, deliver_signals)


def _forget_meshes() -> None:
    # DTensor's sharding-propagation caches compare a DeviceMesh by layout and names, not process
    # group: the next simulated rank's TP all-reduces would get the destroyed world's group names
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache

    _clear_sharding_prop_cache()  # torch's own: the Python cache and the C++ fast path's


def _simulate(
    setup: Any,
    ranks: list[int],
    phases: dict[int, str],
    deadline: float,
    timeout_s: float,
    trace_dir: str | None,
    on_progress: Callable[[dict[int, str]], None] | None,
    deliver_signals: Callable[[], None],
) -> dict[str, Any]:
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from harness.run.rank.step import run_step

    world_size = setup.world_size
    results = []

    def on_phase(rank: int, phase: str) -> None:
        deliver_signals()  # a safe point: the phase's own Python code, not a callback under C++
        rank_phase_code(phase)  # the one phase table: an unknown name raises here as in a local rank
        phases[rank] = phase
        if on_progress is not None:
            on_progress(dict(phases))

    for i, rank in enumerate(ranks):
        deliver_signals()
        if time.monotonic() > deadline:
            raise RunTimeout(
                f"simulation timed out after {timeout_s:g} s; ranks {ranks[i:]} were not simulated",
                pending=ranks[i:],
                phases=dict.fromkeys(ranks[i:], RANK_PHASES[0]),
            )
        dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
        try:
            with warnings.catch_warnings():
                # FSDP2's lazy init compares its CPU shard (from fully_shard, storage_for_sharding)
                # with the fake one by data pointer: torch warns, and the comparison is False.
                warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")
                results.append(
                    run_step(
                        setup,
                        rank,
                        world_size,
                        "cpu",
                        simulated=True,
                        trace_dir=trace_dir,
                        on_phase=lambda phase, rank=rank: on_phase(rank, phase),
                    )
                )
            on_phase(rank, "done")
        except Exception as exc:
            tb = traceback.format_exc()
            raise RunError.rank_raised(rank, tb, who="simulated rank") from exc
        finally:
            dist.destroy_process_group()
            _forget_meshes()
    deliver_signals()
    environment = dict(results[0]["environment"], backend="fake", device_name="cpu (simulated)")
    return build_observation(setup, results, launcher="simulated", simulated=True, environment=environment)
