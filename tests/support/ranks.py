"""A hang test's timed run: the rank forkserver started before it, so that its timeout covers the
ranks' work and not the server's start, and a timeout in proportion to this machine."""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable


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


def hang_timeout_s(setup: Any, run: Callable[..., Any], *, factor: float = 5.0, floor_s: float = 4.0) -> float:
    """The timeout, in whole seconds, for a hang test's run of ``setup`` with ``run``
    (``run_local`` or ``run_setup``, on gloo): ``factor`` times the same run without a fault,
    timed here with the forkserver warm (:func:`warm_forkserver`), and at least ``floor_s``.

    A fixed 10 s waited 8 to 9 s past the hang on an idle 2-core machine, where such a run takes
    about a second; the factor covers another xdist worker starting its ranks meanwhile. The
    fault-free run raises what ``run`` raises.
    """
    warm_forkserver()
    start = time.monotonic()
    run(setup, backend="gloo", timeout_s=300)
    return float(max(floor_s, math.ceil(factor * (time.monotonic() - start))))
