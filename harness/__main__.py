"""Command line: ``python -m harness run|validate|draft``.

  run SPEC...       run each spec's setup on real ranks (or simulated ones) and check every entry;
                    exit 0 only when every entry holds; --report PATH writes a Markdown cluster report.
  validate SPEC...  load and check specs without running anything.
  draft             write a spec for a config and world size from the closed-form calculator.
  render SPEC       write the document's tables, regenerated from a run (or a run's --json), as Markdown.

Exit status: 0 when every entry holds (run) or every spec is valid (validate); 1 when an
entry fails (run) or a spec is invalid (validate); 2 when run cannot check a spec at all
(the spec is invalid, the pre-flight check refuses it, its run failed, or an output path is
unusable); draft: 0 written, 1 a bad config file, output path or world size; 130 when
interrupted (Ctrl-C), 143 when terminated (SIGTERM): ranks stopped, finished results kept.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from harness.contract.names import BACKENDS

if TYPE_CHECKING:
    from rich.console import Console


class _PlainLines:
    """validate's output where it is not a terminal (an editor, a pre-commit hook, a pipe):
    the characters rich would print there, without importing rich (~60 ms of a command that
    should take under half a second)."""

    is_terminal = False

    def print(self, text: str) -> None:
        print(text)


def _print_mark(console: "Console | _PlainLines", ok: bool, text: str) -> None:
    """A line starting with ✓ or ✗ (green or red on a terminal); the text is printed as is (no rich markup)."""
    if isinstance(console, _PlainLines):
        console.print(("✓ " if ok else "✗ ") + text)
        return
    from rich.text import Text

    console.print(Text.assemble(("✓ " if ok else "✗ ", "green" if ok else "bold red"), text))


def _print_spec_error(console: "Console | _PlainLines", exc: Exception) -> None:
    """One ✗ line per error of a spec (a SpecError lists every error, in file order)."""
    for line in str(exc).splitlines():
        _print_mark(console, False, line)


def _validated(path: Path) -> tuple[bool, str]:
    """(valid, the line to print for it: its entries and world size, or its SpecError's lines)."""
    from harness.load.spec import SpecError, load_spec

    try:
        spec = load_spec(path)
    except SpecError as exc:
        return False, str(exc)
    return True, f"{path}: {len(spec.items)} entries, world size {spec.setup.world_size}"


def _cmd_validate(args: argparse.Namespace, console: Console) -> int:
    from contextlib import closing

    from harness.load.fanout import fan_out

    # Many specs are spread over this process and forked copies, one per CPU (loading is
    # CPU-bound Python): what a pre-commit hook or an editor waits for. Printed in argument order.
    status = 0
    with closing(fan_out(_validated, args.specs, weights=[_size(path) for path in args.specs])) as results:
        for ok, text in results:
            for line in text.splitlines():
                _print_mark(console, ok, line)
            status = status or int(not ok)
    if __name__ == "__main__":
        # The program ends next. Python's last collection at exit walks every object the imports
        # and specs made (~60 ms, a seventh of the command) to free what exiting frees anyway;
        # nothing here waits on a finalizer (no file is written, the children are reaped).
        import gc

        gc.freeze()
    return status


def _size(path: Path) -> int:
    """Bytes in ``path``, 0 where it cannot be read (its load says why)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _global_rank() -> int:
    """This process's rank under torchrun (RANK), 0 otherwise."""
    from harness.run.launch.joined import joined_world

    world = joined_world()
    return world["rank"] if world else 0
class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the CLI is so that clean-up runs as for Ctrl-C."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def _output_problem(path: str | Path) -> str | None:
    """Why a file cannot be written at ``path`` (checked before any work), None when it can."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        return "is a folder; expected a file path"
    if not parent.exists():
        return f"the folder {str(parent)!r} does not exist; create it first"
    if not parent.is_dir():
        return f"{str(parent)!r} is not a folder"
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return "not writable"
    return None


def _folder_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot be (made into) a folder to write in (checked before any work), None
    when it can: an existing folder that is writable, or a new one under a writable folder."""
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            return "is a file; expected a folder (it is made if missing)"
        return None if os.access(path, os.W_OK | os.X_OK) else "not writable"
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{str(ancestor)!r} is a file, not a folder"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"cannot make it: {str(ancestor)!r} is not writable"
    return None


def _paths_problem(console: Console, args: argparse.Namespace, files: tuple[str, ...], folders: tuple[str, ...]) -> bool:
    """Check the output flags ``files`` (file paths) and ``folders`` (folder paths) of ``args``;
    print one line for the first unusable one and return True, else False."""
    for name in files + folders:
        target = getattr(args, name, None)
        if not target:
            continue
        problem = _output_problem(target) if name in files else _folder_problem(target)
        if problem:
            _print_mark(console, False, f"--{name.replace('_', '-')} {target}: {problem}")
            return True
    return False


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it (never half a file).

    A symbolic link is followed (the file it names is replaced, not the link); a path that is
    not a regular file (``/dev/stdout``, ``/dev/full``, a FIFO) is written in place: replacing it
    would put a regular file where a device was. Raises OSError (e.g. ENOSPC from ``/dev/full``).
    """
    path = Path(path)
    if path.exists() and not path.is_file():  # follows links: /dev/stdout -> /proc/self/fd/1 -> a pipe
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return
    if path.is_symlink():  # to a regular file (or dangling): write where it points
        path = Path(os.path.realpath(path))
    import tempfile  # imported here: validate, which writes no file, need not pay for it

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        if path.exists():  # mkstemp's file is 0600: keep the mode of the file replaced, else the umask's
            mode = path.stat().st_mode & 0o7777
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), mode)
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _save_results(console: Console, target: str, payload: dict[str, Any]) -> bool:
    """Write the --json payload; if that fails now, keep it in a temporary file and say where.
    True when written where asked."""
    from rich.text import Text

    from harness.contract import strict_json  # RFC 8259: norm_type .inf is written "Infinity", read back as inf

    text = strict_json.dumps(payload, indent=1, ensure_ascii=False)
    try:
        _write_atomically(Path(target), text)
    except OSError as exc:
        import tempfile

        fd, fallback = tempfile.mkstemp(prefix="fsdp2-results-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        _print_mark(console, False, f"--json {target}: cannot write ({exc.strerror or exc}); results kept in {fallback}")
        return False
    console.print(Text(f"wrote {target}"))
    return True


def _cmd_run_repeated(args: argparse.Namespace, console: Console) -> int:
    """``run --repeat N``: each spec N times; every observed field that differed, and each entry
    reading one as ``unstable`` (``harness.report.repeat``). 0 / 1 (an entry fails in every run) /
    2 (a spec cannot be checked) / 3 (an entry is unstable, none fails)."""
    from rich.text import Text

    from harness.judge.evaluate import FAILING, evaluate_spec
    from harness.load.spec import SpecError, load_spec
    from harness.report import repeat
    from harness.run.runner import ObservationError, RunError

    status = 0
    for path in args.specs:
        try:
            spec = load_spec(path)
        except SpecError as exc:
            _print_spec_error(console, exc)
            status = 2
            continue
        documents, results = [], []
        try:
            for _ in range(args.repeat):
                with _progress(console, spec, args) as progress:
                    documents.append(_run_spec(spec, args, progress))
                results.append(evaluate_spec(spec, documents[-1]))
        except (RunError, ObservationError) as exc:  # PreflightError is a RunError
            _print_mark(console, False, f"{path}: run {len(documents) + 1} of {args.repeat} failed: {exc}")
            status = 2
            continue
        outcomes = repeat.repeated_outcomes(results)
        lines = repeat.format_varying(repeat.varying_fields(documents)) + repeat.format_unstable(outcomes)
        for line in [f"{spec.name}: {args.repeat} runs", *lines,
                     f"{spec.name}: {repeat.summary_line(outcomes, args.repeat, FAILING)}"]:
            console.print(Text(line))
        status = max(status, repeat.exit_status(outcomes, FAILING), key=[0, repeat.UNSTABLE_EXIT, 1, 2].index)
    return status


def _cmd_run(args: argparse.Namespace, console: Console) -> int:
    from rich.text import Text

    if args.repeat is not None:
        return _cmd_run_repeated(args, console)

    from harness.load.spec import SpecError, load_spec
    from harness.report import junit

    # before any work: never compute results that cannot be written
    if _paths_problem(console, args, ("json", "junitxml", "report"), ("trace", "plot")):
        return 2
    if args.plot and not _plot_available(console):
        return 2
    from harness.report.markdown import SpecRun, cluster_report

    runs: list[SpecRun] = []  # for --report

    all_results: list[Any] = []
    documents: dict[str, Any] = {}
    finished: list[str] = []
    cases: list[Any] = []
    status, interrupted, failure, follower = 0, None, None, False
    run_started = time.perf_counter()
    try:
        from harness.judge.evaluate import FAILING, evaluate_spec
        from harness.report.terminal import print_report, summary_line
        from harness.run.preflight import PreflightError
        from harness.run.runner import ObservationError, RunError

        for path in args.specs:
            try:
                spec = load_spec(path)
            except SpecError as exc:
                _print_spec_error(console, exc)
                cases.append(junit.load_error_case(junit.spec_nodeid_path(path), exc))
                status = 2
                continue
            started = time.perf_counter()
            with _progress(console, spec, args) as progress:
                try:
                    observation = _run_spec(spec, args, progress)
                except PreflightError as exc:
                    _print_mark(console, False, f"{path}: {exc}")
                    status = 2
                    continue
                except (RunError, ObservationError) as exc:
                    if getattr(exc, "rank", None) is not None or _global_rank() == 0:  # a world's error: rank 0 prints it
                        _print_mark(console, False, f"{path}: the run failed: {exc}")
                    runs.append(SpecRun(str(path), spec.name, spec.title, error=str(exc),
                                        seconds=time.perf_counter() - started))
                    cases += [junit.run_error_case(junit.spec_nodeid_path(path), item.entry, exc) for item in spec.items]
                    status = 2
                    continue
                if observation is None:  # a non-zero rank under torchrun: rank 0 reports
                    follower = True
                    continue
                progress.checking(len(spec.items))
                results = evaluate_spec(spec, observation)
            env = observation["environment"]
            cases += [junit.result_case(junit.spec_nodeid_path(path), r) for r in results]
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
            finished.append(str(path))
            runs.append(SpecRun(str(path), spec.name, spec.title, observation, results,
                                seconds=time.perf_counter() - started))
            if not _write_views(args, spec, observation, console):
                status = max(status, 2)
        if len(args.specs) > 1 and all_results:
            console.print(Text(f"all specs: {summary_line(all_results)}"))
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the launcher has stopped the ranks
        interrupted = exc
    except Exception as exc:  # a harness bug: its traceback is shown, after the results are kept
        failure = exc
    # Files are written whole, not cut by a second Ctrl-C; with none to write, Ctrl-C stays live.
    # Signal handlers live in the main thread only.
    main_thread = threading.current_thread() is threading.main_thread()
    writing = bool(args.json or args.report or args.junitxml)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main_thread and writing else None
    try:
        if args.json and _global_rank() == 0:  # under torchrun only rank 0 writes files
            status = _write_payload(console, args, all_results, documents, finished, interrupted or failure, status)
        if args.report and not follower and _global_rank() == 0:  # under torchrun only rank 0 writes it
            try:
                _write_atomically(Path(args.report), cluster_report(runs))
                console.print(Text(f"wrote {args.report}"))
            except OSError as exc:
                _print_mark(console, False, f"--report {args.report}: cannot write ({exc.strerror or exc})")
                status = max(status, 2)
        if args.junitxml and not follower and _global_rank() == 0:  # under torchrun only rank 0 writes it
            text = junit.junit_xml(cases, duration_s=time.perf_counter() - run_started)
            try:
                _write_atomically(Path(args.junitxml), text)
                console.print(Text(f"wrote {args.junitxml} ({len(cases)} test cases)"))
            except OSError as exc:
                _print_mark(console, False, f"--junitxml {args.junitxml}: cannot write ({exc.strerror or exc})")
                status = max(status, 2)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if interrupted is not None:
        raise interrupted
    if failure is not None:
        raise failure
    return status


def _print_bandwidth(observation: dict, console: Console) -> None:
    """The nccl-tests table of the run's timed collectives (setup.bandwidth), if any."""
    from rich.text import Text

    from harness.language.bandwidth import bandwidth_rows
    from harness.report.bandwidth import table_lines

    rows = bandwidth_rows(observation)
    if rows:
        console.print(Text("\n".join(table_lines(rows, world_size=observation["environment"]["world_size"]))))


# --- seeing the run: progress, trace, plots, the document's tables --------------------------

def _progress(console: Console, spec, args: argparse.Namespace):
    """A progress line for one spec's run (drawn only on a terminal, never under pytest)."""
    from harness.report.progress import RunProgress

    backend = args.backend or spec.backend
    return RunProgress(console, f"{spec.name} ({spec.setup.world_size} ranks, {backend})", spec.setup.world_size)


def _run_spec(spec, args: argparse.Namespace, progress) -> dict | None:
    """Run ``spec``'s setup as the flags say (backend, timeout, --trace); raises RunError."""
    from harness.run.runner import run_setup

    trace_dir = None
    if getattr(args, "trace", None):
        folder = Path(args.trace) / spec.name
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("rank*.json"):  # an earlier run's ranks must not be merged in
            stale.unlink()
        trace_dir = str(folder)
    return run_setup(spec.setup, backend=args.backend or spec.backend, timeout_s=args.timeout or spec.timeout_s,
                     trace_dir=trace_dir, on_progress=progress.ranks, preflight=not getattr(args, "no_preflight", False))


def _plot_available(console: Console) -> bool:
    """--plot needs matplotlib (an optional dependency): say so in one line, before running.

    matplotlib is imported here, not only looked up: an installed copy that fails to import
    must stop the command now, not after the run with a traceback.
    """
    from harness.report.plot import PlotUnavailable, _pyplot

    try:
        _pyplot()
    except PlotUnavailable as exc:
        _print_mark(console, False, str(exc))
        return False
    return True


def _write_views(args: argparse.Namespace, spec, observation: dict, console: Console) -> bool:
    """--trace: merge the ranks' traces; --plot: draw each rank's memory timeline. False (and
    one line) when a file cannot be written now (its folder was checked before the run)."""
    try:
        _write_views_unchecked(args, spec, observation, console)
    except OSError as exc:
        where = exc.filename or (args.trace if getattr(args, "trace", None) else args.plot)
        _print_mark(console, False, f"{where}: cannot write ({exc.strerror or exc})")
        return False
    return True


def _write_views_unchecked(args: argparse.Namespace, spec, observation: dict, console: Console) -> None:
    from rich.text import Text

    if getattr(args, "trace", None):
        from harness.report.trace import write_merged

        folder, out = Path(args.trace) / spec.name, Path(args.trace) / f"{spec.name}.json"
        merged = write_merged(folder, out)
        write_merged(folder, Path(args.trace) / f"{spec.name}.fsdp.json", compact=True)
        ranks = merged["otherData"]["ranks"]
        console.print(Text(f"wrote {out}: the profiler traces of ranks {ranks} on one timeline, one process per rank "
                           f"(open in ui.perfetto.dev); {spec.name}.fsdp.json keeps FSDP labels and collectives only; "
                           f"per rank: {folder}/rank<r>.json"))
    if getattr(args, "plot", None):
        from harness.report.plot import plot_memory

        Path(args.plot).mkdir(parents=True, exist_ok=True)
        files = plot_memory(observation, args.plot, spec.name)
        console.print(Text(f"wrote {len(files)} memory timelines: {', '.join(str(f) for f in files[:2])}"
                           f"{' ...' if len(files) > 2 else ''}"))


def _cmd_render(args: argparse.Namespace, console: Console) -> int:
    from rich.text import Text
    from rich.console import Console

    from harness.load.spec import SpecError, load_spec
    from harness.report.render import render_markdown
    from harness.run.runner import RunError

    # Markdown on stdout: everything else goes to stderr.
    say = console if args.out else Console(stderr=True, highlight=False, soft_wrap=True)
    if _paths_problem(say, args, (), ("out", "trace", "plot")):
        return 2
    if args.plot and not _plot_available(say):
        return 2
    try:
        spec = load_spec(args.spec)
    except SpecError as exc:
        _print_spec_error(say, exc)
        return 2
    if args.from_json:
        from harness.report.observation_file import ObservationFileError, read_observation

        try:
            observation = read_observation(args.from_json, args.spec, spec.setup.to_dict())
        except ObservationFileError as exc:
            _print_mark(say, False, str(exc))
            return 2
    else:
        with _progress(say, spec, args) as progress:
            try:
                observation = _run_spec(spec, args, progress)
            except RunError as exc:
                _print_mark(say, False, f"{args.spec}: the run failed: {exc}")
                return 2
        if observation is None:  # a non-zero rank under torchrun: rank 0 renders
            return 0
    text = render_markdown(spec, observation)
    if args.out:
        out = Path(args.out) / f"{spec.name}.md"
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            _write_atomically(out, text)
        except OSError as exc:
            _print_mark(say, False, f"--out {args.out}: cannot write {out} ({exc.strerror or exc})")
            return 2
        say.print(Text(f"wrote {out}"))
    else:
        sys.stdout.write(text)
    return 0 if _write_views(args, spec, observation, say) else 2


def _write_payload(console: Console, args: argparse.Namespace, results: list[Any], documents: dict[str, Any],
                   finished: list[str], interrupted: BaseException | None, status: int) -> int:
    from harness.report.terminal import result_to_json

    version = None
    if "torch" in sys.modules:
        version = sys.modules["torch"].__version__
    payload = {"torch_version": version, "results": [result_to_json(r) for r in results], "observations": documents}
    if interrupted is not None:  # Ctrl-C, SIGTERM, or a harness error: what finished before it
        payload["interrupted"] = True
        payload["finished_specs"] = finished
    if not _save_results(console, args.json, payload):
        status = max(status, 2)
    return status


def _config_problem(config: str) -> str | None:
    """Why ``--config`` names no usable file (one line naming it), None when it is a known
    name or a readable YAML/JSON mapping. Reading is bounded as for specs."""
    from model import KNOWN_CONFIGS

    if config in KNOWN_CONFIGS:
        return None
    path = Path(config)
    if not path.exists():
        return None  # draft says it is neither a known config nor a file
    from harness.load.yaml_safe import YamlFileError, load_text, read_text

    try:
        text = read_text(path)
        if path.suffix == ".json":
            try:
                data = json.loads(text)
            except (ValueError, RecursionError) as exc:
                return f"{path}: not valid JSON: {exc}"
        else:
            _, data = load_text(text, path)
    except YamlFileError as exc:
        return str(exc).replace("a spec may be", "a config file may be")
    if not isinstance(data, dict):
        return f"{path}: expected a mapping of Qwen3Config fields (hidden_size, num_attention_heads, ...), got {type(data).__name__}"
    return None


def _cmd_compare(args: argparse.Namespace, console: Console) -> int:
    """``compare A.json B.json``: every observed value that differs (``harness.report.compare``);
    0 the same, 1 they differ, 2 a file cannot be read."""
    from rich.text import Text

    from harness.report.compare import CompareError, compare_documents, format_differences, read_documents, summary_line

    try:
        a, b = read_documents(args.a), read_documents(args.b)
    except CompareError as exc:
        _print_mark(console, False, str(exc))
        return 2
    differences = compare_documents(a, b)
    if differences:
        console.print(Text(f"A = {args.a}\nB = {args.b}"))
    for line in format_differences(differences):
        console.print(Text(line))
    console.print(Text(summary_line(differences, len({Path(k).name for k in [*a, *b]}))))
    return 1 if differences else 0


def _cmd_draft(args: argparse.Namespace, console: Console) -> int:
    from rich.text import Text
    from rich.console import Console

    from harness.run.preflight import MAX_SIMULATED_WORLD, PreflightError, check, process_limit

    err = Console(stderr=True, highlight=False, soft_wrap=True)
    if args.output:
        problem = _output_problem(args.output)
        if problem:
            _print_mark(err, False, f"-o {args.output}: {problem}")
            return 1
    if args.world_size > MAX_SIMULATED_WORLD:  # the calculator's tables grow with the world: refuse first
        if args.backend in ("gloo", "nccl"):
            _print_mark(err, False, f"--world-size {args.world_size:,}: would start {args.world_size:,} processes on this "
                                   f"machine, over its limit of {process_limit()}")
        else:
            _print_mark(err, False, f"--world-size {args.world_size:,}: over the {MAX_SIMULATED_WORLD:,} ranks a spec can "
                                   "simulate (the fake backend's set-up grows with the world size)")
        return 1
    from harness.load.spec import MAX_LAYERS

    if args.layers > MAX_LAYERS:  # a spec of more layers would not load
        _print_mark(err, False, f"--layers {args.layers:,}: over the {MAX_LAYERS:,} decoder layers a spec may build")
        return 1
    problem = _config_problem(args.config)
    if problem:
        _print_mark(err, False, problem)
        return 1

    from harness.author.draft import DraftError, draft_spec
    from harness.load.setup import RunSetup, SetupError

    def draft(backend: str) -> str:
        return draft_spec(args.config, args.world_size, layers=args.layers, dtype=args.dtype,
                          batch_per_rank=args.batch_per_rank, seq_len=args.seq_len, backend=backend,
                          output=args.output)

    backend = args.backend or "auto"
    try:
        text = draft(backend)
        data = _yaml_load(text)
        try:  # would the pre-flight check run the drafted spec here?
            if not args.no_preflight:
                check(RunSetup.from_mapping(data["setup"]), data.get("backend", "auto"))
        except PreflightError as exc:
            if data.get("backend", "auto") == "fake" or backend != "auto":
                _print_mark(err, False, f"draft: the spec would be refused on this machine: {exc.reason}; "
                                       "use --no-preflight to write it anyway")
                return 1
            text = draft("fake")
            try:
                check(RunSetup.from_mapping(_yaml_load(text)["setup"]), "fake")
            except PreflightError as fake_exc:
                _print_mark(err, False, f"draft: the spec would be refused on this machine: {exc.reason}; "
                                       f"simulated: {fake_exc.reason}; use --no-preflight to write it anyway")
                return 1
            err.print(Text(f"note: drafted for the fake backend (simulated ranks): on real ranks this machine "
                           f"would refuse it: {exc.reason}"))
    except DraftError as exc:  # already names --config and what was expected
        _print_mark(err, False, " ".join(str(exc).split()))
        return 1
    except (ValueError, TypeError, KeyError, SetupError) as exc:
        _print_mark(err, False, f"--config {args.config}: {' '.join(str(exc).split())}")
        return 1
    if args.output:
        try:
            _write_atomically(Path(args.output), text)
        except OSError as exc:
            _print_mark(err, False, f"-o {args.output}: cannot write: {exc.strerror or exc}")
            return 1
        console.print(f"wrote {args.output}", highlight=False)
    else:
        sys.stdout.write(text)
    return 0


def _add_view_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", metavar="DIR",
                        help="write each rank's torch.profiler Chrome trace (DIR/<spec>/rank<r>.json) and all ranks "
                             "merged on one timeline, one process per rank (DIR/<spec>.json; Perfetto opens it)")
    parser.add_argument("--plot", metavar="DIR",
                        help="draw each rank's FSDPMemTracker memory through the step (DIR/<spec>_memory_rank<r>.png "
                             "and .svg; needs matplotlib: pip install .[plot])")


