"""Cold ``compare`` of two full runs: wall seconds of ``python -m harness compare A.json B.json``
in a fresh process (imports, reading, flattening, classifying, printing), and of its parts in
this process.

    python benchmarks/bench_compare.py A.json B.json [--repeat 3]

A.json and B.json: two ``harness run specs/ --json`` files (e.g. two runs on one torch, or the
two files ``scripts/check_torch_release`` keeps). Prints one line per measure; times are
machine-dependent and reported, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from harness.report.compare import compare_runs, flatten_observation, read_run_file

    cold = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "harness", "compare", str(args.a), str(args.b)],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=False,
        )
        cold.append(time.perf_counter() - start)
    start = time.perf_counter()
    a, b = read_run_file(args.a), read_run_file(args.b)
    read = time.perf_counter() - start
    start = time.perf_counter()
    values = sum(len(flatten_observation(doc, every=True)) for doc in a.documents.values())
    flatten = time.perf_counter() - start
    start = time.perf_counter()
    differences = compare_runs(a, b)
    compared = time.perf_counter() - start
    print(f"cold compare (exit {done.returncode}): median {statistics.median(cold):.2f} s over {len(cold)} runs")
    print(f"read both files: {read:.2f} s; flatten A ({len(a.documents)} specs, {values} values): {flatten:.2f}s")
    behaviour = sum(d.apart is None for d in differences)
    print(f"compare_runs: {compared:.2f} s, {len(differences)} differences ({behaviour} behaviour)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
