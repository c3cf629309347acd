"""Ctrl-C and SIGTERM on the command line: both raised as KeyboardInterrupt where the command
is, so the launcher's clean-up stops the ranks and the results already computed are kept.

Status 130 (``interrupted``) or 143 (``terminated``). Under ``python -m harness`` (:func:`install`)
the first signal arms a watchdog that ends the process within :data:`EXIT_BOUND_S`, and a second
ends it at once (``harness.run.launch.teardown.exit_now``). Handlers are set in the main thread
only. Only small standard imports, so that ``python -m harness`` reaches its handling soon."""

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
    """At program entry, main thread only: Ctrl-C and SIGTERM raise (KeyboardInterrupt,
    :class:`Terminated`), the first arms the exit bound, a second ends the process."""
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
    """Once: a daemon thread that ends the process :data:`EXIT_BOUND_S` after the signal, started with
    both signals blocked so that the kernel never hands it one."""
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
    """Within: SIGTERM raises :class:`Terminated`, and an interrupt Python would "ignore" (in a weakref
    callback or ``__del__``) is delivered again where it can raise. :func:`install`'s handlers are kept."""
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
    """Print ``terminated`` or ``interrupted`` on stderr (once); the status, 143 or 130."""
    signum = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
    _show_line(signum)
    return _status(signum)


@contextmanager
def files_written_whole(writing: bool) -> Iterator[None]:
    """Within, when ``writing``: Ctrl-C is ignored and SIGTERM held until after; otherwise both stay live,
    and a second signal under :func:`install` still ends the process (files go through a rename)."""
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
    """``main()``'s exit status, for ``python -m harness``; call :func:`install` first. SIGINT is ignored
    after the work (docs/command-line.md, "Ctrl-C as the command ends")."""
    try:
        status = main()
        _ignore_late_ctrl_c()
    except KeyboardInterrupt as exc:
        _ignore_late_ctrl_c()
        status = status_of_interrupt(exc)
    _forget_caught_interrupts()
    return status


def _ignore_late_ctrl_c() -> None:
    """SIGINT ignored to the exit, unless a first signal came (a second must still end the process);
    a SIGTERM now ends it at once (143)."""
    if not _FIRST:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if signal.getsignal(signal.SIGTERM) is _on_first_signal:
            signal.signal(signal.SIGTERM, _on_second_signal)


def _forget_caught_interrupts() -> None:
    """Clear the mark a caught Ctrl-C leaves in CPython up to 3.13 (docs/command-line.md)."""
    exec("")  # noqa: S102 - an empty string: nothing runs
