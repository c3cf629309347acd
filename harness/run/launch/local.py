"""The local world: ``setup.world_size`` rank processes started here and supervised to the end.

Ranks are forked from ``harness.run.launch.forkserver`` and meet through a file store in this
process's session folder (no TCP port, so pytest-xdist workers never collide). Each rank sends one
message on its own pipe, its observation or its traceback (EOF: it died). A rank that raises or
dies stops every rank and raises ``RunError``; the deadline, ``RunTimeout`` with where each rank
was and ``harness.run.launch.hang``'s diagnosis. All ranks are joined before returning or raising,
and a rank exits if its lifeline pipe to the parent closes. Ctrl-C and SIGTERM are held while
each rank starts (docs/command-line.md, "Signals and the rank processes"). Backend ``auto`` is
resolved in the ranks: NCCL with one GPU per rank when enough are visible, else gloo."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Any, Callable, Mapping

from harness.run.launch import flight_recorder, teardown
from harness.run.launch.backend import resolve_backend
from harness.run.launch.errors import RunError, RunTimeout
from harness.run.launch.forkserver import forkserver_context, ranks_skip_main
from harness.run.launch.hang import ProgressBoard, diagnose, per_rank_lines
from harness.run.launch.held_signals import signals_held
from harness.run.launch.phase_trail import PhaseTrail, report_trail
from harness.run.launch.rank_process import RankLaunch, rank_main
from harness.run.launch.session import session_dir

__all__ = ["run_local"]

_STARTUP_PHASES = ("starting", "init_process_group")
_GRACE_S = 0.5  # after a failure: how long the failing rank's peers get to report their own


def death_record(rank: int, exit_code: int | None, phase: str) -> dict[str, Any]:
    """What is known of a rank that died without a result: its exit code, the signal that ended it
    (a negative exit code -N is signal N), the phase the launcher last saw it in."""
    name = None
    if exit_code is not None and exit_code < 0:
        try:
            name = signal.Signals(-exit_code).name
        except ValueError:
            name = f"signal {-exit_code}"
    return {"rank": rank, "exit_code": exit_code, "signal": name, "phase": phase}


def run_local(
    setup: Any,
    *,
    backend: str = "auto",
    timeout_s: float = 300.0,
    trace_dir: str | None = None,
    on_progress: Callable[[dict[int, str]], None] | None = None,
    step: str | None = None,
    step_kwargs: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Run ``setup`` on ``setup.world_size`` ranks spawned here; ``run_step``'s result per rank, in order.

    ``backend``: "auto", "gloo" or "nccl" (else ValueError). ``timeout_s``: the whole run's deadline
    from the first process start. ``trace_dir``: an existing folder for each rank's ``rank<r>.json``
    profiler trace. ``on_progress``: called here with every rank's phase (rank -> a name of
    ``harness.contract.names.RANK_PHASES``) when one changes, polled about 5 times a second.
    ``step``: the rank body as "module:function" (default ``harness.run.rank.step:run_step``), called
    with ``run_step``'s arguments plus ``step_kwargs`` (they must pickle).
    With ``setup.record_errors`` (and the default ``step``) a rank that dies gives
    ``{"death": death_record(...)}`` instead.
    Raises RunError (a rank raised or died: names it, carries its traceback) or RunTimeout."""
    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"backend {backend!r}: run_local takes auto, gloo or nccl")
    if backend == "nccl":
        resolve_backend(backend, setup.world_size)  # too few GPUs: fail here, before any process starts
    ctx = forkserver_context()
    # a death is kept for the run's own step (its observation's deaths), not for a checkpoint reload
    keep_deaths = setup.record_errors and step is None
    world = _LocalWorld(ctx, setup.world_size, time.monotonic() + timeout_s, timeout_s, keep_deaths=keep_deaths)
    try:
        # NCCL ranks keep PyTorch's flight recorder; its dumps outlive the run (removed if none).
        world.make_folders(keep_flight_recorder=backend in ("auto", "nccl"))
        # Tests only (tests.support.faults): the phase hooks registered here, carried to the ranks.
        from harness.run.rank.recorders.phases import PHASE_HOOKS

        kwargs = dict(step_kwargs or {}, **({"trace_dir": trace_dir} if trace_dir is not None else {}))
        launch = RankLaunch(
            setup=setup,
            backend=backend,
            init_file=os.path.join(world.folder, "rendezvous"),
            timeout_s=timeout_s,
            phase_trail=world.trail,
            board=world.board,
            phase_hooks=tuple(PHASE_HOOKS),
            flight_recorder_dir=world.fr_dir,
            step=step,
            step_kwargs=kwargs,
        )
        world.start(launch)
        return world.supervise(on_progress)
    finally:
        world.close()


