"""``run SPEC...``: run each spec's setup on real ranks (or simulated ones) and check every entry.

Exit 0 when every entry holds or is skipped (a spec gated out whole is skipped before anything
runs), 1 when one fails, 2 when a spec cannot be checked. --json, --report and --junitxml are
written after the last spec, also when a signal or a harness error cut the run short."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from harness.cli.console import print_mark, print_spec_error
from harness.cli.output_flags import refuse_unusable_outputs
from harness.cli.signals import files_written_whole, signals_held
from harness.cli.spec_run import (
    add_instrument_flag,
    force_backend_problem,
    gate_reason,
    global_rank,
    note_kept_backend,
    progress,
    run_spec,
    timeout_problem,
)
from harness.cli.views import add_view_flags, plot_available, write_views
from harness.contract.names import BACKENDS
from harness.load.spec_files import expand
from harness.report.notes import compile_ran_eager_note
from harness.report.output import write_atomically, write_temporary

__all__ = ["add_arguments", "argument_problem", "command", "save_results"]


def add_arguments(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="run specs and check every entry")
    run.add_argument(
        "specs", nargs="+", type=Path, help="spec files, or folders: every .yaml/.yml file below one is a spec"
    )
    run.add_argument(
        "--backend",
        choices=BACKENDS,
        default=None,
        help="backend for specs whose backend is auto (auto: nccl with one GPU per rank if enough GPUs, "
        "else gloo); a spec pinned to another keeps it unless --force-backend",
    )
    run.add_argument(
        "--force-backend",
        action="store_true",
        help="apply --backend also to specs pinned to a backend (by default a spec whose backend is "
        "not auto keeps it: the pin is part of what it checks)",
    )
    run.add_argument("--timeout", type=float, default=None, help="seconds before a run is declared hung")
    run.add_argument("--json", metavar="PATH", help="write results and observation documents as JSON")
    run.add_argument("--failures-only", action="store_true", help="print only failing entries")
    run.add_argument(
        "--report",
        metavar="PATH",
        help="write a Markdown report: hosts and ranks, the environment with disagreements marked, the "
        "bandwidth table, the results",
    )
    add_view_flags(run)
    add_instrument_flag(run)
    run.add_argument(
        "--junitxml",
        metavar="PATH",
        help="write JUnit XML: one test case per entry, named as pytest's --junitxml names the spec's items",
    )
    run.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip the check that this machine can hold the run (processes, memory per rank)",
    )
    run.add_argument(
        "--repeat",
        type=int,
        metavar="N",
        default=None,
        help="run each spec N times; list every observed field that differed and report each entry "
        "that reads one as unstable (exit 3)",
    )


def argument_problem(args: argparse.Namespace) -> str | None:
    """What argparse cannot check (the timeout's range, --repeat's unwritable files), as its error text; else None."""
    if args.repeat is not None:
        if args.repeat < 2:
            return f"--repeat must be at least 2, got {args.repeat}"
        given = [
            f"--{n.replace('_', '-')}" for n in ("json", "report", "junitxml", "trace", "plot") if getattr(args, n)
        ]
        if given:
            return f"--repeat compares runs and writes no files: drop {', '.join(given)}"
    return force_backend_problem(args) or timeout_problem(args)


@dataclass
class _Runs:
    """What the specs' runs leave for the summary and the output files."""

    runs: list[Any] = field(default_factory=list)  # markdown.SpecRun per spec, for --report
    results: list[Any] = field(default_factory=list)  # every entry's CheckResult, for --json
    documents: dict[str, Any] = field(default_factory=dict)  # spec path -> observation, for --json
    finished: list[str] = field(default_factory=list)  # spec paths whose run finished
    failed: dict[str, str] = field(default_factory=dict)  # spec path -> why its run failed, for --json
    cases: list[Any] = field(default_factory=list)  # JUnit test cases, for --junitxml
    status: int = 0
    follower: bool = False  # a non-zero rank under torchrun: rank 0 reports and writes


def command(args: argparse.Namespace, console: Console) -> int:
    if args.repeat is not None:
        return _command_repeated(args, console)
    if refuse_unusable_outputs(console, args, ("json", "junitxml", "report"), ("trace", "plot")):
        return 2
    if args.plot and not plot_available(console):
        return 2
    done, interrupted, failure = _Runs(), None, None
    run_started = time.perf_counter()
    try:
        # Imports with signals held (a Ctrl-C meanwhile is raised after them): one inside an import
        # leaves modules half-imported and can end the process by SIGINT (status -2) after its line.
        with signals_held():
            from harness.report.terminal import summary_line
        paths = expand(args.specs)  # a folder: every .yaml/.yml below it (harness/load/spec_files.py)
        for path in paths:
            _run_one(path, args, console, done)
        if len(paths) > 1 and done.results:
            console.print(Text(f"all specs: {summary_line(done.results)}"))
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the launcher has stopped the ranks
        interrupted = exc
    except Exception as exc:  # a harness bug: its traceback is shown, after the results are kept
        failure = exc
    _write_outputs(args, console, done, interrupted or failure, time.perf_counter() - run_started)
    if interrupted is not None:
        raise interrupted
    if failure is not None:
        raise failure
    return done.status


