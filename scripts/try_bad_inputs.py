"""Try the command line as a new user would, with bad inputs and faults in real runs (issue 11).

Every case runs ``python -m harness ...`` as a subprocess (fault cases run the same ``main``
inside ``python -c`` with a rank fault from ``tests.support.faults`` registered first: the real
CLI, the real launcher, real gloo ranks), each in its own session and with its own TMPDIR, under
a wall-clock bound. A case is CLEAN when:

- its exit status is the one docs/command-line.md's exit-status table gives for it;
- no ``Traceback`` appears in stdout or stderr (a rank that raised: its own traceback may follow
  a first line that names the rank, what it raised and in which phase; nothing before it);
- (inputs) one line of the output names what it must (the file, key path, flag) and the error
  output is short (a few lines, none over 500 characters);
- it finished within its bound;
- nothing is left: no process of its session still running 3 s after it ended, no
  ``fsdp2-harness-*`` or ``pymp-*`` folder in its TMPDIR.

Usage (about 10 minutes on a loaded 2-core machine; real runs one at a time, except the
concurrency case, which runs two two-rank runs at once)::

    PYTHONPATH=$PWD .venv/bin/python scripts/try_bad_inputs.py            # everything
    PYTHONPATH=$PWD .venv/bin/python scripts/try_bad_inputs.py --inputs   # bad inputs only
    PYTHONPATH=$PWD .venv/bin/python scripts/try_bad_inputs.py --faults   # faults only
    ... -k json                                                              # cases whose name has 'json'
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.run.launch.session import TEMP_PREFIX  # the session folders the harness makes (and sweeps)
from tests.support import REPO
from tests.support.bad_inputs import Case, inputs, materialize, output_problems
from tests.support.processes import cmdline, comm, descendants, live_processes, stat
from tests.support.specs import TINY_FAKE, wait_for_waiting_ranks, write_waiting_spec

PY = sys.executable

# --- the faults' specs ------------------------------------------------------------------------

# the bad inputs: tests.support.bad_inputs; two real ranks that wait in their step:
# tests.support.specs.write_waiting_spec (a signal sent once both wait lands inside the run)

# two real ranks, a small step (for rank faults and the concurrency case)
QUICK2 = """\
spec: quick2
title: two quick ranks
document: a document
backend: gloo
setup:
  model: {config: walkthrough, overrides: {num_hidden_layers: 2}}
  mesh: {shape: [2], dim_names: [dp]}
  numerics: false
tables:
  - section: "Forward"
    title: shapes
    check: step
    entries:
      - {id: x_norm, step: step1.x_norm, shape: [2, 8, 512]}
"""


# --- running a case ------------------------------------------------------------------------------


def _session_processes(sid: int) -> list[int]:
    """Live processes of session ``sid`` (a case's process is its session's leader)."""
    return [pid for pid, fields in live_processes().items() if int(fields[3]) == sid]


def _leftover_folders(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith((TEMP_PREFIX, "pymp-")))


def _env(tmp: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=str(REPO), COLUMNS="160")
    env.pop("FORCE_COLOR", None)
    env.update(extra or {})
    return env


def _lingering(pid: int, within: float = 3.0) -> list[int]:
    deadline = time.monotonic() + within
    left = _session_processes(pid)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _session_processes(pid)
    for p in left:  # never leave them to the machine: they are this script's
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return left


@dataclass
class Outcome:
    name: str
    kind: str
    clean: bool
    rc: int | None
    seconds: float
    problems: list[str]
    line: str


def _first_error_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:110]
    return ""


def run_input(case: Case, root: Path) -> Outcome:
    folder = root / case.name
    folder.mkdir()
    tmp = folder / "tmp"
    tmp.mkdir()
    argv = materialize(case, folder)
    problems: list[str] = []
    started = time.monotonic()
    proc = subprocess.Popen(
        [PY, "-m", "harness", *argv],
        cwd=REPO,
        env=_env(tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=case.bound_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        problems.append(f"over its bound of {case.bound_s:.0f} s")
    seconds = time.monotonic() - started
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    problems += output_problems(case, done, folder)
    problems += _leftovers(tmp, proc.pid)
    return Outcome(case.name, case.kind, not problems, proc.returncode, seconds, problems, _first_error_line(out + err))


def _leftovers(tmp: Path, *sids: int) -> list[str]:
    """Processes of the sessions ``sids`` still running 3 s on, and the harness's temp folders in ``tmp``."""
    problems = []
    left = [p for sid in sids for p in _lingering(sid)]
    if left:
        problems.append(f"processes left running: {left}")
    folders = _leftover_folders(tmp)
    if folders:
        problems.append(f"temp folders left: {folders}")
    return problems


