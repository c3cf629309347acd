"""A local rank process's main: join the world, run the rank body, send one message home.

Started by ``harness.run.launch.local`` from its forkserver: initializes the process group through a
file store, runs the rank body, marks its phases and collectives in the launcher's shared memory,
and sends its result as JSON text (or its traceback) on its pipe."""

from __future__ import annotations

import functools
import importlib
import json
import os
import signal
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from harness.run.launch import flight_recorder, rank_output
from harness.run.launch.backend import resolve_backend
from harness.run.launch.errors import RunError
from harness.run.launch.hang import ProgressBoard
from harness.run.launch.phase_trail import PhaseTrail
from harness.run.rank.local_placement import device_ordinal_problem
from harness.run.rank.process_group import group_backend

__all__ = ["RankLaunch", "rank_main"]

LIFELINE_EXIT = 70
"""A rank's exit status when its launcher disappeared (its lifeline pipe closed)."""


@dataclass(frozen=True)
class RankLaunch:
    """What every rank of one local launch is given (pickled). ``backend``: "auto", "gloo" or "nccl",
    resolved in the rank; ``init_file``: the file store; ``timeout_s``: the run's deadline (the
    backend's is 60 s longer); ``phase_hooks``: TESTS ONLY; ``flight_recorder_dir``: None, not kept;
    ``step``: "module:function" (None: ``harness.run.rank.step:run_step``), called with ``step_kwargs``."""

    setup: Any
    backend: str
    init_file: str
    timeout_s: float
    phase_trail: PhaseTrail
    board: ProgressBoard
    phase_hooks: tuple[Callable[[str], None], ...] = ()
    flight_recorder_dir: str | None = None
    step: str | None = None
    step_kwargs: Mapping[str, Any] = field(default_factory=dict)


def _watch_lifeline(lifeline: Any) -> None:
    """In a rank: exit at once when the parent's end of the lifeline closes (parent gone)."""
    try:
        lifeline.recv_bytes()
    except (EOFError, OSError):
        pass
    os._exit(LIFELINE_EXIT)


def rank_main(rank: int, launch: RankLaunch, conn: Any, lifeline: Any) -> None:
    """Process target: run rank ``rank``; send ("ok", time, JSON text) or ("error", time, traceback) on
    ``conn``. Ignores Ctrl-C: the parent stops every rank."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_lifeline, args=(lifeline,), daemon=True).start()
    output = rank_output.log_path(os.path.dirname(launch.init_file), rank)
    try:
        with rank_output.captured(output):  # torch's own prints go to the rank's log
            result = _run_rank(rank, launch)
        # As JSON text: the document is JSON anyway, and the parent then unpickles nothing
        # that would make it import torch.
        conn.send(("ok", time.time(), json.dumps(result)))
        # No destroy_process_group: it can block on peers; the process exits now.
    except BaseException:  # noqa: BLE001 - everything a rank raises goes to the parent
        try:
            conn.send(("error", time.time(), traceback.format_exc() + rank_output.shown(output, rank)))
        except Exception:  # noqa: BLE001 - the parent is gone or the pipe broke: nothing to tell
            pass
    finally:
        conn.close()
    os._exit(0)


def _run_rank(rank: int, launch: RankLaunch) -> dict[str, Any]:
    from harness.run.rank.recorders.phases import PHASE_HOOKS

    PHASE_HOOKS[:] = launch.phase_hooks
    on_phase = functools.partial(launch.phase_trail.enter, rank)
    device_type = _join_world(rank, launch, on_phase)
    body = _rank_body(launch.step)
    try:
        return body(
            launch.setup,
            rank,
            launch.setup.world_size,
            device_type,
            on_phase=on_phase,
            collective_log=launch.board.writer(rank),
            **dict(launch.step_kwargs),
        )
    finally:
        on_phase("done")


def _join_world(rank: int, launch: RankLaunch, on_phase: Callable[[str], None]) -> str:
    """Pick the device, then ``init_process_group`` through the file store; the device type."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    world_size = launch.setup.world_size
    pg_backend, device_type = resolve_backend(launch.backend, world_size)
    if device_type == "cuda":
        problem = device_ordinal_problem(rank, torch.cuda.device_count(), "the rank")
        if problem:  # one GPU per rank: never two ranks on one device by wrapping around
            raise RunError(f"rank {rank}: {problem}", rank=rank)
        torch.cuda.set_device(rank)
        if launch.flight_recorder_dir:
            flight_recorder.enable(launch.flight_recorder_dir)
    elif "OMP_NUM_THREADS" not in os.environ:
        # Ranks share this machine's cores: one rank per core's worth of threads, as
        # torchrun does (OMP_NUM_THREADS=1), instead of every rank using every core.
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // world_size))
    on_phase("init_process_group")
    dist.init_process_group(
        group_backend(pg_backend, launch.setup.fsdp.offloads),
        init_method="file://" + launch.init_file,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=launch.timeout_s + 60),
    )
    return device_type


def _rank_body(step: str | None) -> Callable[..., dict[str, Any]]:
    if step is None:
        from harness.run.rank.step import run_step

        return run_step
    module, _, name = step.partition(":")
    return getattr(importlib.import_module(module), name)
