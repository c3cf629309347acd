"""``validate SPEC...``: load and check specs without running anything or importing torch. Exit 0
when every spec is valid, 1 when one is not (every error printed, in argument order)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from harness.cli.console import print_mark
from harness.cli.signals import signals_held
from harness.load.spec_files import expand

__all__ = ["add_arguments", "argument_problem", "command", "validated"]


def add_arguments(sub: argparse._SubParsersAction) -> None:
    validate = sub.add_parser("validate", help="check specs without running")
    validate.add_argument(
        "specs", nargs="+", type=Path, help="spec files, or folders: every .yaml/.yml file below one is a spec"
    )


def argument_problem(args: argparse.Namespace) -> str | None:
    """Nothing beyond what argparse checks."""
    return None


def validated(path: Path) -> tuple[bool, str]:
    """(valid, what to print for it: its entries and world size, or its SpecError's lines)."""
    from harness.load.spec import SpecError, load_spec

    try:
        spec = load_spec(path)
    except SpecError as exc:
        return False, str(exc)
    return True, f"{path}: {len(spec.items)} entries, world size {spec.setup.world_size}"


def command(args: argparse.Namespace, console: Console) -> int:
    with signals_held():  # the loader's imports (a Ctrl-C meanwhile is raised after them; see run.py)
        import harness.load.spec  # noqa: F401
    status = 0
    for path in expand(args.specs):
        ok, text = validated(path)
        for line in text.splitlines():
            print_mark(console, ok, line)
        status = status or int(not ok)
    return status
