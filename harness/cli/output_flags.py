"""Output flags checked before any work: never compute results that cannot be written."""

from __future__ import annotations

import argparse

from rich.console import Console

from harness.cli.console import print_mark
from harness.report.output import file_problem, folder_problem

__all__ = ["refuse_unusable_outputs"]


def refuse_unusable_outputs(
    console: Console, args: argparse.Namespace, files: tuple[str, ...] = (), folders: tuple[str, ...] = ()
) -> bool:
    """Check ``args``' flags ``files`` (file paths) and ``folders`` (made if missing); True, after one
    line ``--json PATH: why``, for the first unusable one."""
    for name in files + folders:
        target = getattr(args, name, None)
        if not target:
            continue
        problem = file_problem(target) if name in files else folder_problem(target)
        if problem:
            print_mark(console, False, f"--{name.replace('_', '-')} {target}: {problem}")
            return True
    return False