@dataclass
class _LocalWorld:
    """One launch's rank processes, their pipes and shared memory, and how they are watched."""

    ctx: Any
    world_size: int
    deadline: float
    timeout_s: float
    folder: str = ""  # the rendezvous folder, removed at close
    fr_dir: str | None = None
    procs: list[Any] = field(default_factory=list)
    readers: dict[Any, int] = field(default_factory=dict)  # a rank's result pipe -> the rank
    lifelines: list[Any] = field(default_factory=list)
    results: dict[int, dict[str, Any]] = field(default_factory=dict)
    keep_deaths: bool = False  # setup.record_errors: a rank that dies is recorded, not a failed run

    def __post_init__(self) -> None:
        self.trail = PhaseTrail(self.ctx, self.world_size)
        self.board = ProgressBoard(self.ctx, self.world_size)  # each rank's last collective, read on a hang

    def make_folders(self, keep_flight_recorder: bool) -> None:
        """The rendezvous folder and, if ``keep_flight_recorder``, the flight recorder's; signals held."""
        with signals_held():
            self.folder = tempfile.mkdtemp(prefix="run-", dir=session_dir())
            if keep_flight_recorder:
                self.fr_dir = flight_recorder.make_folder()
                teardown.at_hard_exit(flight_recorder.clean_up, self.fr_dir)

    def start(self, launch: RankLaunch) -> None:
        """Start every rank with signals held until its pid is registered; a held signal is raised before the next."""
        for rank in range(self.world_size):
            with signals_held():
                reader, writer = self.ctx.Pipe(duplex=False)
                life_r, life_w = self.ctx.Pipe(duplex=False)
                p = self.ctx.Process(
                    target=rank_main, name=f"fsdp2-rank-{rank}", args=(rank, launch, writer, life_r), daemon=True
                )
                self.readers[reader] = rank
                self.lifelines.append(life_w)
                with ranks_skip_main():
                    p.start()
                teardown.register(p)
                self.procs.append(p)
                writer.close()
                life_r.close()

    def supervise(self, on_progress: Callable[[dict[int, str]], None] | None) -> list[dict[str, Any]]:
        """Wait for every rank's message; raise the first failure or the timeout."""
        pending = dict(self.readers)
        reported = [0] * self.world_size
        while pending:
            if on_progress is not None and self.trail.counts() != reported:
                report_trail(self.trail, reported, on_progress)
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise self._timeout(sorted(pending.values()))
            # A rank's pipe becomes ready with its message, or at EOF when the rank dies
            # (the rank holds the only write end), so the pipes alone cover every ending.
            ready = wait(list(pending), timeout=min(remaining, 1.0 if on_progress is None else 0.2))
            failures = [f for f in (self._receive(r, pending) for r in ready) if f]
            if failures:
                raise self._blame(failures, pending)
        if on_progress is not None and self.trail.counts() != reported:
            report_trail(self.trail, reported, on_progress)
        return [self.results[r] for r in range(self.world_size)]

    def _receive(self, reader: Any, pending: dict[Any, int]) -> tuple[int, float, RunError] | None:
        """Read a ready rank pipe: store a result, or return (cause order, when, the RunError).

        A death sorts first (0): its peers' errors on the closed connection are stamped earlier than
        the death, which is seen only when its pipe closes."""
        rank = pending.pop(reader)
        try:
            kind, when, payload = reader.recv()
        except (EOFError, OSError):
            self.procs[rank].join(timeout=5)
            code = self.procs[rank].exitcode
            if self.keep_deaths:  # its peers' errors on the broken connection are recorded by them
                self.results[rank] = {"death": death_record(rank, code, self.trail.current(rank))}
                return None
            hint = " (SIGKILL: often the kernel's out-of-memory killer)" if code == -9 else ""
            return (
                0,
                time.time(),
                RunError(
                    f"rank {rank} died without a result (exit code {code}{hint}); no traceback: "
                    f"the process ended abruptly (killed, os._exit, or a crash in native code)",
                    rank=rank,
                ),
            )
        if kind == "error":
            return 1, when, RunError.rank_raised(rank, payload)
        self.results[rank] = json.loads(payload)
        return None

    def _blame(self, failures: list[tuple[int, float, RunError]], pending: dict[Any, int]) -> RunError:
        """Give a failing rank's peers a moment to fail too; blame a rank that died, else the first to fail."""
        grace = time.monotonic() + _GRACE_S
        while pending and time.monotonic() < grace:
            more = wait(list(pending), timeout=max(0.0, grace - time.monotonic()))
            failures += [f for f in (self._receive(r, pending) for r in more) if f]
        failures.sort(key=lambda f: f[:2])
        first = failures[0][2]
        others = sorted(f[2].rank for f in failures[1:])
        if others:
            first.args = (f"{first.args[0]}\n(ranks {others} failed after it)",)
        return first

    def _timeout(self, pending: list[int]) -> RunTimeout:
        """The deadline passed: where each unfinished rank is, the hang's diagnosis, NCCL's dumps."""
        phases = {r: self.trail.current(r) for r in pending}
        where = ", ".join(f"rank {r} in {phases[r]}" for r in pending)
        if all(p in _STARTUP_PHASES for p in phases.values()):
            cause = (
                "No rank got past start-up: the timeout is likely too short for starting "
                f"{self.world_size} ranks on this machine; raise it (--timeout / --run-timeout)."
            )
        else:
            cause = "A hang: mismatched or missing collectives, or a stuck rank."
        progress = self.board.read()
        all_phases = {r: phases.get(r, "done") for r in progress}
        verdict = diagnose(progress, all_phases)
        dumps = flight_recorder.dump(self.fr_dir, self.world_size) if self.fr_dir else []
        details = "\n".join(
            [f"Diagnosis: {verdict}.", *per_rank_lines(progress, all_phases)]
            + (
                [f"NCCL flight recorder dumps (read with torchfrtrace {self.fr_dir}): {', '.join(dumps)}"]
                + flight_recorder.device_view(dumps)
                if dumps
                else []
            )
        )
        return RunTimeout(
            f"run timed out after {self.timeout_s:g} s: {len(pending)} of {self.world_size} ranks had not "
            f"finished ({where}); finished: {sorted(self.results) or 'none'}. {cause} All ranks were killed."
            f"\n{details}",
            pending=pending,
            phases=phases,
            verdict=verdict,
            progress=progress,
            flight_recorder=dumps,
        )

    def close(self) -> None:
        """Stop and join every rank, close the pipes, remove the rendezvous folder (and empty dumps);
        with signals held, raised after."""
        with signals_held():
            teardown.stop(self.procs)
            for conn in list(self.readers) + self.lifelines:
                conn.close()
            if self.folder:
                shutil.rmtree(self.folder, ignore_errors=True)
            if self.fr_dir is not None:
                flight_recorder.clean_up(self.fr_dir)
                teardown.cancel_hard_exit(flight_recorder.clean_up, self.fr_dir)
