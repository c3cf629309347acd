"""Ctrl-C and SIGTERM held back until a point where raising is safe.

Used around the command line's imports (an interrupt leaves modules half-imported) and a simulated
run (a KeyboardInterrupt raised in a callback from torch's C++ ends in ``terminate called``). A
second signal while one is held ends the process at once (``teardown.exit_now``, status 128 plus
the first signal's number). Only small standard imports."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from harness.run.launch import teardown

__all__ = ["signals_held"]


@contextmanager
def signals_held() -> Iterator[Callable[[], None]]:
    """Within: a Ctrl-C or SIGTERM Python handles is noted, not raised. Yields ``deliver()``, which hands
    a noted signal to the process's handler and ends the hold; on the way out the first noted is
    delivered. Default or ignored signals and other threads are not touched."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    pending: list[int] = []
    previous: dict[int, object] = {}

    def note(signum: int, frame: object) -> None:
        if pending:
            teardown.exit_now(128 + pending[0])
        pending.append(signum)
        teardown.signal_arrived(signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        if callable(signal.getsignal(signum)):
            previous[signum] = signal.signal(signum, note)

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        previous.clear()

    def deliver() -> None:
        if pending:
            signum = pending[0]
            pending.clear()
            restore()
            signal.raise_signal(signum)  # the handler runs now, inside this call

    try:
        yield deliver
    finally:
        restore()
        if pending:
            signal.raise_signal(pending[0])