def _run_one(path: Path, args: argparse.Namespace, console: Console, done: _Runs) -> None:
    """Load, run and check one spec, print its report, and add what it left to ``done``."""
    with signals_held():
        from harness.judge.evaluate import FAILING, evaluate_spec
        from harness.load.spec import SpecError, load_spec
        from harness.report import junit
        from harness.report.markdown import SpecRun
        from harness.report.terminal import print_report, summary_line
        from harness.run.preflight import PreflightError
        from harness.run.runner import ObservationError, RunError

    nodeid_path = junit.spec_nodeid_path(path)
    try:
        spec = load_spec(path)
    except SpecError as exc:
        print_spec_error(console, exc)
        done.cases.append(junit.load_error_case(nodeid_path, exc))
        done.status = 2
        return
    started = time.perf_counter()
    note_kept_backend(console, spec, args)
    reason = gate_reason(spec, args)
    if reason is not None:  # skipped whole, nothing run: not a failure (exit 0), as under pytest
        _skip_whole(spec, reason, console, done, nodeid_path)
        return
    with progress(console, spec, args) as shown:
        try:
            observation = run_spec(spec, args, shown.ranks)
        except PreflightError as exc:
            print_mark(console, False, f"{path}: {exc}")
            done.failed[str(path)] = f"refused by the pre-flight check: {exc}"
            done.status = 2
            return
        except (RunError, ObservationError) as exc:
            if getattr(exc, "rank", None) is not None or global_rank() == 0:  # a world's error: rank 0 says it
                print_mark(console, False, f"{path}: the run failed: {exc}")
            done.runs.append(
                SpecRun(str(path), spec.name, spec.title, error=str(exc), seconds=time.perf_counter() - started)
            )
            done.failed[str(path)] = str(exc)
            done.cases += [junit.run_error_case(nodeid_path, item.entry, exc) for item in spec.items]
            done.status = 2
            return
        if observation is None:  # a non-zero rank under torchrun: rank 0 reports
            done.follower = True
            return
        shown.checking(len(spec.items))
        results = evaluate_spec(spec, observation)
    env = observation["environment"]
    done.cases += [junit.result_case(nodeid_path, r) for r in results]
    print_report(results, console, title=f"{spec.name} — {spec.title}", only_failures=args.failures_only)
    _print_bandwidth(observation, console)
    drafted = sum(item.drafted for item in spec.items)
    console.print(
        Text(
            f"{spec.name}: {summary_line(results, drafted)}  (torch {env['torch_version']}, {env['backend']}, "
            f"{env['world_size']} ranks, mesh {env['mesh_shape']} {env['mesh_dim_names']}, "
            f"{time.perf_counter() - started:.1f} s)"
        )
    )
    note = compile_ran_eager_note(observation)
    if note:
        console.print(Text(note))
    if any(r.status in FAILING for r in results):
        done.status = max(done.status, 1)
    done.results.extend(results)
    done.documents[str(path)] = observation
    done.finished.append(str(path))
    done.runs.append(
        SpecRun(str(path), spec.name, spec.title, observation, results, seconds=time.perf_counter() - started)
    )
    if not write_views(args, spec, observation, console):
        done.status = max(done.status, 2)


def _skip_whole(spec: Any, reason: str, console: Console, done: _Runs, nodeid_path: str) -> None:
    """Report ``spec`` skipped whole for ``reason`` (every entry a skip result; no observation)."""
    from harness.judge.evaluate import skipped_spec
    from harness.report import junit
    from harness.report.terminal import summary_line

    results = skipped_spec(spec, reason)
    if global_rank() == 0:
        console.print(Text(f"{spec.name}: skipped: {reason}"))
        console.print(Text(f"{spec.name}: {summary_line(results)}"))
    done.results.extend(results)
    done.cases += [junit.result_case(nodeid_path, r) for r in results]


