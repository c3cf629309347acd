"""Cold `python -m harness validate specs/*.yaml` in two checkouts, interleaved; medians.

    python benchmarks/bench_validate_trees.py BASELINE_TREE [THIS_TREE] [--runs 7]

Each run is a fresh interpreter (imports included), as a user types it, with PYTHONPATH set to
the tree under test and that tree's specs/. Interleaving spreads the load of a shared machine
over both. Prints each tree's median and spread of wall-clock seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def one(tree: Path) -> float:
    specs = sorted(str(p) for p in (tree / "specs").glob("*.yaml"))
    env = dict(os.environ, PYTHONPATH=str(tree))
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "harness", "validate", *specs], cwd=tree, env=env,
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: validate failed:\n{proc.stdout}{proc.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("baseline", type=Path)
    parser.add_argument("tree", type=Path, nargs="?", default=Path(__file__).resolve().parents[1])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    times: dict[Path, list[float]] = {args.baseline: [], args.tree: []}
    for _ in range(args.runs):
        for tree in times:
            times[tree].append(one(tree))
    for tree, values in times.items():
        print(f"{tree}: median {statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f}, "
              f"{len(values)} runs)")


if __name__ == "__main__":
    main()
