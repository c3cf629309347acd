"""Launching ranks: local (spawned here), joined (torchrun's world), errors and clean-up.

Local launch (:func:`run_local`): N rank processes started from a ``multiprocessing``
forkserver whose preload list holds torch, FSDP and the rank step, so a rank starts by
``fork()`` of an interpreter that has already imported them (a spawn would import torch in
every rank: seconds each on this 2-core machine). The forkserver is started once per
process and reused by later runs. Ranks meet through a file store in a fresh temporary
directory (``init_method="file://..."``): no TCP port, so parallel pytest-xdist workers
never collide.

Temporary files live in one folder per harness process, ``<tmp>/fsdp2-harness-<pid>-<start>-*``
(pid and the process's start time, so a reused pid is told apart): each run's rendezvous folder,
and a note naming multiprocessing's own temporary folder (``pymp-*``, where the forkserver's
socket lives). Both are removed on every exit that runs Python's exit handlers (normal exit,
an exception, Ctrl-C, SIGTERM through the CLI); after a SIGKILL the next harness process to
launch ranks removes the folders whose owner is gone (:func:`sweep_stale`). Leftovers are
harmless meanwhile: every run rendezvouses in a fresh folder. At exit the forkserver is
stopped and reaped, so it does not outlive the process that started it.

Each rank sends one message on its own pipe: its observation, or its traceback. The parent
waits on all pipes against one deadline (a pipe also reports its rank's death: EOF):

- a rank that raises: its traceback arrives, every other rank is killed, :class:`RunError`
  names the rank and carries the traceback;
- a rank that dies without a message (killed, ``os._exit``, segfault): the same, with its
  exit code;
- the deadline passes (a hang, e.g. mismatched collectives): every rank is killed,
  :class:`RunTimeout` lists the ranks that had not finished and the phase each was in;
- in every case all rank processes are killed and joined before returning or raising.
  Ranks also hold a lifeline pipe to the parent and exit if it disappears, so not even a
  killed parent leaves ranks behind.

Backend ``auto`` is resolved in the ranks (the parent need not import torch): NCCL with one
GPU per rank (``cuda:<local rank>``) when at least world-size GPUs are visible, gloo on CPU
otherwise.

Joined launch (:func:`joined_world`, used by ``harness.run.runner``): under ``torchrun`` (RANK,
WORLD_SIZE, MASTER_ADDR set) the world already exists; see ``harness/run/runner.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import multiprocessing
import os
import re
import shutil
import signal
import tempfile
import threading
import time
import traceback
from multiprocessing.connection import wait
from typing import Any, Callable, Iterator, Mapping

from harness.contract.names import BACKENDS

__all__ = [
    "RunError",
    "exception_line",
    "RunTimeout",
    "BACKENDS",
    "PRELOAD",
    "run_local",
    "joined_world",
    "resolve_backend",
    "forkserver_context",
    "session_dir",
    "sweep_stale",
    "TEMP_PREFIX",
]


# Imported once by the forkserver, inherited by every rank. torch._dynamo: FSDP's hooks are
# wrapped in torch._dynamo.disable, which imports torch._dynamo on first call (~1 s).
# Not harness.run.checkpoint (torch.distributed.checkpoint, ~0.4 s here): only runs with
# setup.state_dict import it, in their ranks.
PRELOAD = ["torch", "torch.distributed.fsdp", "torch._dynamo", "harness.run.rank_step"]

_PHASE_CODES = ("starting", "init_process_group", "setup", "replica", "forward", "backward", "optimizer", "observe", "done",
                "bandwidth", "state_dict")


class PhaseTrail:
    """Each rank's phases in the order it entered them, in shared memory: a count and a ring of
    the last :attr:`DEPTH` phase codes per rank. The parent polls a few times a second, so a
    phase that lasts milliseconds (the optimizer step of a small model) would be missed by a
    plain "current phase" slot; the trail lets the parent report every phase it passed.
    Each rank writes only its own row (code first, then count), so no lock is needed."""

    DEPTH = 32

    def __init__(self, ctx: Any, world_size: int) -> None:
        self.world_size = world_size
        self.array = ctx.Array("i", world_size * (1 + self.DEPTH), lock=False)

    def enter(self, rank: int, name: str) -> None:
        row = rank * (1 + self.DEPTH)
        count = self.array[row]
        self.array[row + 1 + count % self.DEPTH] = _PHASE_CODES.index(name) if name in _PHASE_CODES else 0
        self.array[row] = count + 1

    def current(self, rank: int) -> str:
        row = rank * (1 + self.DEPTH)
        count = self.array[row]
        return _PHASE_CODES[self.array[row + 1 + (count - 1) % self.DEPTH]] if count else _PHASE_CODES[0]

    def counts(self) -> list[int]:
        return [self.array[r * (1 + self.DEPTH)] for r in range(self.world_size)]

    def since(self, rank: int, seen: int, count: int) -> list[str]:
        """The phases rank entered after its first ``seen`` ones, up to ``count`` (the last DEPTH at most)."""
        row = rank * (1 + self.DEPTH)
        return [_PHASE_CODES[self.array[row + 1 + i % self.DEPTH]] for i in range(max(seen, count - self.DEPTH), count)]


class RunError(RuntimeError):
    """A run failed. ``rank`` is the failing rank (None if not one rank's fault); the message
    names it and carries its traceback text (``traceback``)."""

    def __init__(self, message: str, *, rank: int | None = None, traceback: str = "") -> None:
        super().__init__(message)
        self.rank = rank
        self.traceback = traceback

    @classmethod
    def rank_raised(cls, rank: int, tb: str, *, who: str = "rank", after: str = "") -> "RunError":
        """A rank's exception: its first line names the rank and the exception (and phase), the
        traceback ``tb`` follows, then ``after`` (a joined world's diagnosis)."""
        return cls(f"{who} {rank} failed: {exception_line(tb)}\n{tb}{after}", rank=rank, traceback=tb)


class RunTimeout(RunError):
    """A run did not finish before the caller's timeout. ``pending`` lists the ranks that
    had not finished, ``phases`` the phase each was last in; ``verdict`` says which rank is
    stuck where (``harness.run.hang.diagnose``), ``progress`` holds each rank's last
    collective entered and completed, ``flight_recorder`` the NCCL flight recorder dumps."""

    def __init__(self, message: str, *, pending: list[int], phases: Mapping[int, str],
                 verdict: str = "", progress: Mapping[int, Any] | None = None,
                 flight_recorder: list[str] | None = None) -> None:
        super().__init__(message, rank=pending[0] if pending else None)
        self.pending = pending
        self.phases = dict(phases)
        self.verdict = verdict  # harness.run.hang.diagnose: which rank is stuck where
        self.progress = dict(progress or {})  # rank -> {"entered", "completed"} (last collective records)
        self.flight_recorder = list(flight_recorder or [])  # NCCL flight recorder dumps, one per rank


def resolve_backend(backend: str, world_size: int, local_world_size: int | None = None) -> tuple[str, str]:
    """(process-group backend, device type) for ``backend`` in :data:`BACKENDS` minus "fake".

    ``auto``: NCCL on CUDA when at least ``local_world_size`` (default ``world_size``) GPUs
    are visible, else gloo on CPU.
    """
    import torch

    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"backend {backend!r}: expected one of {BACKENDS}")
    needed = local_world_size or world_size
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= needed else "gloo"
    if backend == "nccl":
        if torch.cuda.device_count() < needed:
            raise RunError(f"backend nccl needs {needed} GPUs (one per rank), {torch.cuda.device_count()} visible")
        return "nccl", "cuda"
    return "gloo", "cpu"


def joined_world(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The world torchrun (or any launcher) set up, from its environment; None if not joined.

    Returns ``{"rank", "world_size", "local_rank", "local_world_size"}`` when RANK,
    WORLD_SIZE and MASTER_ADDR are all set.
    """
    env = os.environ if environ is None else environ
    if not all(k in env for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR")):
        return None
    world_size = int(env["WORLD_SIZE"])
    return {
        "rank": int(env["RANK"]),
        "world_size": world_size,
        "local_rank": int(env.get("LOCAL_RANK", env["RANK"])),
        "local_world_size": int(env.get("LOCAL_WORLD_SIZE", world_size)),
    }


_CONTEXT: Any = None
_START_LOCK = threading.Lock()


@contextlib.contextmanager
def _ranks_skip_main() -> Iterator[None]:
    """While starting ranks: do not make them re-run the caller's ``__main__``.

    A spawn/forkserver child normally re-imports the parent's main module (as
    ``__mp_main__``) so that a target defined there can be found. The rank target lives in
    this module, so that re-import only costs start-up time (a pytest or CLI entry script,
    per rank) and forces an ``if __name__ == "__main__":`` guard on every script that calls
    ``run_setup``. Dropping the two ``init_main_from_*`` keys of the preparation data skips it.
    """
    from multiprocessing import spawn

    original = spawn.get_preparation_data

    def preparation_data(name: str) -> dict[str, Any]:
        data = original(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return data

    with _START_LOCK:
        spawn.get_preparation_data = preparation_data
        try:
            yield
        finally:
            spawn.get_preparation_data = original


TEMP_PREFIX = "fsdp2-harness-"
_SESSION_RE = re.compile(re.escape(TEMP_PREFIX) + r"(\d+)-(\d+|x)-")
_OWNED = "owned"  # in a session folder: other temporary folders this process made, one a line
_SESSION: str | None = None


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks after boot, /proc/PID/stat field 22); None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(pid: int, start: str) -> bool:
    """Whether the process that made a session folder (pid, start time) still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: theirs, not ours to judge
    return start == "x" or _start_time(pid) in (start, None)


def sweep_stale(tmp: str | None = None) -> list[str]:
    """Remove session folders (and the folders they note) of harness processes that are gone,
    e.g. killed with SIGKILL; return what was removed. Never raises."""
    tmp = tmp or tempfile.gettempdir()
    removed = []
    try:
        names = os.listdir(tmp)
    except OSError:
        return removed
    for name in names:
        m = _SESSION_RE.match(name)
        if not m or _alive(int(m.group(1)), m.group(2)):
            continue
        folder = os.path.join(tmp, name)
        try:
            with open(os.path.join(folder, _OWNED)) as f:
                owned = [line.strip() for line in f if line.strip()]
        except OSError:
            owned = []
        for other in owned:  # only multiprocessing's folders beside this one
            if os.path.dirname(other) == tmp and os.path.basename(other).startswith("pymp-"):
                shutil.rmtree(other, ignore_errors=True)
                removed.append(other)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def session_dir() -> str:
    """This process's temporary folder (made on first use, removed at exit; see module docstring)."""
    global _SESSION
    if _SESSION is None or not os.path.isdir(_SESSION):
        pid = os.getpid()
        _SESSION = tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{pid}-{_start_time(pid) or 'x'}-")
        atexit.register(shutil.rmtree, _SESSION, True)
    return _SESSION


def _note_owned(path: str) -> None:
    with open(os.path.join(session_dir(), _OWNED), "a") as f:
        f.write(path + "\n")


def _stop_forkserver() -> None:
    """At exit: end the forkserver now and reap it (left alone, it shuts down on its own a
    second or two after this process, with torch loaded, re-parented to init); the same for
    multiprocessing's resource tracker."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    pid = getattr(server, "_forkserver_pid", None)
    if not pid:
        return
    try:
        os.kill(pid, signal.SIGTERM)  # it has no state to save; its ranks are gone already
    except OSError:
        pass
    try:
        server._stop()  # closes its lifeline, waits for it, removes its socket
    except Exception:  # noqa: BLE001 - exiting anyway; another Python may lack _stop
        try:
            os.waitpid(pid, 0)
        except OSError:
            pass
    # multiprocessing's resource tracker, started with the forkserver, also outlives us otherwise
    from multiprocessing import resource_tracker

    try:
        resource_tracker._resource_tracker._stop()  # closes its pipe and waits for it (no torch there: quick)
    except Exception:  # noqa: BLE001
        pass


def forkserver_context() -> Any:
    """The forkserver context with :data:`PRELOAD` set (the server starts on first use).

    On first call also removes what killed harness processes left (:func:`sweep_stale`),
    notes multiprocessing's temporary folder in this process's session folder, and arranges
    for the forkserver to be stopped at exit.
    """
    global _CONTEXT
    if _CONTEXT is None:
        sweep_stale()
        from multiprocessing import util

        _note_owned(util.get_temp_dir())  # made now if not yet; the forkserver's socket goes there
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        atexit.register(_stop_forkserver)  # runs before multiprocessing's own exit handler
        _CONTEXT = ctx
    return _CONTEXT


def _watch_lifeline(lifeline: Any) -> None:
    """In a rank: exit at once when the parent's end of the lifeline closes (parent gone)."""
    try:
        lifeline.recv_bytes()
    except (EOFError, OSError):
        pass
    os._exit(70)


def _rank_main(
    rank: int,
    world_size: int,
    setup: Any,
    backend: str,
    init_file: str,
    timeout_s: float,
    conn: Any,
    lifeline: Any,
    phase_trail: PhaseTrail,
    phase_hooks: tuple[Any, ...],
    progress_board: Any = None,
    flight_recorder_dir: str | None = None,
    step: str | None = None,
    step_kwargs: Mapping[str, Any] | None = None,
) -> None:
    """A rank process: init the process group, run the step, send the result or traceback.

    ``phase_hooks``: the calling process's ``PHASE_HOOKS`` (tests only; empty otherwise).
    ``step``: "module:function" called instead of ``run_step`` (same arguments), with
    ``step_kwargs`` added (``trace_dir`` travels there too).
    Ctrl-C in a terminal reaches the whole process group; a rank ignores it and lets the
    parent stop every rank (an interrupt landing inside torch's weakref callbacks would
    print an "Exception ignored" traceback from each rank).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_lifeline, args=(lifeline,), daemon=True).start()

    def on_phase(name: str) -> None:
        phase_trail.enter(rank, name)

    from harness.run import rank_output

    output = rank_output.log_path(os.path.dirname(init_file), rank)

    try:
        from datetime import timedelta

        import torch
        import torch.distributed as dist

        from harness.run.rank_step import run_step
        from harness.run.recorders.phases import PHASE_HOOKS

        PHASE_HOOKS[:] = phase_hooks

        pg_backend, device_type = resolve_backend(backend, world_size)
        if device_type == "cuda":
            torch.cuda.set_device(rank % torch.cuda.device_count())
            if flight_recorder_dir:
                _enable_flight_recorder(flight_recorder_dir)
        elif "OMP_NUM_THREADS" not in os.environ:
            # Ranks share this machine's cores: one rank per core's worth of threads, as
            # torchrun does (OMP_NUM_THREADS=1), instead of every rank using every core.
            torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // world_size))
        on_phase("init_process_group")
        # The harness's deadline, not the backend's, ends a hang: give the backend more time.
        dist.init_process_group(
            pg_backend,
            init_method="file://" + init_file,
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout_s + 60),
        )
        if step is not None:
            import importlib

            module, _, name = step.partition(":")
            run_step = getattr(importlib.import_module(module), name)
        try:
            log = progress_board.writer(rank) if progress_board is not None else None
            with rank_output.captured(output):  # torch's own prints go to the rank's log
                result = run_step(setup, rank, world_size, device_type, on_phase=on_phase, collective_log=log,
                                  **dict(step_kwargs or {}))
        finally:
            on_phase("done")
        # As JSON text: the document is JSON anyway, and the parent then unpickles nothing
        # that would make it import torch.
        conn.send(("ok", time.time(), json.dumps(result)))
        # No destroy_process_group: it can block on peers; the process exits now.
    except BaseException:  # noqa: BLE001 - everything a rank raises goes to the parent
        try:
            conn.send(("error", time.time(), traceback.format_exc() + rank_output.shown(output, rank)))
        except Exception:
            pass
    finally:
        conn.close()
    os._exit(0)


FLIGHT_RECORDER_PREFIX = "nccl_trace_rank_"
"""File name of a rank's NCCL flight recorder dump, followed by the rank."""


def _enable_flight_recorder(folder: str) -> None:
    """In a NCCL rank, before init_process_group: keep PyTorch's flight recorder
    (``TORCH_NCCL_TRACE_BUFFER_SIZE`` entries), dump it to ``folder/nccl_trace_rank_<r>`` and
    open the pipe ``folder/pipe_<r>.pipe`` through which the launcher asks for a dump on a hang
    (``TORCH_NCCL_DEBUG_INFO_PIPE_FILE``). Variables the user set are kept."""
    dump = os.path.join(folder, FLIGHT_RECORDER_PREFIX)
    for name, value in (("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"), ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1"),
                        ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", dump), ("TORCH_FR_DUMP_TEMP_FILE", dump),
                        ("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", os.path.join(folder, "pipe_"))):
        os.environ.setdefault(name, value)


def _dump_flight_recorder(folder: str, world_size: int, wait_s: float = 5.0) -> list[str]:
    """Ask each NCCL rank for its flight recorder dump (write to its pipe), wait for the files.

    Returns the dump files written (none on gloo: no rank opened a pipe)."""
    pipes = [os.path.join(folder, f"pipe_{r}.pipe") for r in range(world_size)]
    asked = []
    for rank, pipe in enumerate(pipes):
        if not os.path.exists(pipe):
            continue
        try:
            fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # no reader: the rank is gone
            continue
        try:
            os.write(fd, b"1\n")
            asked.append(os.path.join(folder, f"{FLIGHT_RECORDER_PREFIX}{rank}"))
        finally:
            os.close(fd)
    deadline = time.monotonic() + (wait_s if asked else 0)
    while asked and time.monotonic() < deadline and not all(os.path.exists(p) for p in asked):
        time.sleep(0.1)
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.startswith(FLIGHT_RECORDER_PREFIX))