def _judge_fault(rc, proc: subprocess.CompletedProcess, tmp: Path, *sids: int, frames_ok: bool = False) -> list[str]:
    problems = []
    wanted = rc if isinstance(rc, tuple) else (rc,)
    if proc.returncode not in wanted:
        problems.append(f"exit {proc.returncode}, docs/command-line.md says {rc}")
    text = proc.stdout + proc.stderr
    if frames_ok:  # the rank's frames may follow the one line that names it; nothing before that line
        text = "\n".join(text.split("\n")[:1])
    if "Traceback" in text:
        problems.append("a Traceback")
    return problems + _leftovers(tmp, *sids)


# --- faults in real runs -------------------------------------------------------------------------

INJECT = (
    "import sys\n"
    "from tests.support.faults import Fault, injected\n"
    "from harness.cli import main\n"
    "with injected(Fault(rank={rank}, phase={phase!r}, kind={kind!r})):\n"
    "    code = main(sys.argv[1:])\n"
    "sys.exit(code)\n"
)


_STARTED: list[int] = []  # every CLI a fault case started: each is its own session's leader


def _start(tmp: Path, argv: list[str], inject: dict | None = None) -> subprocess.Popen:
    cmd = [PY, "-c", INJECT.format(**inject)] if inject else [PY, "-m", "harness"]
    proc = subprocess.Popen(
        [*cmd, *argv],
        cwd=REPO,
        env=_env(tmp),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    _STARTED.append(proc.pid)
    return proc


def _start_waiting(folder: Path, *before: Path, extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen, bool]:
    """``harness run BEFORE.. slow2.yaml EXTRA..``: its last spec's two gloo ranks wait in their
    step; returns the CLI and whether both got there."""
    spec = write_waiting_spec(folder, "gloo", "slow2.yaml")
    proc = _start(folder / "tmp", ["run", *map(str, before), str(spec), *extra])
    try:
        wait_for_waiting_ranks(folder, 2, proc, timeout=240)
    except AssertionError:
        return proc, False
    return proc, True


@dataclass
class Fault:
    name: str
    rc: int | tuple[int, ...]
    says: tuple[str, ...]
    bound_s: float
    body: Callable[[Path], tuple[subprocess.CompletedProcess, list[str]]]  # the run and extra problems
    frames_ok: bool = False  # a rank's own traceback may follow a first line that names the rank and what it raised


def _communicate(proc: subprocess.Popen, bound: float) -> tuple[subprocess.CompletedProcess, list[str]]:
    try:
        out, err = proc.communicate(timeout=bound)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), []
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), [f"not over within {bound:.0f} s"]


def _signal_case(sig: int, to_group: bool, twice: bool = False):
    def body(folder: Path):
        proc, waiting = _start_waiting(folder)
        if not waiting:
            return _communicate(proc, 30)[0], ["the ranks did not start"]
        (os.killpg if to_group else os.kill)(proc.pid, sig)
        if twice:
            time.sleep(0.3)
            try:
                (os.killpg if to_group else os.kill)(proc.pid, sig)
            except ProcessLookupError:
                pass
        done, problems = _communicate(proc, 60)
        return done, problems

    return body


def _sigkill_then_next(folder: Path):
    tmp = folder / "tmp"
    proc, waiting = _start_waiting(folder)
    if not waiting:
        return _communicate(proc, 30)[0], ["the ranks did not start"]
    family = descendants(proc.pid)
    proc.kill()
    _communicate(proc, 60)
    problems = []
    time.sleep(2)
    alive = [p for p in family if Path(f"/proc/{p}").exists() and _state(p) != "Z"]
    if alive:
        problems.append(f"ranks/forkserver still running 2 s after the SIGKILL: {alive}")
    # leftovers from a SIGKILL are allowed; the next run must remove them
    quick = folder / "quick2.yaml"
    quick.write_text(QUICK2)
    nxt = _start(tmp, ["run", str(quick)])
    done, more = _communicate(nxt, 240)
    return done, problems + more


def _state(pid: int) -> str:
    fields = stat(pid)
    return fields[0] if fields else "gone"


def _injected(rank: int, phase: str, kind: str, extra: tuple[str, ...] = ()):
    def body(folder: Path):
        spec = folder / "quick2.yaml"
        spec.write_text(QUICK2)
        proc = _start(folder / "tmp", ["run", str(spec), *extra], {"rank": rank, "phase": phase, "kind": kind})
        return _communicate(proc, 240)

    return body


