"""Ctrl-C and SIGTERM held back until a point where raising is safe.

Two places need it: the command line's imports (an interrupt inside one leaves modules
half-imported), and a simulated run, whose Python runs under torch's C++ (a KeyboardInterrupt
raised in a callback C++ called ends in ``terminate called after throwing an instance of
'python_error'`` or an unrelated AssertionError).
A second signal while one is held ends the process at once (``teardown.exit_now``, status 128
plus the first signal's number): the user insists. Imports only small standard modules and
``harness.run.launch.teardown`` (the same), so that ``python -m harness`` can use it at once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from harness.run.launch import teardown

__all__ = ["signals_held"]


@contextmanager
def signals_held() -> Iterator[Callable[[], None]]:
    """Within: a Ctrl-C or SIGTERM that Python handles is noted, not raised. Yields ``deliver()``,
    which hands a noted signal to the process's own handler there (it raises KeyboardInterrupt,
    or the CLI's ``Terminated``) and ends the hold; on the way out the first one noted, if any, is
    delivered the same way. Signals left at their default or ignored, and any thread other than
    the main one, are not touched. A second signal within ends the process at once
    (:func:`harness.run.launch.teardown.exit_now`)."""
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
