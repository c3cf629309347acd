"""The command line's console: rich on stdout (or stderr), and its marked one-line messages."""

from __future__ import annotations

import os
import shutil
import sys

from rich.console import Console
from rich.text import Text

__all__ = ["stdout_console", "stderr_console", "print_mark", "print_spec_error"]


FALLBACK_WIDTH = 80
"""Columns when neither COLUMNS nor any terminal says (output to a file or CI log, no terminal)."""


def terminal_width() -> int:
    """Columns to lay output out in: ``COLUMNS``, else the terminal's width on stdout (or stderr or stdin
    when stdout is piped), else :data:`FALLBACK_WIDTH`."""
    columns = shutil.get_terminal_size((0, 0)).columns  # COLUMNS, else stdout's terminal; 0: neither
    if columns > 0:
        return columns
    for stream in (sys.__stderr__, sys.__stdin__):
        try:
            return os.get_terminal_size(stream.fileno()).columns or FALLBACK_WIDTH
        except (AttributeError, ValueError, OSError):  # no such stream, closed, or not a terminal
            continue
    return FALLBACK_WIDTH


def stdout_console() -> Console:
    """rich's Console for stdout: colour only on a terminal, :func:`terminal_width` columns, soft wrap."""
    return Console(highlight=False, soft_wrap=True, width=terminal_width())


def stderr_console() -> Console:
    """For messages of a command whose stdout is its product (draft's YAML, render's Markdown)."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_mark(console: Console, ok: bool, text: str) -> None:
    """A line starting with ✓ or ✗ (green or red on a terminal); ``text`` is printed as is (no rich markup)."""
    console.print(Text.assemble(("✓ " if ok else "✗ ", "green" if ok else "bold red"), text))


def print_spec_error(console: Console, exc: Exception) -> None:
    """One ✗ line per error of a spec (a SpecError lists every error, in file order)."""
    for line in str(exc).splitlines():
        print_mark(console, False, line)
