"""The harness's rank forkserver started before a timed run, so that a hang test's timeout covers
its ranks' work and not the server's start."""

from __future__ import annotations

import os


def warm_forkserver() -> None:
    """Start the rank forkserver (``harness.run.launch.forkserver``) if it is not yet running and
    fork one process from it that does nothing; that fork waits until the server has imported its
    preload (torch, FSDP: seconds on a loaded 2-core machine), so a run started next forks its
    ranks at once. Raises AssertionError if that process does not end within 300 s."""
    from harness.run.launch.forkserver import forkserver_context, ranks_skip_main

    process = forkserver_context().Process(target=os.getpid, name="fsdp2-warm-up")
    with ranks_skip_main():  # started as the ranks are: no re-import of the caller's __main__
        process.start()
    process.join(timeout=300)
    assert process.exitcode == 0, f"the forkserver's no-op process ended with {process.exitcode}"
