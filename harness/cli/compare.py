"""``compare A.json B.json``: every observed value that differs between two ``run --json`` files
(``harness.report.compare``), grouped by spec, check kind and selector, timings ignored.

Exit 0 when they are the same, 1 when they differ, 2 when a file cannot be read.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.text import Text

from harness.cli.console import print_mark
from harness.cli.signals import signals_held

__all__ = ["add_arguments", "argument_problem", "command"]


def add_arguments(sub: argparse._SubParsersAction) -> None:
    compare = sub.add_parser("compare", help="list every observed value that differs between two 'run --json' files")
    compare.add_argument("a", type=Path, metavar="A.json")
    compare.add_argument("b", type=Path, metavar="B.json")


def argument_problem(args: argparse.Namespace) -> str | None:
    return None


def command(args: argparse.Namespace, console: Console) -> int:
    with signals_held():
        from harness.report.compare import (
            CompareError,
            compare_documents,
            format_differences,
            read_documents,
            summary_line,
        )

    try:
        a, b = read_documents(args.a), read_documents(args.b)
    except CompareError as exc:
        print_mark(console, False, str(exc))
        return 2
    differences = compare_documents(a, b)
    if differences:
        console.print(Text(f"A = {args.a}\nB = {args.b}"))
    for line in format_differences(differences):
        console.print(Text(line))
    console.print(Text(summary_line(differences, len({Path(k).name for k in [*a, *b]}))))
    return 1 if differences else 0