def _write_outputs(
    args: argparse.Namespace, console: Console, done: _Runs, cut_short: BaseException | None, seconds: float
) -> None:
    """--json, --report and --junitxml from what finished (``cut_short`` too); under torchrun only
    rank 0 writes. The imports are inside ``files_written_whole`` too, so that a signal cannot end
    the command before any file is written."""
    with files_written_whole(bool(args.json or args.report or args.junitxml)):
        with signals_held():
            from harness.report import junit
            from harness.report.markdown import cluster_report

        if args.json and global_rank() == 0:
            done.status = _write_payload(console, args, done, cut_short)
        if args.report and not done.follower and global_rank() == 0:
            _write_file(console, "--report", args.report, cluster_report(done.runs), done, f"wrote {args.report}")
        if args.junitxml and not done.follower and global_rank() == 0:
            _write_file(
                console,
                "--junitxml",
                args.junitxml,
                junit.junit_xml(done.cases, duration_s=seconds),
                done,
                f"wrote {args.junitxml} ({len(done.cases)} test cases)",
            )


def _write_file(console: Console, flag: str, target: str, text: str, done: _Runs, wrote: str) -> None:
    """Write ``text`` to ``target`` whole and say ``wrote``; on failure one line and status 2."""
    try:
        write_atomically(target, text)
    except OSError as exc:
        print_mark(console, False, f"{flag} {target}: cannot write ({exc.strerror or exc})")
        done.status = max(done.status, 2)
        return
    console.print(Text(wrote))


def _command_repeated(args: argparse.Namespace, console: Console) -> int:
    """``run --repeat N``: each spec N times, every field that differed, and each entry reading one as
    ``unstable`` (``harness.report.repeat``). Status 0, 1 (fails in every run), 2, or 3 (unstable)."""
    with signals_held():
        from harness.judge.evaluate import FAILING, evaluate_spec
        from harness.load.spec import SpecError, load_spec
        from harness.report import repeat
        from harness.run.runner import ObservationError, RunError

    status = 0
    for path in expand(args.specs):
        try:
            spec = load_spec(path)
        except SpecError as exc:
            print_spec_error(console, exc)
            status = 2
            continue
        documents, results = [], []
        note_kept_backend(console, spec, args)
        reason = gate_reason(spec, args)
        if reason is not None:  # skipped whole, nothing run (exit 0)
            console.print(Text(f"{spec.name}: skipped: {reason}"))
            continue
        try:
            for _ in range(args.repeat):
                with progress(console, spec, args) as shown:
                    documents.append(run_spec(spec, args, shown.ranks))
                results.append(evaluate_spec(spec, documents[-1]))
        except (RunError, ObservationError) as exc:  # PreflightError is a RunError
            print_mark(console, False, f"{path}: run {len(documents) + 1} of {args.repeat} failed: {exc}")
            status = 2
            continue
        outcomes = repeat.repeated_outcomes(results)
        lines = repeat.format_varying(repeat.varying_fields(documents)) + repeat.format_unstable(outcomes)
        for line in [
            f"{spec.name}: {args.repeat} runs",
            *lines,
            f"{spec.name}: {repeat.summary_line(outcomes, args.repeat, FAILING)}",
        ]:
            console.print(Text(line))
        status = max(status, repeat.exit_status(outcomes, FAILING), key=[0, repeat.UNSTABLE_EXIT, 1, 2].index)
    return status


def _print_bandwidth(observation: dict, console: Console) -> None:
    """The nccl-tests table of the run's timed collectives (setup.bandwidth), if any."""
    from harness.language.algbw_busbw import bandwidth_rows
    from harness.report.bandwidth_table import table_lines

    rows = bandwidth_rows(observation)
    if rows:
        console.print(Text("\n".join(table_lines(rows, world_size=observation["environment"]["world_size"]))))


def _write_payload(console: Console, args: argparse.Namespace, done: _Runs, interrupted: BaseException | None) -> int:
    """Write --json: the running torch, every result, each spec's observation and ``failed_specs``
    (path -> error); the run's status, 2 if it cannot be written."""
    from harness.report.terminal import result_to_json

    version = None
    if "torch" in sys.modules:
        version = sys.modules["torch"].__version__
    payload = {
        "torch_version": version,
        "results": [result_to_json(r) for r in done.results],
        "observations": done.documents,
        "failed_specs": done.failed,
    }
    if interrupted is not None:  # Ctrl-C, SIGTERM, or a harness error: what finished before it
        payload["interrupted"] = True
        payload["finished_specs"] = done.finished
    if not save_results(console, args.json, payload):
        return max(done.status, 2)
    return done.status


def save_results(console: Console, target: str, payload: dict[str, Any]) -> bool:
    """Write the --json payload to ``target``, else to a temporary file it names; True when written where asked."""
    from harness.contract import strict_json  # RFC 8259: norm_type .inf is written "Infinity", read back as inf

    text = strict_json.dumps(payload, indent=1, ensure_ascii=False)
    try:
        write_atomically(target, text)
    except OSError as exc:
        fallback = write_temporary(text, prefix="fsdp2-results-", suffix=".json")
        print_mark(console, False, f"--json {target}: cannot write ({exc.strerror or exc}); results kept in {fallback}")
        return False
    console.print(Text(f"wrote {target}"))
    return True
