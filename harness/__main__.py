"""Command line: ``python -m harness run|validate|draft``.

  run SPEC...       run each spec's setup on real ranks (or simulated ones) and check every entry;
                    exit 0 only when every entry holds; --report PATH writes a Markdown cluster report.
  validate SPEC...  load and check specs without running anything.
  draft             write a spec for a config and world size from the closed-form calculator.

Exit status: 0 when every entry holds (run) or every spec is valid (validate); 1 when an
entry fails (run) or a spec is invalid (validate); 2 when run cannot check a spec at all
(the spec is invalid or its run failed) or draft cannot use its config (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.text import Text


def _mark(ok: bool, text: str) -> Text:
    """A line starting with ✓ or ✗; the text is printed as is (no rich markup)."""
    return Text.assemble(("✓ " if ok else "✗ ", "green" if ok else "bold red"), text)


def _print_spec_error(console: Console, exc: Exception) -> None:
    """One ✗ line per error of a spec (a SpecError lists every error, in file order)."""
    for line in str(exc).splitlines():
        console.print(_mark(False, line))


def _cmd_validate(args: argparse.Namespace, console: Console) -> int:
    from harness.load.spec import SpecError, load_spec

    status = 0
    for path in args.specs:
        try:
            spec = load_spec(path)
        except SpecError as exc:
            _print_spec_error(console, exc)
            status = 1
        else:
            console.print(_mark(True, f"{path}: {len(spec.items)} entries, world size {spec.setup.world_size}"))
    return status


def _global_rank() -> int:
    """This process's rank under torchrun (RANK), 0 otherwise."""
    from harness.run.launch import joined_world

    world = joined_world()
    return world["rank"] if world else 0


def _cmd_run(args: argparse.Namespace, console: Console) -> int:
    import torch

    from harness.judge.evaluate import FAILING, evaluate_spec
    from harness.report.terminal import print_report, result_to_json, summary_line
    from harness.run.runner import RunError, run_setup
    from harness.load.spec import SpecError, load_spec

    from harness.report.markdown import SpecRun, cluster_report

    all_results, documents, status = [], {}, 0
    runs: list[SpecRun] = []  # for --report
    for path in args.specs:
        try:
            spec = load_spec(path)
        except SpecError as exc:
            _print_spec_error(console, exc)
            status = 2
            continue
        backend = args.backend or spec.backend
        timeout_s = args.timeout or spec.timeout_s
        started = time.perf_counter()
        with console.status(f"{spec.name}: running {spec.setup.world_size} ranks ({backend}), timeout {timeout_s:.0f} s ..."):
            try:
                observation = run_setup(spec.setup, backend=backend, timeout_s=timeout_s)
            except RunError as exc:
                if exc.rank is not None or _global_rank() == 0:  # a world's error: printed by rank 0 alone
                    console.print(_mark(False, f"{path}: the run failed:\n{exc}"))
                runs.append(SpecRun(str(path), spec.name, spec.title, error=str(exc),
                                    seconds=time.perf_counter() - started))
                status = 2
                continue
        if observation is None:  # a non-zero rank under torchrun: rank 0 reports
            continue
        env = observation["environment"]
        results = evaluate_spec(spec, observation)
        print_report(results, console, title=f"{spec.name} — {spec.title}", only_failures=args.failures_only)
        _print_bandwidth(observation, console)
        drafted = sum(item.drafted for item in spec.items)
        console.print(Text(
            f"{spec.name}: {summary_line(results, drafted)}  (torch {env['torch_version']}, {env['backend']}, "
            f"{env['world_size']} ranks, mesh {env['mesh_shape']} {env['mesh_dim_names']}, "
            f"{time.perf_counter() - started:.1f} s)"))
        if any(r.status in FAILING for r in results):
            status = max(status, 1)
        all_results.extend(results)
        documents[str(path)] = observation
        runs.append(SpecRun(str(path), spec.name, spec.title, observation, results,
                            seconds=time.perf_counter() - started))
    if len(args.specs) > 1 and all_results:
        console.print(Text(f"all specs: {summary_line(all_results)}"))
    if _global_rank() != 0:  # under torchrun rank 0 alone writes files
        return status
    if args.report:
        Path(args.report).write_text(cluster_report(runs), encoding="utf-8")
        console.print(Text(f"wrote {args.report}"))
    if args.json:
        payload = {"torch_version": torch.__version__, "results": [result_to_json(r) for r in all_results],
                   "observations": documents}
        Path(args.json).write_text(json.dumps(payload, indent=1, ensure_ascii=False))
        console.print(Text(f"wrote {args.json}"))
    return status


