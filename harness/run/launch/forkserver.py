"""The forkserver the local ranks are forked from: its preload list, start-up and end.

A rank starts by ``fork()`` of a forkserver interpreter that has already imported torch,
FSDP and the rank body (:data:`PRELOAD`); a spawn would import torch in every rank: seconds
each on a 2-core machine. The server is started once per process, reused by later runs, and
stopped and reaped at exit, so it does not outlive the process that started it.

Plain ``multiprocessing``, not ``torch.multiprocessing``: importing the latter imports torch
in the launching process (a second or more the CLI does not otherwise pay), and its
``spawn`` starts each rank by importing torch afresh; nothing passed to a rank is a tensor,
so torch's sharing reductions are not needed. Three private ``multiprocessing`` names are
used, each where no public one exists (see each function): the server's pid and ``_stop``
(no public way to end a forkserver), the resource tracker's pipe and pid
(``teardown.wait_resource_tracker``), and the preparation
data a child re-imports ``__main__`` from.
"""

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
    """While starting ranks: do not make them re-run the caller's ``__main__``.

    A spawn/forkserver child normally re-imports the parent's main module (as
    ``__mp_main__``) so that a target defined there can be found. The rank target lives in
    ``harness.run.launch.rank_process``, so that re-import only costs start-up time (a pytest
    or CLI entry script, per rank) and forces an ``if __name__ == "__main__":`` guard on every
    script that calls ``run_setup``. Dropping the two ``init_main_from_*`` keys of the
    preparation data skips it; ``multiprocessing`` has no public switch for it.
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


def _stop_forkserver() -> None:
    """At exit: end the forkserver now and reap it (left alone, it shuts down on its own a
    second or two after this process, with torch loaded, re-parented to init); the same for
    multiprocessing's resource tracker. Private names: ``multiprocessing`` offers no public
    way to stop either."""
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
    """Start the forkserver with SIGINT blocked, as multiprocessing starts its resource tracker.

    The server is a fresh Python that imports torch (a second or so) before it ignores SIGINT
    itself; a Ctrl-C to the terminal's group in that time printed its KeyboardInterrupt
    traceback below the CLI's 'interrupted'. The blocked mask is inherited across exec, and the
    server's own ``SIG_IGN`` then discards a SIGINT left pending (its ranks, which inherit the
    mask, ignore SIGINT too). Here a Ctrl-C of those milliseconds waits for the block to be
    lifted (the mask is the calling thread's, and so is what the server inherits). The resource
    tracker is started first: its own start unblocks SIGINT on the way out. ``ensure_running``
    is multiprocessing's own start of each.
    """
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a Ctrl-C of the meantime is raised here


def forkserver_context() -> Any:
    """The forkserver context with :data:`PRELOAD` set, its server started.

    On first call also removes what killed harness processes left
    (``harness.run.launch.session.sweep_stale``), notes multiprocessing's temporary folder in
    this process's session folder, starts the server (:func:`_start_with_ctrl_c_blocked`) and
    arranges for it to be stopped at exit.
    """
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
