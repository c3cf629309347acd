"""``compare A.json B.json``: did FSDP2 behave differently between two ``run --json`` files?

Every behaviour difference (``harness.report.compare``), grouped by spec, check kind and selector;
environment, timings and values declared to vary are counted apart (``--all`` lists them).
``--include`` / ``--exclude`` filter by declared path (globs); ``--json OUT`` writes the comparison.
Exit 0 the same, 1 a behaviour difference (``--all``: any), 2 a file unreadable or unwritable."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.text import Text

from harness.cli.console import print_mark
from harness.cli.signals import signals_held

__all__ = ["add_arguments", "argument_problem", "command"]


def add_arguments(sub: argparse._SubParsersAction) -> None:
    compare = sub.add_parser(
        "compare", help="did FSDP2 behave differently? every behaviour difference between two 'run --json' files"
    )
    compare.add_argument("a", type=Path, metavar="A.json")
    compare.add_argument("b", type=Path, metavar="B.json")
    compare.add_argument(
        "--all",
        dest="every",
        action="store_true",
        help="list also what is set apart (environment, timings, tracebacks, values that vary run to run) "
        "and count it in the exit status",
    )
    compare.add_argument(
        "--include", action="append", default=[], metavar="GLOB", help="only fields whose path matches (repeatable)"
    )
    compare.add_argument(
        "--exclude", action="append", default=[], metavar="GLOB", help="leave out fields whose path matches"
    )
    compare.add_argument("--json", metavar="OUT", help="write the comparison as JSON")


def argument_problem(args: argparse.Namespace) -> str | None:
    return None


def command(args: argparse.Namespace, console: Console) -> int:
    with signals_held():
        from harness.contract import strict_json
        from harness.report.compare import CompareError, compare_runs, read_run_file, select
        from harness.report.compare_text import format_report, report_json, spec_name, summary_line
        from harness.report.output import write_atomically

    try:
        a, b = read_run_file(args.a), read_run_file(args.b)
    except CompareError as exc:
        print_mark(console, False, str(exc))
        return 2
    differences = select(compare_runs(a, b), args.include, args.exclude)
    specs = len({spec_name(k) for run in (a, b) for k in [*run.documents, *run.failed, *run.skipped]})
    console.print(Text(f"A = {args.a} (torch {a.torch_version})\nB = {args.b} (torch {b.torch_version})"))
    for line in format_report(differences, every=args.every):
        console.print(Text(line))
    console.print(Text(summary_line(differences, specs, every=args.every)))
    if args.json:
        sides = {
            "a": {"file": str(args.a), "torch": a.torch_version},
            "b": {"file": str(args.b), "torch": b.torch_version},
        }
        try:
            write_atomically(args.json, strict_json.dumps(report_json(differences, specs, sides), indent=1))
        except OSError as exc:
            print_mark(console, False, f"--json {args.json}: cannot write ({exc.strerror or exc})")
            return 2
        console.print(Text(f"wrote {args.json}"))
    counted = differences if args.every else [d for d in differences if d.apart is None]
    return 1 if counted else 0
