"""Ctrl-C and SIGTERM on the command line: both raised as KeyboardInterrupt where the command
is, so the launcher's clean-up stops the ranks and the results already computed are kept.

Exit status 130 for Ctrl-C (one line ``interrupted`` on stderr), 143 for SIGTERM (``terminated``).
Signal handlers can be set in the main thread only; elsewhere (a test calling ``main`` from a
thread) the process's own handling stays. Imports only small standard modules (signal,
threading, contextlib; not typing) and ``harness.run.launch.held_signals`` (the same), so that
``python -m harness`` reaches its handling soon.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from harness.run.launch.held_signals import signals_held  # the CLI holds its imports with it

__all__ = [
    "Terminated",
    "signals_held",
    "interrupts_raised",
    "status_of_interrupt",
    "files_written_whole",
    "as_program",
]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the CLI is so that clean-up runs as for Ctrl-C."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def interrupts_raised() -> Iterator[None]:
    """Within: SIGTERM raises :class:`Terminated`, and an interrupt that Python would "ignore"
    (raised in a weakref callback or ``__del__``: a printed traceback, and the run goes on) is
    delivered again, to be raised where it can. Both restored on the way out."""
    main_thread = _in_main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    previous_hook = sys.unraisablehook

    def unraisable(hook_args: object) -> None:
        if isinstance(hook_args.exc_value, KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM if isinstance(hook_args.exc_value, Terminated) else signal.SIGINT)
            return
        previous_hook(hook_args)

    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
        sys.unraisablehook = previous_hook


def status_of_interrupt(exc: KeyboardInterrupt) -> int:
    """Print ``terminated`` or ``interrupted`` on stderr; the exit status (143 or 130)."""
    terminated = isinstance(exc, Terminated)
    print("terminated" if terminated else "interrupted", file=sys.stderr)
    return 143 if terminated else 130


@contextmanager
def files_written_whole(writing: bool) -> Iterator[None]:
    """Within, when ``writing``: Ctrl-C is ignored, so a second one does not cut a file being
    written; with nothing to write, Ctrl-C stays live."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if writing and _in_main_thread() else None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def as_program(main: Callable[[], int]) -> int:
    """``main()``'s exit status, for ``python -m harness``.

    Once the work is done and reported, a Ctrl-C must not kill the interpreter while it tears
    torch down (up to a second or more after the report; it died of SIGINT, silently, and its
    status was lost): SIGINT is ignored from then on (an ignored SIGINT stays ignored through
    finalization; SIGTERM still ends it). A Ctrl-C before ``main``'s own handling is in place
    or just after it gives 130.
    """
    try:
        status = main()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        sys.stderr.write("interrupted\n")
        status = 130
    return status