def _print_bandwidth(observation: dict, console: Console) -> None:
    """The nccl-tests table of the run's timed collectives (setup.bandwidth), if any."""
    from harness.judge.bandwidth import bandwidth_rows
    from harness.report.bandwidth import table_lines

    rows = bandwidth_rows(observation)
    if rows:
        console.print(Text("\n".join(table_lines(rows, world_size=observation["environment"]["world_size"]))))


def _cmd_draft(args: argparse.Namespace, console: Console) -> int:
    from harness.author.draft import DraftError, draft_spec

    try:
        text = draft_spec(args.config, args.world_size, layers=args.layers, dtype=args.dtype,
                          batch_per_rank=args.batch_per_rank, seq_len=args.seq_len, backend=args.backend or "auto",
                          output=args.output)
    except DraftError as exc:  # one line on stderr, no traceback
        print(f"✗ {exc}", file=sys.stderr)
        return 2
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        console.print(f"wrote {args.output}", highlight=False)
    else:
        sys.stdout.write(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run specs and check every entry")
    run.add_argument("specs", nargs="+", type=Path)
    run.add_argument("--backend", choices=("auto", "gloo", "nccl", "fake"), default=None,
                     help="override each spec's backend (auto: nccl with one GPU per rank if enough GPUs, else gloo)")
    run.add_argument("--timeout", type=float, default=None, help="seconds before a run is declared hung")
    run.add_argument("--json", metavar="PATH", help="write results and observation documents as JSON")
    run.add_argument("--failures-only", action="store_true", help="print only failing entries")
    run.add_argument("--report", metavar="PATH",
                     help="write a Markdown report: hosts and ranks, the environment with disagreements marked, the "
                          "bandwidth table, the results")

    validate = sub.add_parser("validate", help="check specs without running")
    validate.add_argument("specs", nargs="+", type=Path)

    draft = sub.add_parser("draft", help="draft a spec for a config from the closed-form calculator")
    draft.add_argument("--config", required=True,
                       help="a known config name (e.g. Qwen3-14B), its hub id (Qwen/Qwen3-14B), or a transformers "
                            "config.json (nothing is downloaded)")
    draft.add_argument("--world-size", type=int, required=True)
    draft.add_argument("--layers", type=int, default=2, help="decoder layers to run (default 2)")
    draft.add_argument("--dtype", default=None, choices=("float16", "bfloat16", "float32"),
                       help="parameter dtype (default: the config file's torch_dtype, else bfloat16)")
    draft.add_argument("--batch-per-rank", type=int, default=1)
    draft.add_argument("--seq-len", type=int, default=16)
    draft.add_argument("--backend", choices=("auto", "gloo", "nccl", "fake"), default=None)
    draft.add_argument("-o", "--output", help="write the spec here instead of stdout")

    args = parser.parse_args(argv)
    if args.command == "draft":
        for name in ("world_size", "layers", "batch_per_rank", "seq_len"):
            if getattr(args, name) < 1:
                parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    # Piped output is not cut to 80 columns: tables get 160, and an error stays on one line.
    console = Console(highlight=False, soft_wrap=True)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(highlight=False, soft_wrap=True, width=160)
    handler = {"run": _cmd_run, "validate": _cmd_validate, "draft": _cmd_draft}[args.command]
    return handler(args, console)


if __name__ == "__main__":
    sys.exit(main())
