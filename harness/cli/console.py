"""The command line's console: rich on stdout (or stderr), and its marked one-line messages."""

from __future__ import annotations

import os

from rich.console import Console
from rich.text import Text

__all__ = ["stdout_console", "stderr_console", "print_mark", "print_spec_error"]


def stdout_console() -> Console:
    """rich's Console for stdout, colour only on a terminal. Piped output is not cut to 80
    columns: tables get 160, and an error stays on one line (soft wrap)."""
    console = Console(highlight=False, soft_wrap=True)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(highlight=False, soft_wrap=True, width=160)
    return console


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
