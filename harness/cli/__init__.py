"""The command line, ``python -m harness``: :func:`main`; the parser and the dispatch to one
module per command (run, render, validate, draft) in dispatch.py, the signal plumbing in
signals.py, the console in console.py."""

from __future__ import annotations

from harness.cli.signals import signals_held

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``) and run the command; its exit status (the table of
    docs/command-line.md: 0, 1, 2, 130 interrupted, 143 terminated). Raises SystemExit (2) for a bad option, as
    argparse does; KeyboardInterrupt for a Ctrl-C while the command line is being imported."""
    with signals_held():  # the imports: rich, the commands (a Ctrl-C meanwhile is raised after them)
        from harness.cli.dispatch import main as dispatch
    return dispatch(argv)
