"""Command line: ``python -m harness run|validate|draft|render|compare``.

  run SPEC...       run each spec's setup on real ranks (or simulated ones) and check every entry;
                    exit 0 only when every entry holds; --report PATH writes a Markdown cluster report.
  validate SPEC...  load and check specs without running anything.
  draft             write a spec for a config and world size from the closed-form calculator.
  render SPEC       write the document's tables, regenerated from a run (or a run's --json), as Markdown.
  compare A B       list every observed value that differs between two run --json files.

Exit status: 0 every entry holds (run), every spec is valid (validate), written (draft), the same
(compare); 1 an entry fails, a spec is invalid, a bad draft input, they differ; 2 a spec or file
cannot be checked or read, or a bad option; run --repeat: 3 an entry is unstable and none fails;
130 interrupted (Ctrl-C), 143 terminated (SIGTERM): ranks stopped, finished results kept."""

from __future__ import annotations

import argparse

from harness.cli import compare, draft, render, run, validate
from harness.cli.console import stdout_console
from harness.cli.signals import interrupts_raised, status_of_interrupt

__all__ = ["main"]

COMMANDS = {"run": run, "render": render, "validate": validate, "draft": draft, "compare": compare}
"""Each command's module: ``add_arguments(subparsers)``, ``argument_problem(args)`` and
``command(args, console) -> exit status``, in the order ``--help`` lists them."""


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` (default ``sys.argv[1:]``) names; its exit status. SystemExit (2) for a bad
    option. Callers use :func:`harness.cli.main`, which imports this with signals held."""
    parser = argparse.ArgumentParser(
        prog="python -m harness", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS.values():
        module.add_arguments(sub)
    args = parser.parse_args(argv)
    module = COMMANDS[args.command]
    problem = module.argument_problem(args)
    if problem:
        parser.error(problem)
    console = stdout_console()
    with interrupts_raised():
        try:
            return module.command(args, console)
        except KeyboardInterrupt as exc:  # the ranks are stopped by the launcher's clean-up on the way here
            return status_of_interrupt(exc)