def _kill_a_rank(folder: Path):
    proc, waiting = _start_waiting(folder)
    if not waiting:
        return _communicate(proc, 30)[0], ["the ranks did not start"]
    ranks = [p for p in descendants(proc.pid) if b"fsdp2-rank" in cmdline(p) or comm(p).startswith("fsdp2-rank")]
    if not ranks:  # the last started descendant is a rank
        ranks = descendants(proc.pid)[-1:]
    os.kill(ranks[-1], signal.SIGKILL)
    return _communicate(proc, 120)


def _concurrent(folder: Path):
    spec = folder / "quick2.yaml"
    spec.write_text(QUICK2)
    a, b = folder / "a.json", folder / "b.json"
    first = _start(folder / "tmp", ["run", str(spec), "--json", str(a)])
    second = _start(folder / "tmp", ["run", str(spec), "--json", str(b)])
    done_a, pa = _communicate(first, 300)
    done_b, pb = _communicate(second, 300)
    problems = pa + pb
    if done_b.returncode != 0:
        problems.append(
            f"the second run exited {done_b.returncode}: {_first_error_line(done_b.stdout + done_b.stderr)}"
        )
    if "Traceback" in done_b.stdout + done_b.stderr:
        problems.append("a Traceback in the second run")
    problems += [f"{p.name} missing" for p in (a, b) if not p.exists()]
    return done_a, problems


def _json_after_interrupt(folder: Path):
    first = folder / "first.yaml"
    first.write_text(TINY_FAKE.replace("spec: tiny", "spec: first"))
    target = folder / "results.json"
    proc, waiting = _start_waiting(folder, first, extra=("--json", str(target)))
    if not waiting:
        return _communicate(proc, 30)[0], ["the ranks did not start"]
    os.killpg(proc.pid, signal.SIGINT)
    done, problems = _communicate(proc, 60)
    try:
        payload = json.loads(target.read_text())
        if (
            payload.get("interrupted") is not True
            or payload.get("finished_specs") != [str(first)]
            or not payload["results"]
        ):
            problems.append(f"--json holds {sorted(payload)}, finished {payload.get('finished_specs')}")
    except (OSError, ValueError) as exc:
        problems.append(f"--json not kept: {exc}")
    return done, problems


def _interrupt_while_simulating(folder: Path):
    spec = write_waiting_spec(folder, "fake", "fake.yaml", seconds=3)  # simulated rank 0 waits 3 s in its step
    proc = _start(folder / "tmp", ["run", str(spec)])
    try:
        wait_for_waiting_ranks(folder, 1, proc, timeout=240)
    except AssertionError:
        return _communicate(proc, 30)[0], ["the simulated rank did not start its step"]
    os.killpg(proc.pid, signal.SIGINT)
    return _communicate(proc, 60)


def _interrupt_after_the_report(folder: Path):
    """Ctrl-C just after the report: the run finished, its status stands (0), or 130 if main
    had not returned yet; never a silent death by SIGINT (-2)."""
    spec = folder / "fake.yaml"
    spec.write_text(TINY_FAKE)
    proc = _start(folder / "tmp", ["run", str(spec)])
    for line in proc.stdout:
        if "passed" in line and "failed" in line:
            break
    time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    return _communicate(proc, 60)


def _interrupt_while_importing(folder: Path):
    proc = _start(folder / "tmp", ["run", "specs/qwen3_walkthrough.yaml"])
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    return _communicate(proc, 60)


def _normal_exit(folder: Path):
    spec = folder / "quick2.yaml"
    spec.write_text(QUICK2)
    proc = _start(folder / "tmp", ["run", str(spec)])
    done, problems = _communicate(proc, 240)
    left = _session_processes(proc.pid)  # at once: nothing may outlive the CLI
    if left:
        problems.append(f"processes outlived the CLI: {[(p, comm(p)) for p in left]}")
    return done, problems


