"""What seeing the run costs: ``python benchmarks/bench_views.py [--repeats 3] [--spec PATH]``.

Cold whole commands from a shell, interleaved pair by pair so that other load on the machine
hits both alike, medians reported:

1. ``run``: ``python -m harness run SPEC --failures-only`` (the baseline);
2. ``run + views``: the same with ``--trace DIR --plot DIR --junitxml PATH`` (each rank exports
   its profiler trace, the traces are merged twice (full and compact), every rank's memory plot
   is drawn as PNG and SVG, JUnit XML is written);
3. ``render --from-json``: the document's tables from the saved observation (no run).

Needs matplotlib for --plot (``pip install .[plot]``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", default="specs/qwen3_walkthrough.yaml")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    py = [sys.executable, "-m", "harness"]
    times: dict[str, list[float]] = {"run": [], "run + views": [], "render --from-json": []}
    with tempfile.TemporaryDirectory(prefix="bench-views-") as tmp:
        out = Path(tmp)
        for i in range(args.repeats):
            times["run"].append(
                _timed(py + ["run", args.spec, "--failures-only", "--json", str(out / "run.json")], env)
            )
            times["run + views"].append(
                _timed(
                    py
                    + [
                        "run",
                        args.spec,
                        "--failures-only",
                        "--trace",
                        str(out / f"t{i}"),
                        "--plot",
                        str(out / f"p{i}"),
                        "--junitxml",
                        str(out / "j.xml"),
                    ],
                    env,
                )
            )
            times["render --from-json"].append(
                _timed(py + ["render", args.spec, "--from-json", str(out / "run.json"), "--out", str(out / "md")], env)
            )
            print(f"repeat {i + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times.items()), flush=True)
    print(f"{args.spec}, {args.repeats} interleaved repeats, cold commands, medians:")
    for name, values in times.items():
        print(f"  {name:20s} {statistics.median(values):6.1f} s   (all: {', '.join(f'{v:.1f}' for v in values)})")
    base = statistics.median(times["run"])
    print(f"  views add {statistics.median(times['run + views']) - base:+.1f} s to the run")


if __name__ == "__main__":
    main()
