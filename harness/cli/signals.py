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
    or just after it gives 130, as does one that CPython noted in passing
    (:func:`_forget_caught_interrupts`).
    """
    try:
        status = main()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        sys.stderr.write("interrupted\n")
        status = 130
    _forget_caught_interrupts()
    return status


def _forget_caught_interrupts() -> None:
    """Keep a handled Ctrl-C from ending the process by SIGINT at exit.

    CPython up to 3.13 marks an interrupt "unhandled" whenever one leaves code run by ``exec``
    or ``eval`` of a string, caught or not (``run_eval_code_obj`` in Python/pythonrun.c; 3.14
    marks it only at the top level). ``dataclass`` and ``namedtuple`` build their methods that
    way, so a Ctrl-C landing in one made during the run (a lazy import) left the mark, and after
    its ``interrupted`` line and status 130 the interpreter killed itself with SIGINT (status
    -2; seen about 1 run in 12 of the forkserver Ctrl-C test). Each such ``exec`` first clears
    the mark, so an empty one clears what a caught interrupt left; where 3.14 no longer sets it,
    this does nothing.
    """
    exec("")  # noqa: S102 - an empty string: nothing runs