def _yaml_load(text: str) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(text)


def _console(command: str) -> "Console | _PlainLines":
    """rich's Console for stdout; plain lines for validate off a terminal (rich would print the
    same characters there). Piped output is not cut to 80 columns: tables get 160, and an
    error stays on one line."""
    if command == "validate" and not sys.stdout.isatty() and not os.environ.get("FORCE_COLOR"):
        return _PlainLines()
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(highlight=False, soft_wrap=True, width=160)
    return console


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run specs and check every entry")
    run.add_argument("specs", nargs="+", type=Path)
    run.add_argument("--backend", choices=BACKENDS, default=None,
                     help="override each spec's backend (auto: nccl with one GPU per rank if enough GPUs, else gloo)")
    run.add_argument("--timeout", type=float, default=None, help="seconds before a run is declared hung")
    run.add_argument("--json", metavar="PATH", help="write results and observation documents as JSON")
    run.add_argument("--failures-only", action="store_true", help="print only failing entries")
    run.add_argument("--report", metavar="PATH",
                     help="write a Markdown report: hosts and ranks, the environment with disagreements marked, the "
                          "bandwidth table, the results")
    _add_view_flags(run)
    run.add_argument("--repeat", type=int, metavar="N", default=None,
                     help="run each spec N times; list every observed field that differed and report each entry "
                          "that reads one as unstable (exit 3)")
    run.add_argument("--junitxml", metavar="PATH",
                     help="write JUnit XML: one test case per entry, named as pytest's --junitxml names the spec's items")

    render = sub.add_parser("render", help="write the document's tables, regenerated from a run, as Markdown")
    render.add_argument("spec", type=Path)
    render.add_argument("--out", metavar="DIR", help="write DIR/<spec>.md (default: Markdown on stdout)")
    render.add_argument("--from-json", metavar="OBS.json",
                        help="read the observation from a 'run --json' file instead of running")
    render.add_argument("--backend", choices=BACKENDS, default=None,
                        help="override the spec's backend")
    render.add_argument("--timeout", type=float, default=None, help="seconds before a run is declared hung")
    _add_view_flags(render)
    run.add_argument("--no-preflight", action="store_true",
                     help="skip the check that this machine can hold the run (processes, memory per rank)")

    validate = sub.add_parser("validate", help="check specs without running")
    validate.add_argument("specs", nargs="+", type=Path)

    draft = sub.add_parser("draft", help="draft a spec for a config from the closed-form calculator")
    draft.add_argument("--config", required=True,
                       help="a known config name (e.g. Qwen3-14B), its hub id (Qwen/Qwen3-14B), or a transformers "
                            "config.json (nothing is downloaded)")
    draft.add_argument("--world-size", type=int, required=True)
    draft.add_argument("--layers", type=int, default=2, help="decoder layers to run (default 2)")
    draft.add_argument("--dtype", default=None, choices=("float16", "bfloat16", "float32"),
                       help="parameter dtype (default: the config file's torch_dtype or dtype, else bfloat16)")
    draft.add_argument("--batch-per-rank", type=int, default=1)
    draft.add_argument("--seq-len", type=int, default=16)
    draft.add_argument("--backend", choices=BACKENDS, default=None)
    draft.add_argument("-o", "--output", help="write the spec here instead of stdout")
    draft.add_argument("--no-preflight", action="store_true",
                       help="write the spec even if this machine's pre-flight check would refuse to run it")

    compare = sub.add_parser("compare", help="list every observed value that differs between two 'run --json' files")
    compare.add_argument("a", type=Path, metavar="A.json")
    compare.add_argument("b", type=Path, metavar="B.json")

    args = parser.parse_args(argv)
    if args.command == "render" and args.from_json and args.trace:
        parser.error("--trace needs a run: drop --from-json (a --json file holds no profiler traces)")
    if args.command in ("run", "render") and args.timeout is not None and not 0 < args.timeout <= 86400:
        parser.error(f"--timeout must be a number of seconds above 0 and at most 86400, got {args.timeout}")
    if args.command == "run" and args.repeat is not None:
        if args.repeat < 2:
            parser.error(f"--repeat must be at least 2, got {args.repeat}")
        given = [f"--{n.replace('_', '-')}" for n in ("json", "report", "junitxml", "trace", "plot")
                 if getattr(args, n)]
        if given:
            parser.error(f"--repeat compares runs and writes no files: drop {', '.join(given)}")
    if args.command == "draft":
        for name in ("world_size", "layers", "batch_per_rank", "seq_len"):
            if getattr(args, name) < 1:
                parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    console = _console(args.command)
    handler = {"run": _cmd_run, "validate": _cmd_validate, "draft": _cmd_draft, "render": _cmd_render,
               "compare": _cmd_compare}[args.command]
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    previous_hook = sys.unraisablehook

    def unraisable(hook_args: Any) -> None:
        """An interrupt that lands in a weakref callback or __del__ is "ignored" by Python (a
        printed traceback, and the run goes on): deliver it again, to be raised where it can."""
        if isinstance(hook_args.exc_value, KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM if isinstance(hook_args.exc_value, Terminated) else signal.SIGINT)
            return
        previous_hook(hook_args)

    sys.unraisablehook = unraisable
    try:
        return handler(args, console)
    except KeyboardInterrupt as exc:  # the ranks are stopped by the launcher's clean-up on the way here
        terminated = isinstance(exc, Terminated)
        print("terminated" if terminated else "interrupted", file=sys.stderr)
        return 143 if terminated else 130
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
        sys.unraisablehook = previous_hook


if __name__ == "__main__":
    try:
        status = main()
        # The work is done and reported: a Ctrl-C from now on must not kill the interpreter while it
        # tears torch down (up to a second or more after the report; it died of SIGINT, silently, and
        # its status was lost). An ignored SIGINT stays ignored through finalization; SIGTERM still ends it.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except KeyboardInterrupt:  # before main's own handler was in place (while importing), or just after it
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        sys.stderr.write("interrupted\n")
        status = 130
    sys.exit(status)
