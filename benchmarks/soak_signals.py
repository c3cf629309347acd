"""Soak: Ctrl-C, SIGTERM, a killed rank and a hung rank at random moments of a real run (issue 45).

Each try runs ``python -m harness run specs/qwen3_walkthrough.yaml specs/hsdp_2x2.yaml
specs/adamw_three_steps.yaml --json OUT`` (gloo ranks here) in a session of its own and with a
TMPDIR of its own, and, as a terminal does, signals the whole process group:

- ``sigint-random`` / ``sigterm-random``: SIGINT / SIGTERM after a random delay within a clean
  run's length (measured first);
- ``sigint-sweep`` / ``sigterm-sweep``: 0-300 ms (10 ms steps, in turn) after spec 1's, 2's or
  3's summary line (in turn): where the next spec's ranks start, or the run ends;
- ``sigkill-rank``: SIGKILL to one rank (a child of the forkserver), after a random delay;
- ``hung-rank``: rank 1 hangs at the start of its backward (tests/support/hang_rank) in the first
  spec alone, with ``--timeout 10``; no signal.

Recorded per try: exit status, seconds from the signal (the start, for a hung rank) to the exit,
``Traceback`` in stdout or stderr, stderr, processes of the session still running 5 s after the
exit, ``fsdp2-harness-*``/``pymp-*``/``fsdp2-flight-recorder-*`` folders left in its TMPDIR, and
whether ``OUT`` is valid JSON (marked ``interrupted`` after a signal). A signal sent after the
run had written ``OUT`` (or after the process ended) did not land: the run had finished; so did
one whose run wrote every spec's results unmarked (it came as the outputs were being written:
Ctrl-C is ignored then, SIGTERM held and raised after them, 143, or, in the interpreter's last
moments, after Python has reset its handlers, the default: killed by SIGTERM). No ``OUT`` is due
for a signal in the first half second (``START_S``): the command line has not parsed ``--json``. A try
still running ``EXIT_BOUND_S + 30`` s after its signal is a hang (its group is killed).

Usage (about 8-15 s a try on a loaded 2-core machine)::

    PYTHONPATH=$PWD nice .venv/bin/python benchmarks/soak_signals.py --minutes 40 \\
        --log /tmp/soak.jsonl --table /tmp/soak.md
    ... --tries 100 --scenario sigint-sweep --scenario sigterm-sweep

Tries go round the scenarios in turn until each has ``--tries`` (``--fault-tries`` for SIGKILL and
the hung rank) or ``--minutes`` pass; the
table is printed (and rewritten to ``--table``) after every round.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.cli.signals import EXIT_BOUND_S
from tests.support import REPO
from tests.support.hang_rank import sitecustomize as hang_rank
from tests.support.processes import cmdline, live_processes

SPECS = ["specs/qwen3_walkthrough.yaml", "specs/hsdp_2x2.yaml", "specs/adamw_three_steps.yaml"]
SCENARIOS = ("sigint-random", "sigint-sweep", "sigterm-random", "sigterm-sweep", "sigkill-rank", "hung-rank")
LEFTOVER_PREFIXES = ("fsdp2-harness-", "pymp-", "fsdp2-flight-recorder-")
SUMMARY = re.compile(r"^\S+: .*\(torch [^,]+, \w+, \d+ ranks")  # a spec's summary line (run.py)
HANG_GRACE_S = 30.0
START_S = 0.5  # a signal this soon after the start comes before the command line parsed --json
LINGER_S = 5.0


@dataclass
class Try:
    scenario: str
    index: int
    aim: str = ""  # when the signal was meant to go
    sent_s: float | None = None  # after the start
    landed: bool = False
    status: int | None = None
    exit_s: float | None = None  # from the signal (or the start) to the exit
    hung: bool = False
    traceback: bool = False
    stderr: str = ""
    lingering: list[str] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)
    json_ok: bool | None = None
    finished_specs: int | None = None
    note: str = ""

    def json_bad(self) -> bool:
        """OUT invalid, or missing where it is due: not for a signal in the first START_S seconds
        (before the command line has parsed its arguments, it knows no --json)."""
        early = self.finished_specs is None and self.sent_s is not None and self.sent_s < START_S
        return self.json_ok is False and not early

    def clean(self) -> bool:
        if self.hung or self.traceback or self.lingering or self.folders or self.json_bad():
            return False
        if self.scenario.startswith(("sigint", "sigterm")):
            sigint = self.scenario.startswith("sigint")
            expected = (130, "interrupted\n") if sigint else (143, "terminated\n")
            if not self.landed:
                # the run's own status; a SIGTERM held through the writing, raised after (143); or one
                # that came as the interpreter finished (its handlers already reset: killed by it)
                exiting = (-signal.SIGTERM, "") if not sigint else None
                own = self.status in (0, 1) and self.stderr == ""
                return own or (self.status, self.stderr) in (expected, exiting)
            return (self.status, self.stderr) == expected and self.exit_s is not None and self.exit_s <= EXIT_BOUND_S
        if self.scenario == "sigkill-rank":
            return not self.landed or (self.status == 2 and "died" in self.note)
        return self.status == 2 and "Diagnosis" in self.note


class Run:
    """One ``python -m harness run`` in its own session; stdout lines time-stamped as they come."""

    def __init__(self, folder: Path, specs: list[str], extra: list[str], env: dict[str, str]):
        self.folder, self.out = folder, folder / "out.json"
        self.lines: list[tuple[float, str]] = []
        self.start = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness", "run", *specs, "--json", str(self.out), *extra],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.stderr = ""
        threading.Thread(target=self._read_stdout, daemon=True).start()
        self._err = threading.Thread(target=self._read_stderr, daemon=True)
        self._err.start()

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line))

    def _read_stderr(self) -> None:
        self.stderr = self.proc.stderr.read()

    def summaries(self) -> list[float]:
        return [t for t, line in list(self.lines) if SUMMARY.match(line)]

    def wrote_json(self) -> bool:
        return any(line.startswith(f"wrote {self.out}") for _, line in list(self.lines))

    def text(self) -> str:
        return "".join(line for _, line in list(self.lines)) + self.stderr

    def signal(self, sig: int) -> bool:
        """Send ``sig`` to the group; whether it landed (the run still going, OUT not yet written)."""
        landed = self.proc.poll() is None and not self.wrote_json()
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            return False
        return landed

    def ranks(self) -> list[int]:
        """The forkserver's children: the ranks now running."""
        procs = live_processes()
        servers = [p for p, f in procs.items() if int(f[1]) == self.proc.pid and b"forkserver" in cmdline(p)]
        return [p for p, f in procs.items() if int(f[1]) in servers]


