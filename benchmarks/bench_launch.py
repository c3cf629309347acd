"""Cold start: the harness's walkthrough run against a plain 4-rank FSDP2 script.

Each measurement is a fresh Python process, timed from start to exit:

- harness CLI: ``python -m harness run specs/qwen3_walkthrough.yaml``, the command as a user
  types it: load the spec, the pre-flight check, the forkserver starts, preloads
  torch/FSDP/the rank step, forks 4 gloo ranks, which run the step with every recorder on
  (collectives + profiler labels, FSDPMemTracker, parameter states, step shapes, the replica
  numerics); the observation is validated, all 113 entries checked and the report printed;
- harness run only: ``run_setup(RunSetup())`` (the same walkthrough setup) in a fresh
  interpreter, without the spec, the checks and the report (the launcher's share);
- plain: ``benchmarks/plain_step.py``, the same step with ``torch.multiprocessing.spawn``
  and nothing recorded;
- plain, 1 thread: the same script with ``OMP_NUM_THREADS=1`` (what torchrun sets; the
  harness gives each CPU rank cores / world size threads), to show how much of the gap is
  start-up and how much is 4 ranks x 2 threads on 2 cores.

The two alternate, ``--repeat`` times each (default 3); the median and the minimum of each
are printed. Not a test: the figures depend on the machine and its load.

Run: ``python benchmarks/bench_launch.py [--repeat N]``.

``--against DIR`` (another checkout, e.g. ``git archive <commit> | tar -x -C DIR``) times
instead the harness run only, alternating that checkout and this one run by run, and prints
both medians: a before/after of a change to the launcher.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HARNESS = (
    "from harness.run.runner import run_setup\n"
    "from harness.load.setup import RunSetup\n"
    "doc = run_setup(RunSetup(), backend='gloo', timeout_s=300)\n"
    "assert len(doc['ranks']) == 4\n"
)


def timed(cmd: list[str], root: str = ROOT, **extra_env: str) -> float:
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""), **extra_env)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=root, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", metavar="DIR", help="another checkout: time its harness run against this one's")
    args = parser.parse_args()
    if args.against:
        paired(os.path.abspath(args.against), args.repeat)
        return
    cli, harness, plain, plain1 = [], [], [], []
    script = os.path.join(ROOT, "benchmarks", "plain_step.py")
    for i in range(args.repeat):
        cli.append(timed([sys.executable, "-m", "harness", "run", "specs/qwen3_walkthrough.yaml"]))
        harness.append(timed([sys.executable, "-c", HARNESS]))
        plain.append(timed([sys.executable, script]))
        plain1.append(timed([sys.executable, script], OMP_NUM_THREADS="1"))
        print(
            f"round {i + 1}: harness CLI {cli[-1]:.2f} s, harness run only {harness[-1]:.2f} s, "
            f"plain {plain[-1]:.2f} s, plain 1 thread {plain1[-1]:.2f} s",
            flush=True,
        )
    c, h = statistics.median(cli), statistics.median(harness)
    p, p1 = statistics.median(plain), statistics.median(plain1)
    print(f"harness CLI, whole command (113 entries checked, report):     median {c:.2f} s, min {min(cli):.2f} s")
    print(f"harness run only (walkthrough, 4 gloo ranks, all recorders):  median {h:.2f} s, min {min(harness):.2f} s")
    print(f"plain mp.spawn script (same step, nothing recorded):          median {p:.2f} s, min {min(plain):.2f} s")
    print(f"plain mp.spawn script, OMP_NUM_THREADS=1:                     median {p1:.2f} s, min {min(plain1):.2f} s")
    print(
        f"ratio harness CLI/plain (medians): {c / p:.2f} (issue 12: target <= 0.35); run only/plain: {h / p:.2f}; "
        f"CLI/plain 1 thread: {c / p1:.2f}"
    )


def paired(other: str, repeat: int) -> None:
    """The harness run only, ``other`` and this checkout alternately (which goes first alternates too)."""
    times: dict[str, list[float]] = {other: [], ROOT: []}
    for i in range(repeat):
        for root in (other, ROOT) if i % 2 == 0 else (ROOT, other):
            times[root].append(timed([sys.executable, "-c", HARNESS], root))
        print(f"round {i + 1}: {other} {times[other][-1]:.2f} s, this checkout {times[ROOT][-1]:.2f} s", flush=True)
    for root, label in ((other, "against"), (ROOT, "this checkout")):
        print(
            f"harness run only, {label} ({root}): median {statistics.median(times[root]):.2f} s, "
            f"min {min(times[root]):.2f} s"
        )


if __name__ == "__main__":
    main()
