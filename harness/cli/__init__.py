"""The command line, ``python -m harness``: :func:`main`; the parser and dispatch in dispatch.py,
signal handling in signals.py, the console in console.py."""

from __future__ import annotations

from harness.cli.signals import signals_held

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` (default ``sys.argv[1:]``) names; its exit status (docs/command-line.md).
    SystemExit (2) for a bad option; KeyboardInterrupt for a Ctrl-C during the imports."""
    with signals_held():  # the imports: rich, the commands (a Ctrl-C meanwhile is raised after them)
        from harness.cli.dispatch import main as dispatch
    return dispatch(argv)
