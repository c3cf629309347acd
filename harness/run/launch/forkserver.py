"""The forkserver the local ranks are forked from: its preload list, start-up and end.

A rank is a ``fork()`` of a server that has imported torch, FSDP and the rank body
(:data:`PRELOAD`); a spawn would import torch in every rank, seconds each. The server is started
once per process and stopped at exit. Plain ``multiprocessing``: ``torch.multiprocessing`` would
import torch in the launcher, and nothing passed to a rank is a tensor. Three private
``multiprocessing`` names are used where no public one exists (see each function)."""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import signal
import threading
from typing import Any, Iterator

from harness.run.launch import teardown
from harness.run.launch.session import note_owned, sweep_stale

__all__ = ["PRELOAD", "forkserver_context", "ranks_skip_main"]

# Imported once by the forkserver, inherited by every rank. torch._dynamo: FSDP's hooks are
# wrapped in torch._dynamo.disable, which imports torch._dynamo on first call (~1 s).
# Not harness.run.rank.checkpoint (torch.distributed.checkpoint, ~0.4 s here): only runs with
# setup.state_dict import it, in their ranks.
PRELOAD = [
    "torch",
    "torch.distributed.fsdp",
    "torch._dynamo",
    "harness.run.rank.step",
    "harness.run.launch.rank_process",
]

_CONTEXT: Any = None
_START_LOCK = threading.Lock()


@contextlib.contextmanager
def ranks_skip_main() -> Iterator[None]:
    """While starting ranks: do not make them re-import the caller's ``__main__`` (start-up time, and an
    ``if __name__ == "__main__":`` guard in every script); the rank target is in
    ``harness.run.launch.rank_process``. Drops the preparation data's ``init_main_from_*`` keys
    (private: no public switch)."""
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


def _stop_forkserver() -> None:
    """At exit: end and reap the forkserver and multiprocessing's resource tracker, which would otherwise
    outlive this process a second or two with torch loaded. Private names: no public way to stop either."""
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
    # multiprocessing's resource tracker, started with the forkserver, also outlives us otherwise;
    # waited for a bounded time: it waits for every holder of its pipe (no torch there: quick)
    teardown.wait_resource_tracker()


def _start_with_ctrl_c_blocked() -> None:
    """Start the resource tracker, then the forkserver, with SIGINT blocked, as multiprocessing starts
    its tracker: a Ctrl-C while the server imports torch would print its traceback (docs/command-line.md,
    "Signals and the rank processes")."""
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a Ctrl-C of the meantime is raised here


def forkserver_context() -> Any:
    """The forkserver context with :data:`PRELOAD` set, its server started; the first call also sweeps
    what killed processes left (``harness.run.launch.session.sweep_stale``) and arranges the stop at exit."""
    global _CONTEXT
    if _CONTEXT is None:
        sweep_stale()
        from multiprocessing import util

        note_owned(util.get_temp_dir())  # made now if not yet; the forkserver's socket goes there
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        atexit.register(_stop_forkserver)  # runs before multiprocessing's own exit handler
        _start_with_ctrl_c_blocked()
        _CONTEXT = ctx
    return _CONTEXT