def _report_trail(trail: PhaseTrail, reported: list[int], on_progress: Callable[[dict[int, str]], None]) -> None:
    """Call on_progress once per phase step since the last report, every rank's trail in step:
    a rank with fewer new phases stays at its latest. ``reported`` (counts) is updated."""
    counts = trail.counts()
    trails = {r: trail.since(r, reported[r], counts[r]) or [trail.current(r)] for r in range(trail.world_size)}
    for k in range(max(len(t) for t in trails.values())):
        on_progress({r: t[min(k, len(t) - 1)] for r, t in trails.items()})
    reported[:] = counts


def _hang_diagnosis(board: Any, phases: Mapping[int, str]) -> tuple[str, dict[int, Any], list[str]]:
    """(verdict, progress, per-rank lines) from the ranks' progress board."""
    from harness.run.hang import diagnose, per_rank_lines

    progress = board.read()
    all_phases = {r: phases.get(r, "done") for r in progress}
    return diagnose(progress, all_phases), progress, per_rank_lines(progress, all_phases)


def _receive(reader: Any, pending: dict[Any, int], procs: list[Any], results: dict[int, Any]) -> tuple[int, float, RunError] | None:
    """Read a ready rank pipe: store a result, or return (cause order, when, the RunError).

    A rank that died without a message sorts first (cause order 0): its peers then fail in
    their next collective on a closed connection and report their own, earlier-stamped error
    time, while a death is only seen when its pipe closes, possibly later.
    """
    rank = pending.pop(reader)
    try:
        kind, when, payload = reader.recv()
    except (EOFError, OSError):
        procs[rank].join(timeout=5)
        code = procs[rank].exitcode
        hint = " (SIGKILL: often the kernel's out-of-memory killer)" if code == -9 else ""
        return 0, time.time(), RunError(
            f"rank {rank} died without a result (exit code {code}{hint}); no traceback: "
            f"the process ended abruptly (killed, os._exit, or a crash in native code)",
            rank=rank,
        )
    if kind == "error":
        return 1, when, RunError.rank_raised(rank, payload)
    results[rank] = json.loads(payload)
    return None


