"""``render SPEC``: the document's tables, regenerated from a run (or a run's --json), as Markdown
on stdout or in --out DIR/<spec>.md. Exit 0 written, 2 when the spec, the run, the --json file
or an output path is unusable."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.text import Text

from harness.cli.console import print_mark, print_spec_error, stderr_console
from harness.cli.output_flags import refuse_unusable_outputs
from harness.cli.signals import signals_held
from harness.cli.spec_run import (
    force_backend_problem,
    gate_reason,
    note_kept_backend,
    progress,
    run_spec,
    timeout_problem,
)
from harness.cli.views import add_view_flags, plot_available, write_views
from harness.contract.names import BACKENDS
from harness.report.output import write_atomically

__all__ = ["add_arguments", "argument_problem", "command"]


def add_arguments(sub: argparse._SubParsersAction) -> None:
    render = sub.add_parser("render", help="write the document's tables, regenerated from a run, as Markdown")
    render.add_argument("spec", type=Path)
    render.add_argument("--out", metavar="DIR", help="write DIR/<spec>.md (default: Markdown on stdout)")
    render.add_argument(
        "--from-json", metavar="OBS.json", help="read the observation from a 'run --json' file instead of running"
    )
    render.add_argument(
        "--backend",
        choices=BACKENDS,
        default=None,
        help="the backend, if the spec's is auto; a spec pinned to another keeps it unless --force-backend",
    )
    render.add_argument(
        "--force-backend",
        action="store_true",
        help="apply --backend also to specs pinned to a backend (by default a spec whose backend is "
        "not auto keeps it: the pin is part of what it checks)",
    )
    render.add_argument("--timeout", type=float, default=None, help="seconds before a run is declared hung")
    add_view_flags(render)
    render.set_defaults(all_instruments=True)  # its policy and memory sections, whatever the entries read


def argument_problem(args: argparse.Namespace) -> str | None:
    """What argparse cannot check (exclusive flags, the timeout's range), as its error text; else None."""
    if args.from_json and args.trace:
        return "--trace needs a run: drop --from-json (a --json file holds no profiler traces)"
    return force_backend_problem(args) or timeout_problem(args)


def command(args: argparse.Namespace, console: Console) -> int:
    with signals_held():  # the imports (a Ctrl-C meanwhile is raised after them; see run.py)
        from harness.load.spec import SpecError, load_spec
        from harness.report.render import render_markdown
        from harness.run.runner import RunError

    # Markdown on stdout: everything else goes to stderr.
    say = console if args.out else stderr_console()
    if refuse_unusable_outputs(say, args, (), ("out", "trace", "plot")):
        return 2
    if args.plot and not plot_available(say):
        return 2
    try:
        spec = load_spec(args.spec)
    except SpecError as exc:
        print_spec_error(say, exc)
        return 2
    if args.from_json:
        from harness.report.observation_file import ObservationFileError, read_observation

        try:
            observation = read_observation(args.from_json, args.spec, spec.setup.to_dict())
        except ObservationFileError as exc:
            print_mark(say, False, str(exc))
            return 2
    else:
        note_kept_backend(say, spec, args)
        reason = gate_reason(spec, args)
        if reason is not None:  # nothing to render from: skipped whole, as under run (exit 0)
            say.print(Text(f"{spec.name}: skipped: {reason}"))
            return 0
        with progress(say, spec, args) as shown:
            try:
                observation = run_spec(spec, args, shown.ranks)
            except RunError as exc:
                print_mark(say, False, f"{args.spec}: the run failed: {exc}")
                return 2
        if observation is None:  # a non-zero rank under torchrun: rank 0 renders
            return 0
    text = render_markdown(spec, observation)
    if args.out:
        out = Path(args.out) / f"{spec.name}.md"
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(out, text)
        except OSError as exc:
            print_mark(say, False, f"--out {args.out}: cannot write {out} ({exc.strerror or exc})")
            return 2
        say.print(Text(f"wrote {out}"))
    else:
        sys.stdout.write(text)
    return 0 if write_views(args, spec, observation, say) else 2
