"""Cold ``python -m harness validate specs/*.yaml``: what an editor or pre-commit hook waits for.

Each measurement is a fresh process from a shell, timed from start to exit, paired run by run
with the baseline ``python -c "import yaml, jsonschema"`` (the interpreter plus the two
libraries validation cannot do without). The median of ``--repeat`` pairs is printed, and
whether the validate process imported torch (it must not: loading needs only model.config,
model.names and model.steps). Target (issue 9): every shipped spec in <= 0.5 s. Both commands
run under the interpreter that runs this script: ``.venv/bin/python benchmarks/bench_validate.py``
measures the README's environment. The specs are spread over one process per CPU
(harness/load/fanout.py); the count is printed.

Run: ``python benchmarks/bench_validate.py [--repeat 9]``. Not a test: figures depend on the load.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# As a user's shell runs it: bytecode caches written (the first, unmeasured run writes them).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    specs = sorted(glob.glob(os.path.join(ROOT, "specs", "*.yaml")))
    validate = [sys.executable, "-m", "harness", "validate", *specs]
    baseline = [sys.executable, "-c", "import yaml, jsonschema"]
    timed(validate)  # writes the bytecode caches, as any first run does
    pairs = [(timed(validate), timed(baseline)) for _ in range(args.repeat)]
    v = statistics.median(p[0] for p in pairs)
    b = statistics.median(p[1] for p in pairs)
    torch_loaded = subprocess.run(
        [sys.executable, "-c", "import runpy, sys; sys.argv = ['harness', 'validate', *sys.argv[1:]]\n"
         "try:\n    runpy.run_module('harness', run_name='__main__')\nexcept SystemExit:\n    pass\n"
         "print('torch' in sys.modules)", *specs], cwd=ROOT, capture_output=True, text=True).stdout.split()[-1]
    sys.path.insert(0, ROOT)
    from harness.load.fanout import process_count

    print(f"{sys.executable}, {process_count(len(specs))} processes: validate {len(specs)} specs: median {v:.3f} s over {args.repeat} cold runs "
          f"(baseline python + yaml + jsonschema: {b:.3f} s; harness's own share {v - b:.3f} s); "
          f"torch imported: {torch_loaded}")


if __name__ == "__main__":
    main()
