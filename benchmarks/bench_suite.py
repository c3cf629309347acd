"""The test suite's wall time against the spec items it protects: both figures and their ratio.

Each measurement is a fresh ``python -m pytest`` process, timed from start to exit, with the
README's options (``-n auto``) and no cache (``-p no:cacheprovider``, so no run's order or
observation is reused by the next):

- specs: ``pytest -n auto specs/``: every spec entry as a test item, the spec runs they share;
- suite: ``pytest -n auto``: the README's test command, ``tests/`` and ``specs/`` together;
- fast (``--fast``): ``pytest -n auto -m "not slow" tests``, the tier that launches no rank.

The commands alternate, ``--repeat`` times each (default 1: the whole suite takes minutes); the
median of each, its item count (``--collect-only``) and the ratio suite / specs are printed.
The targets (on the 2-core CI machine): specs <= 90 s, suite <= 3 x specs, fast <= 30 s.
Not a test: the figures depend on the machine and on what else runs on it (the load average at
the start of each run is printed beside it).

Run: ``python benchmarks/bench_suite.py [--repeat N] [--fast] [-n WORKERS]``.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COMMANDS = {
    "specs": ["specs/"],
    "suite": [],
    "fast": ["-m", "not slow", "tests"],
}


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _pytest(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]


def item_count(args: list[str]) -> int:
    """Items ``pytest ARGS`` would run (after ``-m`` deselection)."""
    proc = subprocess.run(
        _pytest(["--collect-only", "-q", *args]), cwd=ROOT, env=_env(), capture_output=True, text=True, check=False
    )
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    match = re.match(r"(\d+)(?:/\d+)? tests? collected", last)
    if not match:
        sys.exit(f"bench_suite: cannot count the items of pytest {' '.join(args)}: {last or proc.stderr.strip()}")
    return int(match.group(1))


def timed(args: list[str], workers: str) -> tuple[float, str]:
    """Seconds ``pytest -n WORKERS ARGS`` took, and its summary line (it must pass)."""
    start = time.perf_counter()
    proc = subprocess.run(
        _pytest(["-n", workers, "-q", *args]), cwd=ROOT, env=_env(), capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - start
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr.strip()[-200:]
    if proc.returncode != 0:
        print(proc.stdout[-4000:], file=sys.stderr)
        sys.exit(f"bench_suite: pytest {' '.join(args)} failed (exit {proc.returncode}): {summary}")
    return elapsed, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--fast", action="store_true", help='also time -m "not slow" tests')
    parser.add_argument("-n", dest="workers", default="auto", help="xdist workers (default auto, as the README)")
    args = parser.parse_args()
    names = ["specs", "suite"] + (["fast"] if args.fast else [])
    counts = {name: item_count(COMMANDS[name]) for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(args.repeat):
        for name in names:
            load = os.getloadavg()[0]
            seconds, summary = timed(COMMANDS[name], args.workers)
            times[name].append(seconds)
            print(f"run {i + 1}: {name:5} {seconds:7.1f} s  (load {load:.1f} at start)  {summary}", flush=True)
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"\ncores: {os.cpu_count()}, workers: -n {args.workers}, repeats: {args.repeat}")
    for name in names:
        print(f"{name:5}: {median[name]:7.1f} s median over {len(times[name])}, {counts[name]} items")
    print(
        f"ratio suite / specs: {median['suite'] / median['specs']:.2f} (target <= 3; specs target <= 90 s"
        + ("; fast target <= 30 s)" if args.fast else ")")
    )


if __name__ == "__main__":
    main()
