"""Seeing a run beyond pass/fail, for ``run`` and ``render``: --trace (the ranks' profiler
traces merged on one timeline) and --plot (each rank's memory timeline)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from harness.cli.console import print_mark
from harness.cli.signals import signals_held

__all__ = ["add_view_flags", "plot_available", "write_views"]


def add_view_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--trace",
        metavar="DIR",
        help="write each rank's torch.profiler Chrome trace (DIR/<spec>/rank<r>.json) and all ranks "
        "merged on one timeline, one process per rank (DIR/<spec>.json; Perfetto opens it)",
    )
    parser.add_argument(
        "--plot",
        metavar="DIR",
        help="draw each rank's FSDPMemTracker memory through the step (DIR/<spec>_memory_rank<r>.png "
        "and .svg; needs matplotlib: pip install .[plot])",
    )


def plot_available(console: Console) -> bool:
    """--plot needs matplotlib (optional): say so in one line, before running. Imported, not looked up,
    so that a broken copy stops the command now."""
    from harness.report.plot import PlotUnavailable, _pyplot

    try:
        with signals_held():  # matplotlib's import (a Ctrl-C meanwhile is raised after it; see run.py)
            _pyplot()
    except PlotUnavailable as exc:
        print_mark(console, False, str(exc))
        return False
    return True


def write_views(args: argparse.Namespace, spec: Any, observation: dict, console: Console) -> bool:
    """--trace merges the ranks' traces, --plot draws their memory; False (one line) if a file cannot be written."""
    try:
        _write_views_unchecked(args, spec, observation, console)
    except OSError as exc:
        where = exc.filename or (args.trace if getattr(args, "trace", None) else args.plot)
        print_mark(console, False, f"{where}: cannot write ({exc.strerror or exc})")
        return False
    return True


def _write_views_unchecked(args: argparse.Namespace, spec: Any, observation: dict, console: Console) -> None:
    if getattr(args, "trace", None):
        from harness.report.trace import write_merged

        folder, out = Path(args.trace) / spec.name, Path(args.trace) / f"{spec.name}.json"
        merged = write_merged(folder, out)
        write_merged(folder, Path(args.trace) / f"{spec.name}.fsdp.json", compact=True)
        ranks = merged["otherData"]["ranks"]
        console.print(
            Text(
                f"wrote {out}: the profiler traces of ranks {ranks} on one timeline, one process per rank "
                f"(open in ui.perfetto.dev); {spec.name}.fsdp.json keeps FSDP labels and collectives only; "
                f"per rank: {folder}/rank<r>.json"
            )
        )
    if getattr(args, "plot", None):
        from harness.report.plot import plot_memory

        Path(args.plot).mkdir(parents=True, exist_ok=True)
        files = plot_memory(observation, args.plot, spec.name)
        console.print(
            Text(
                f"wrote {len(files)} memory timelines: {', '.join(str(f) for f in files[:2])}"
                f"{' ...' if len(files) > 2 else ''}"
            )
        )