def faults() -> list[Fault]:
    return [
        Fault("ctrl_c_to_group", 130, ("interrupted",), 300, _signal_case(signal.SIGINT, True)),
        Fault("sigint_to_cli", 130, ("interrupted",), 300, _signal_case(signal.SIGINT, False)),
        Fault("ctrl_c_twice", 130, ("interrupted",), 300, _signal_case(signal.SIGINT, True, twice=True)),
        Fault("sigterm", 143, ("terminated",), 300, _signal_case(signal.SIGTERM, False)),
        Fault("sigkill_then_next_run_cleans", 0, ("quick2",), 600, _sigkill_then_next),
        Fault(
            "rank_raises",
            2,
            ("quick2.yaml: the run failed: rank 1 failed: RuntimeError: injected fault", "forward"),
            300,
            _injected(1, "forward", "raise"),
            frames_ok=True,
        ),
        Fault(
            "rank_raises_in_optimizer",
            2,
            ("rank 0 failed: RuntimeError", "optimizer"),
            300,
            _injected(0, "optimizer", "raise"),
            frames_ok=True,
        ),
        Fault("rank_exits", 2, ("rank 1 died",), 300, _injected(1, "backward", "exit")),
        Fault(
            "rank_hangs_in_setup_timeout",
            2,
            ("timed out after 20 s",),
            300,
            _injected(0, "setup", "hang", ("--timeout", "20")),
        ),
        Fault(
            "rank_hangs_timeout",
            2,
            ("timed out after 20 s", "rank 1"),
            300,
            _injected(1, "backward", "hang", ("--timeout", "20")),
        ),
        Fault("rank_sigkilled_from_outside", 2, ("rank",), 300, _kill_a_rank),
        Fault("two_concurrent_runs", 0, ("quick2",), 600, _concurrent),
        Fault("json_kept_after_interrupt", 130, ("interrupted",), 300, _json_after_interrupt),
        Fault("ctrl_c_while_simulating", 130, ("interrupted",), 300, _interrupt_while_simulating),
        Fault("ctrl_c_after_the_report", (0, 130), (), 120, _interrupt_after_the_report),
        Fault("ctrl_c_while_importing", 130, ("interrupted",), 120, _interrupt_while_importing),
        Fault("normal_exit_leaves_nothing", 0, ("quick2",), 300, _normal_exit),
    ]


def run_fault(fault: Fault, root: Path) -> Outcome:
    folder = root / fault.name
    folder.mkdir()
    (folder / "tmp").mkdir()
    started = time.monotonic()
    _STARTED.clear()
    done, problems = fault.body(folder)
    seconds = time.monotonic() - started
    if seconds > fault.bound_s:
        problems.append(f"over its bound of {fault.bound_s:.0f} s")
    problems += _judge_fault(fault.rc, done, folder / "tmp", *_STARTED, frames_ok=fault.frames_ok)
    text = done.stdout + done.stderr
    lines = text.splitlines()[:1] if fault.frames_ok else text.splitlines()
    if fault.says and not any(all(s in line for s in fault.says) for line in lines):
        problems.append(f"no line says {fault.says}")
    return Outcome(
        fault.name,
        "7" if "rank" not in fault.name else "7/run",
        not problems,
        done.returncode,
        seconds,
        problems,
        _first_error_line(done.stderr if done.returncode in (130, 143) else text),
    )


# --- main ----------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", action="store_true", help="bad inputs only")
    parser.add_argument("--faults", action="store_true", help="faults in real runs only")
    parser.add_argument("-k", default="", help="only cases whose name contains this")
    parser.add_argument("--keep", action="store_true", help="keep the cases' folders")
    args = parser.parse_args()
    # A background job of a non-interactive shell starts with SIGINT ignored, and children keep an
    # ignored signal across exec: the CLIs would then never see the Ctrl-C cases' SIGINT. A handler
    # of our own is reset to the default in them instead.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    both = not (args.inputs or args.faults)
    root = Path(tempfile.mkdtemp(prefix="try-bad-inputs-"))
    outcomes: list[Outcome] = []
    try:
        if args.inputs or both:
            for case in inputs():
                if args.k in case.name:
                    outcomes.append(run_input(case, root))
                    _print(outcomes[-1])
        n_inputs = len(outcomes)
        if args.faults or both:
            for fault in faults():
                if args.k in fault.name:
                    outcomes.append(run_fault(fault, root))
                    _print(outcomes[-1])
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"cases kept in {root}")
    ins, fls = outcomes[:n_inputs], outcomes[n_inputs:]
    print()
    print(f"{'':28}{'tried':>7}{'clean':>7}")
    print(f"{'bad inputs':28}{len(ins):>7}{sum(o.clean for o in ins):>7}")
    print(f"{'faults in real runs':28}{len(fls):>7}{sum(o.clean for o in fls):>7}")
    kinds = sorted({o.kind for o in ins})
    for kind in kinds:
        group = [o for o in ins if o.kind == kind]
        print(f"{'  inputs, kind ' + kind:28}{len(group):>7}{sum(o.clean for o in group):>7}")
    return 0 if all(o.clean for o in outcomes) else 1


def _print(o: Outcome) -> None:
    mark = "CLEAN" if o.clean else "NOT CLEAN"
    print(f"{mark:10} {o.kind:5} {o.name:34} exit {str(o.rc):>4} {o.seconds:6.1f} s  {o.line}", flush=True)
    for p in o.problems:
        print(f"{'':17}- {p}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