def _env(hang: bool) -> dict[str, str]:
    path = [str(REPO / "tests" / "support" / "hang_rank")] if hang else []
    env = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="1000")
    env["PYTHONPATH"] = os.pathsep.join([*path, str(REPO)])
    if hang:
        env[hang_rank.RANK] = "1:backward"
    return env


def _wait_until(predicate, limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


def one_try(scenario: str, index: int, run_s: float, rng: random.Random) -> Try:
    folder = Path(tempfile.mkdtemp(prefix="soak-"))
    hang = scenario == "hung-rank"
    env = dict(_env(hang), TMPDIR=str(folder))
    result = Try(scenario, index)
    run = Run(folder, SPECS[:1] if hang else SPECS, ["--timeout", "10"] if hang else [], env)
    sig = signal.SIGINT if scenario.startswith("sigint") else signal.SIGTERM
    sent = run.start
    if scenario.endswith("-random"):
        delay = rng.uniform(0, run_s)
        result.aim = f"{delay:.2f} s"
        time.sleep(delay)
        sent = time.monotonic()
        result.landed = run.signal(sig)
    elif scenario.endswith("-sweep"):
        spec, offset = index % 3 + 1, (index // 3) % 31 * 0.010
        result.aim = f"{offset * 1000:.0f} ms after summary {spec}"
        if _wait_until(lambda: len(run.summaries()) >= spec or run.proc.poll() is not None, 600):
            if len(run.summaries()) >= spec:
                time.sleep(max(0.0, run.summaries()[spec - 1] + offset - time.monotonic()))
            sent = time.monotonic()
            result.landed = run.signal(sig)
    elif scenario == "sigkill-rank":
        delay = rng.uniform(0, run_s * 0.9)
        time.sleep(delay)
        if _wait_until(lambda: run.ranks() or run.proc.poll() is not None or run.wrote_json(), 60):
            ranks = run.ranks()
            if ranks and run.proc.poll() is None and not run.wrote_json():
                victim = rng.choice(ranks)
                result.aim = f"{delay:.2f} s, pid {victim}"
                sent = time.monotonic()
                try:
                    os.kill(victim, signal.SIGKILL)
                    result.landed = True
                except ProcessLookupError:
                    pass
    if result.landed or not scenario.startswith(("sigint", "sigterm", "sigkill")):
        result.sent_s = sent - run.start
    limit = EXIT_BOUND_S + HANG_GRACE_S + (600 if hang or scenario == "sigkill-rank" or not result.landed else 0)
    try:
        run.proc.wait(timeout=max(1.0, limit - (time.monotonic() - sent)))
    except subprocess.TimeoutExpired:
        result.hung = True
        result.note = "hung: " + _snapshot(run.proc.pid)
        os.killpg(run.proc.pid, signal.SIGKILL)
        run.proc.wait()
    result.exit_s = round(time.monotonic() - sent, 3)
    run._err.join(timeout=10)
    result.status = run.proc.returncode
    result.stderr = run.stderr[-2000:]
    text = run.text()
    result.traceback = "Traceback" in text
    if not result.hung:
        result.note = _note(text)
    result.lingering = _lingering(run.proc.pid)
    result.folders = sorted(p.name for p in folder.iterdir() if p.name.startswith(LEFTOVER_PREFIXES))
    if result.landed and result.scenario.startswith(("sigint", "sigterm")) and _complete(run.out, len(SPECS)):
        result.landed = False  # every spec ran and the JSON says so: the signal came as outputs were written
        result.note = "after the run's work (outputs being written)"
    result.json_ok, result.finished_specs = _json(run.out, result)
    if result.lingering:
        try:
            os.killpg(run.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(folder, ignore_errors=True)
    return result


def _note(text: str) -> str:
    for key in ("died without a result", "Diagnosis:"):
        for line in text.splitlines():
            if key in line:
                return ("died: " if key.startswith("died") else "") + line.strip()[:300]
    return ""


def _snapshot(pgid: int) -> str:
    procs = [(p, f) for p, f in live_processes().items() if int(f[2]) == pgid]
    return "; ".join(f"{p} ppid {f[1]} {cmdline(p)[:60]!r}" for p, f in procs)


def _lingering(pgid: int) -> list[str]:
    """Processes of the try's session (its process group) still running LINGER_S after the exit."""
    deadline = time.monotonic() + LINGER_S
    while True:
        left = [f"{p} {cmdline(p)[:80]!r}" for p, f in live_processes().items() if int(f[2]) == pgid]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def _complete(path: Path, specs: int) -> bool:
    """Whether OUT holds every spec's observation and is not marked interrupted."""
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return not payload.get("interrupted") and len(payload.get("observations", {})) == specs


def _json(path: Path, result: Try) -> tuple[bool | None, int | None]:
    if not path.exists():
        # no output only when nothing could be written: a run killed as a hang
        return (None, None) if result.hung else (False, None)
    try:
        payload = json.loads(path.read_text())
    except ValueError:
        return False, None
    if result.landed and result.scenario.startswith(("sigint", "sigterm")) and result.status in (130, 143):
        return payload.get("interrupted") is True, len(payload.get("finished_specs", []))
    return True, len(payload.get("observations", {}))


def table(tries: list[Try]) -> str:
    rows = [
        "| scenario | tries | landed | clean | exit statuses | time to exit (landed, max) | hangs | tracebacks "
        "| lingering processes | leftover folders | bad JSON |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for scenario in SCENARIOS:
        mine = [t for t in tries if t.scenario == scenario]
        if not mine:
            continue
        landed = [t for t in mine if t.landed or scenario == "hung-rank"]
        statuses: dict[int | None, int] = {}
        for t in landed:
            statuses[t.status] = statuses.get(t.status, 0) + 1
        times = [t.exit_s for t in landed if t.exit_s is not None and not t.hung]
        time_cell = f"{max(times):.2f} s" if times else "-"
        status_cell = ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items(), key=str)) or "-"
        rows.append(
            f"| {scenario} | {len(mine)} | {len(landed)} | {sum(t.clean() for t in mine)} | {status_cell} "
            f"| {time_cell} | {sum(t.hung for t in mine)} | {sum(t.traceback for t in mine)} "
            f"| {sum(bool(t.lingering) for t in mine)} | {sum(bool(t.folders) for t in mine)} "
            f"| {sum(t.json_bad() for t in mine)} |"
        )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tries", type=int, default=100, help="tries per signal scenario (default 100)")
    parser.add_argument("--fault-tries", type=int, default=20, help="tries of sigkill-rank and hung-rank (default 20)")
    parser.add_argument("--minutes", type=float, default=None, help="stop starting tries after this long")
    parser.add_argument("--scenario", action="append", choices=SCENARIOS, help="only these (repeatable)")
    parser.add_argument("--run-seconds", type=float, default=None, help="a clean run's length (default: measured)")
    parser.add_argument("--seed", type=int, default=45)
    parser.add_argument(
        "--first-index", type=int, default=0, help="number tries from here (a second soak at once sweeps other offsets)"
    )
    parser.add_argument("--log", type=Path, help="append every try as a JSON line here")
    parser.add_argument("--table", type=Path, help="rewrite the table here after every round")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    scenarios = args.scenario or list(SCENARIOS)
    started = time.monotonic()
    run_s = args.run_seconds
    if run_s is None:
        folder = Path(tempfile.mkdtemp(prefix="soak-"))
        run = Run(folder, SPECS, [], dict(_env(False), TMPDIR=str(folder)))
        run.proc.wait()
        run_s = time.monotonic() - run.start
        print(f"a clean run: status {run.proc.returncode}, {run_s:.1f} s", flush=True)
        shutil.rmtree(folder, ignore_errors=True)
    tries: list[Try] = []
    counts = dict.fromkeys(scenarios, 0)
    wanted = {s: args.fault_tries if s in ("sigkill-rank", "hung-rank") else args.tries for s in scenarios}
    while any(n < wanted[s] for s, n in counts.items()):
        for scenario in scenarios:
            if args.minutes is not None and time.monotonic() - started > args.minutes * 60:
                break
            if counts[scenario] >= wanted[scenario]:
                continue
            result = one_try(scenario, args.first_index + counts[scenario], run_s, rng)
            counts[scenario] += 1
            tries.append(result)
            if args.log:
                with args.log.open("a") as f:
                    f.write(json.dumps(dict(asdict(result), clean=result.clean())) + "\n")
            if not result.clean():
                print(f"NOT CLEAN: {json.dumps(asdict(result))}", flush=True)
        else:
            text = table(tries)
            if args.table:
                args.table.write_text(text + "\n")
            print(text, flush=True)
            continue
        break
    print(table(tries), flush=True)
    if args.table:
        args.table.write_text(table(tries) + "\n")
    return 0 if all(t.clean() for t in tries) else 1


if __name__ == "__main__":
    sys.exit(main())
