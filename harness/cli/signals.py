"""Ctrl-C and SIGTERM on the command line: both raised as KeyboardInterrupt where the command
is, so the launcher's clean-up stops the ranks and the results already computed are kept.

Exit status 130 for Ctrl-C (one line ``interrupted`` on stderr), 143 for SIGTERM (``terminated``).
Under ``python -m harness`` (:func:`install`, first thing) the first signal also arms a watchdog:
the process ends within :data:`EXIT_BOUND_S` of it whatever the clean-up is waiting for, and a
second Ctrl-C or SIGTERM ends it at once (``harness.run.launch.teardown.exit_now``: ranks killed,
temporary folders removed, the first signal's status).
Signal handlers can be set in the main thread only; elsewhere (a test calling ``main`` from a
thread) the process's own handling stays. Imports only small standard modules (signal,
os, threading, time, contextlib; not typing) and ``harness.run.launch.held_signals`` and
``teardown`` (the same), so that ``python -m harness`` reaches its handling soon.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from harness.run.launch import teardown
from harness.run.launch.held_signals import signals_held  # the CLI holds its imports with it

__all__ = [
    "EXIT_BOUND_S",
    "Terminated",
    "install",
    "signals_held",
    "interrupts_raised",
    "status_of_interrupt",
    "files_written_whole",
    "as_program",
]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the CLI is so that clean-up runs as for Ctrl-C."""


EXIT_BOUND_S = 10.0
"""Seconds from a Ctrl-C or SIGTERM to the exit of ``python -m harness``, at most."""

_FIRST: list[int] = []  # the first signal's number, once one arrived (under install())
_LINE_SHOWN: list[bool] = []  # "interrupted"/"terminated" printed


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


def _status(signum: int) -> int:
    return 128 + signum  # 130 for SIGINT, 143 for SIGTERM


def _show_line(signum: int) -> None:
    """The one line on stderr, once."""
    if not _LINE_SHOWN:
        _LINE_SHOWN.append(True)
        line = "terminated\n" if signum == signal.SIGTERM else "interrupted\n"
        try:
            sys.stderr.write(line)
            sys.stderr.flush()
        except RuntimeError:  # a handler that interrupted a write to stderr: "reentrant call"
            os.write(2, line.encode())


def _announce(status: int) -> None:
    _show_line(signal.SIGTERM if status == _status(signal.SIGTERM) else signal.SIGINT)


def install() -> None:
    """At program entry: Ctrl-C and SIGTERM raise (KeyboardInterrupt, :class:`Terminated`), and
    the first also arms the exit bound (:data:`EXIT_BOUND_S`) and makes a second end the process
    at once. Main thread only (as every ``signal.signal``)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _on_first_signal)
    teardown.announce_exit(_announce)  # a second signal while one is held ends it there too
    teardown.on_signal_arrival(_arm_watchdog)  # a held signal: the bound runs from its arrival


def _installed() -> bool:
    return signal.getsignal(signal.SIGTERM) in (_on_first_signal, _on_second_signal)


def _on_first_signal(signum: int, frame: object) -> None:
    _FIRST.append(signum)
    for each in (signal.SIGINT, signal.SIGTERM):
        signal.signal(each, _on_second_signal)
    _arm_watchdog(signum)
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _on_second_signal(signum: int, frame: object) -> None:
    _exit_now(_FIRST[0] if _FIRST else signum)


def _exit_now(signum: int) -> None:
    teardown.exit_now(_status(signum))


_ARMED: list[int] = []


def _arm_watchdog(signum: int) -> None:
    """A daemon thread that ends the process :data:`EXIT_BOUND_S` after the signal (once: the
    first call arms it). Started with both signals blocked, so that the kernel never hands one
    to it (a process's signal goes to a thread not blocking it; in this one the main thread
    would not see it)."""
    if _ARMED:
        return
    _ARMED.append(signum)

    def expire() -> None:
        time.sleep(EXIT_BOUND_S)
        _exit_now(signum)

    watchdog = threading.Thread(target=expire, name="fsdp2-exit-bound", daemon=True)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        watchdog.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def interrupts_raised() -> Iterator[None]:
    """Within: SIGTERM raises :class:`Terminated`, and an interrupt that Python would "ignore"
    (raised in a weakref callback or ``__del__``: a printed traceback, and the run goes on) is
    delivered again, to be raised where it can. Both restored on the way out. Handlers that
    :func:`install` set are kept."""
    main_thread = _in_main_thread() and not _installed()
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
    """Print ``terminated`` or ``interrupted`` on stderr (once: the exit bound's watchdog may have);
    the exit status (143 or 130)."""
    signum = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
    _show_line(signum)
    return _status(signum)


@contextmanager
def files_written_whole(writing: bool) -> Iterator[None]:
    """Within, when ``writing``: Ctrl-C is ignored and SIGTERM held (raised after), so that neither
    cuts a file being written; with nothing to write, both stay live, and so does a second signal
    after a first under :func:`install` (it ends the process at once: files are written through a
    temporary file and a rename, the file asked for is never half written)."""
    if not (writing and _in_main_thread() and not _FIRST):
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with signals_held():  # SIGINT is ignored now: only SIGTERM is held
            yield
    finally:
        signal.signal(signal.SIGINT, previous)


def as_program(main: Callable[[], int]) -> int:
    """``main()``'s exit status, for ``python -m harness``.

    Once the work is done and reported, a Ctrl-C must not kill the interpreter while it tears
    torch down (up to a second or more after the report; it died of SIGINT, silently, and its
    status was lost): SIGINT is ignored from then on (an ignored SIGINT stays ignored through
    finalization; SIGTERM still ends it). A Ctrl-C before ``main``'s own handling is in place
    or just after it gives 130, as does one that CPython noted in passing
    (:func:`_forget_caught_interrupts`). Call :func:`install` first.
    """
    try:
        status = main()
        _ignore_late_ctrl_c()
    except KeyboardInterrupt as exc:
        _ignore_late_ctrl_c()
        status = status_of_interrupt(exc)
    _forget_caught_interrupts()
    return status


def _ignore_late_ctrl_c() -> None:
    """SIGINT ignored from here to the exit, unless a first signal came: then a second one must
    still end the process at once (its handler exits; it never raises). A SIGTERM handled by
    :func:`install` now ends the process at once (143) instead of raising during the exit."""
    if not _FIRST:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if signal.getsignal(signal.SIGTERM) is _on_first_signal:
            signal.signal(signal.SIGTERM, _on_second_signal)


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
