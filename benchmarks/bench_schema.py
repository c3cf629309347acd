"""In-process cost of the spec schema: build the loader's validator, then validate every shipped spec.

Each measurement is a fresh process (imports warm in the bytecode cache, the YAML of every shipped
spec read before the clock starts); it times ``harness.load.spec._validator()`` (building the
jsonschema validator from the shipped schema) and then ``_schema_errors`` over every spec's data,
and prints both in milliseconds. ``--root`` measures another checkout (e.g. an export of the base
commit: ``git archive <commit> | tar -x -C /tmp/base``), paired run by run with this one; medians
of ``--repeat`` pairs are printed.

Run: ``python benchmarks/bench_schema.py [--root /tmp/base] [--repeat 9]``. Not a test: figures
depend on the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = r"""
import glob, json, time
import yaml
from harness.load import spec
datas = [yaml.safe_load(open(p, encoding="utf-8")) for p in sorted(glob.glob("specs/*.yaml"))]
t0 = time.perf_counter()
spec._validator()
t1 = time.perf_counter()
errors = sum(len(spec._schema_errors(d)) for d in datas)
t2 = time.perf_counter()
print(json.dumps({"build_ms": (t1 - t0) * 1e3, "validate_ms": (t2 - t1) * 1e3, "specs": len(datas), "errors": errors}))
"""


def measure(root: str) -> dict:
    env = {**os.environ, "PYTHONPATH": root}
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=root, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=None, help="a second checkout to pair with this one")
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    roots = {"this": ROOT, **({"other": os.path.abspath(args.root)} if args.root else {})}
    for root in roots.values():
        measure(root)  # writes bytecode caches; not counted
    runs: dict[str, list[dict]] = {name: [] for name in roots}
    for _ in range(args.repeat):
        for name, root in roots.items():
            runs[name].append(measure(root))
    for name, results in runs.items():
        build = statistics.median(r["build_ms"] for r in results)
        validate = statistics.median(r["validate_ms"] for r in results)
        print(
            f"{name:5} {roots[name]}: build {build:.1f} ms, validate {results[0]['specs']} specs {validate:.1f} ms, "
            f"total {build + validate:.1f} ms (median of {args.repeat}; {results[0]['errors']} schema errors)"
        )


if __name__ == "__main__":
    main()