def exception_line(tb: str) -> str:
    """The exception a traceback text ends with, and its notes, on one line (cut at 300
    characters): what the first line of a failed run says; the frames follow it."""
    lines = tb.rstrip().splitlines()
    tail: list[str] = []
    for line in reversed(lines):  # the exception and its notes come after the last (indented) frame line
        if line.startswith(" ") or line.startswith("Traceback (most recent call last)"):
            break
        tail.append(line.strip())
    text = " ".join(reversed(tail)) or (lines[-1].strip() if lines else "")
    return text if len(text) <= 300 else text[:297] + "..."


def _kill_all(procs: list[Any]) -> None:
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join(timeout=10)


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
    """Run ``setup`` on ``setup.world_size`` ranks spawned here; results in rank order.

    Args:
        setup: a :class:`harness.load.setup.RunSetup`.
        backend: "auto", "gloo" or "nccl".
        timeout_s: the whole run's deadline, from the first process start.
        trace_dir: an existing folder; each rank writes its profiler trace there
            (``rank<r>.json``, see ``harness.run.rank_step.run_step``).
        on_progress: called in this process with every rank's phase (rank -> a name of
            ``_PHASE_CODES``) when any rank's phase changes (polled about 5 times a second).
        step: the rank body as "module:function" with ``run_step``'s arguments (default:
            ``harness.run.rank_step:run_step``), e.g. ``harness.run.checkpoint:reload_step``.
        step_kwargs: keyword arguments added to the rank body's call (they must pickle).

    Returns:
        Per rank, ``harness.run.rank_step.run_step``'s result.

    Raises:
        RunError: a rank raised or died (message names the rank, carries its traceback).
        RunTimeout: the deadline passed first.
    """
    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"backend {backend!r}: run_local takes auto, gloo or nccl")
    world_size = setup.world_size
    if backend == "nccl":
        resolve_backend(backend, world_size)  # too few GPUs: fail here, before any process starts
    ctx = forkserver_context()
    tmpdir = tempfile.mkdtemp(prefix="run-", dir=session_dir())
    init_file = os.path.join(tmpdir, "rendezvous")
    phase_trail = PhaseTrail(ctx, world_size)
    from harness.run.hang import ProgressBoard

    board = ProgressBoard(ctx, world_size)  # each rank's last collective, read on a hang
    # NCCL ranks keep PyTorch's flight recorder; its dumps outlive the run (removed if none).
    fr_dir = tempfile.mkdtemp(prefix="fsdp2-flight-recorder-") if backend in ("auto", "nccl") else None
    procs: list[Any] = []
    readers: dict[Any, int] = {}
    lifelines: list[Any] = []
    start = time.monotonic()
    deadline = start + timeout_s
    results: dict[int, dict[str, Any]] = {}
    # Tests only (``harness.run.faults``): the phase hooks registered here, carried to the ranks.
    from harness.run.recorders.phases import PHASE_HOOKS

    phase_hooks = tuple(PHASE_HOOKS)
    rank_kwargs = dict(step_kwargs or {}, **({"trace_dir": trace_dir} if trace_dir is not None else {}))
    try:
        for rank in range(world_size):
            reader, writer = ctx.Pipe(duplex=False)
            life_r, life_w = ctx.Pipe(duplex=False)
            p = ctx.Process(
                target=_rank_main,
                name=f"fsdp2-rank-{rank}",
                args=(rank, world_size, setup, backend, init_file, timeout_s, writer, life_r, phase_trail, phase_hooks,
                      board, fr_dir, step, rank_kwargs),
                daemon=True,
            )
            with _ranks_skip_main():
                p.start()
            writer.close()
            life_r.close()
            procs.append(p)
            readers[reader] = rank
            lifelines.append(life_w)
        pending_readers = dict(readers)
        reported = [0] * world_size
        while pending_readers:
            if on_progress is not None and phase_trail.counts() != reported:
                _report_trail(phase_trail, reported, on_progress)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pending = sorted(pending_readers.values())
                phases = {r: phase_trail.current(r) for r in pending}
                where = ", ".join(f"rank {r} in {phases[r]}" for r in pending)
                finished = sorted(results)
                starting = {"starting", "init_process_group"}
                if all(p in starting for p in phases.values()):
                    cause = ("No rank got past start-up: the timeout is likely too short for starting "
                             f"{world_size} ranks on this machine; raise it (--timeout / --run-timeout).")
                else:
                    cause = "A hang: mismatched or missing collectives, or a stuck rank."
                verdict, progress, lines = _hang_diagnosis(board, phases)
                dumps = _dump_flight_recorder(fr_dir, world_size) if fr_dir else []
                details = "\n".join([f"Diagnosis: {verdict}.", *lines]
                                    + ([f"NCCL flight recorder dumps (read with torchfrtrace {fr_dir}): {', '.join(dumps)}"]
                                       if dumps else []))
                raise RunTimeout(
                    f"run timed out after {timeout_s:g} s: {len(pending)} of {world_size} ranks had not "
                    f"finished ({where}); finished: {finished or 'none'}. {cause} All ranks were killed.\n{details}",
                    pending=pending,
                    phases=phases,
                    verdict=verdict,
                    progress=progress,
                    flight_recorder=dumps,
                )
            # A rank's pipe becomes ready with its message, or at EOF when the rank dies
            # (the rank holds the only write end), so the pipes alone cover every ending.
            ready = wait(list(pending_readers), timeout=min(remaining, 1.0 if on_progress is None else 0.2))
            failures = [f for f in (_receive(r, pending_readers, procs, results) for r in ready) if f]
            if failures:
                # Peers of a failing rank fail too, a moment later (a closed connection): give
                # them a moment, then blame a rank that died, else the rank that failed first.
                grace = time.monotonic() + 0.5
                while pending_readers and time.monotonic() < grace:
                    more = wait(list(pending_readers), timeout=max(0.0, grace - time.monotonic()))
                    failures += [f for f in (_receive(r, pending_readers, procs, results) for r in more) if f]
                failures.sort(key=lambda f: f[:2])
                first = failures[0][2]
                others = sorted(f[2].rank for f in failures[1:])
                if others:
                    first.args = (f"{first.args[0]}\n(ranks {others} failed after it)",)
                raise first
        if on_progress is not None and phase_trail.counts() != reported:
            _report_trail(phase_trail, reported, on_progress)
        return [results[r] for r in range(world_size)]
    finally:
        _kill_all(procs)
        for conn in list(readers) + lifelines:
            conn.close()
        shutil.rmtree(tmpdir, ignore_errors=True)
        if fr_dir is not None:
            kept = [n for n in os.listdir(fr_dir) if n.startswith(FLIGHT_RECORDER_PREFIX)]
            if kept:  # the dumps stay for torchfrtrace; the pipes go
                for name in set(os.listdir(fr_dir)) - set(kept):
                    with contextlib.suppress(OSError):
                        os.unlink(os.path.join(fr_dir, name))
            else:
                shutil.rmtree(fr_dir, ignore_errors=True)
