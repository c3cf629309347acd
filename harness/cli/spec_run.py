"""One spec's run as ``run`` and ``render`` flags say: backend (a spec's pinned one kept unless
--force-backend), timeout, pre-flight, --trace folder, and a progress line."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

__all__ = [
    "add_instrument_flag",
    "backend_of",
    "gate_reason",
    "force_backend_problem",
    "global_rank",
    "note_kept_backend",
    "progress",
    "run_spec",
    "timeout_problem",
]

MAX_TIMEOUT_S = 86400
"""Longest --timeout accepted (seconds: a day)."""


def add_instrument_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--all-instruments",
        action="store_true",
        help="record every field the harness can observe, not only those the spec's entries read (a full "
        "observation file, e.g. to compare torch releases; costs the memory tracker and the replica's time)",
    )


def timeout_problem(args: argparse.Namespace) -> str | None:
    """--timeout outside (0, :data:`MAX_TIMEOUT_S`] seconds, as argparse's error text; else None."""
    if args.timeout is not None and not 0 < args.timeout <= MAX_TIMEOUT_S:
        return f"--timeout must be a number of seconds above 0 and at most {MAX_TIMEOUT_S}, got {args.timeout}"
    return None


def force_backend_problem(args: argparse.Namespace) -> str | None:
    """--force-backend without --backend, as argparse's error text; else None."""
    if getattr(args, "force_backend", False) and args.backend is None:
        return "--force-backend applies --backend to pinned specs: give --backend too"
    return None


def global_rank() -> int:
    """This process's rank under torchrun (RANK), 0 otherwise."""
    from harness.run.launch.joined import joined_world

    world = joined_world()
    return world["rank"] if world else 0


def backend_of(spec: Any, args: argparse.Namespace) -> str:
    """The backend ``spec`` runs on under --backend / --force-backend (harness.load.backend_choice)."""
    from harness.load.backend_choice import chosen_backend

    return chosen_backend(spec.backend, args.backend, getattr(args, "force_backend", False))


def gate_reason(spec: Any, args: argparse.Namespace) -> str | None:
    """Why ``spec`` is skipped whole here (``harness.run.gates.spec_gate``); None: run it."""
    from harness.run.gates import spec_gate

    return spec_gate(spec, backend_of(spec, args))


def note_kept_backend(console: Console, spec: Any, args: argparse.Namespace) -> None:
    """One line when ``spec`` keeps its pinned backend despite --backend (printed by rank 0 only)."""
    from harness.load.backend_choice import kept_backend_note

    note = kept_backend_note(spec.name, spec.backend, args.backend, getattr(args, "force_backend", False))
    if note and global_rank() == 0:
        console.print(Text(note))


def progress(console: Console, spec: Any, args: argparse.Namespace) -> Any:
    """A progress line for one spec's run (on a terminal only); its ``ranks`` is the runner's ``on_progress``."""
    from harness.report.progress import RunProgress

    backend = backend_of(spec, args)
    return RunProgress(console, f"{spec.name} ({spec.setup.world_size} ranks, {backend})", spec.setup.world_size)


def run_spec(spec: Any, args: argparse.Namespace, on_progress: Any) -> dict | None:
    """The observation of ``spec``'s setup run as the flags say (None on a non-zero torchrun rank), with
    the instruments its entries read (every one with --all-instruments or --trace; the memory tracker
    with --plot). --trace DIR: traces in DIR/<spec>/. Raises PreflightError, RunError, ObservationError."""
    from harness.load.instrument_choice import chosen_setup
    from harness.run.runner import run_setup

    trace_dir = None
    if getattr(args, "trace", None):
        folder = Path(args.trace) / spec.name
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("rank*.json"):  # an earlier run's ranks must not be merged in
            stale.unlink()
        trace_dir = str(folder)
    every = getattr(args, "all_instruments", False) or trace_dir is not None
    return run_setup(
        chosen_setup(spec, every=every, also=("memory",) if getattr(args, "plot", None) else ()),
        backend=backend_of(spec, args),
        timeout_s=args.timeout or spec.timeout_s,
        trace_dir=trace_dir,
        on_progress=on_progress,
        preflight=not getattr(args, "no_preflight", False),
    )
