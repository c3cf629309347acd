"""Cold ``python -m harness validate specs/*.yaml``: what an editor or pre-commit hook waits for.

Each measurement is a fresh process, timed from start to exit, paired run by run with the
baseline ``python -c "import yaml, jsonschema"`` (the interpreter plus the two libraries
validation cannot do without). The medians of ``--repeat`` pairs are printed, and whether the
validate process imported torch (it must not: loading needs only model.config, model.names and
model.steps). Target: every shipped spec, loaded one after another in one process, in <= 1 s.
Both commands run under the interpreter that runs this script, with this checkout first on
PYTHONPATH: ``.venv/bin/python benchmarks/bench_validate.py`` measures the README's environment.
Each process's CPU time (user + system) is printed beside its wall time: on a shared machine
under load the wall time grows with the load, the CPU time much less (on an idle machine the two
are about equal, the command being one CPU-bound process).

Run: ``python benchmarks/bench_validate.py [--repeat 9]``. Not a test: figures depend on the load.
"""

from __future__ import annotations

import argparse
import glob
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# As a user's shell runs it: bytecode caches written (the first, unmeasured run writes them);
# this checkout's harness, whatever else is installed.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one run of ``cmd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, env=ENV)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    specs = sorted(glob.glob(os.path.join(ROOT, "specs", "*.yaml")))
    validate = [sys.executable, "-m", "harness", "validate", *specs]
    baseline = [sys.executable, "-c", "import yaml, jsonschema"]
    timed(validate)  # writes the bytecode caches, as any first run does
    pairs = [(timed(validate), timed(baseline)) for _ in range(args.repeat)]
    v, v_cpu = (statistics.median(p[0][i] for p in pairs) for i in (0, 1))
    b, b_cpu = (statistics.median(p[1][i] for p in pairs) for i in (0, 1))
    torch_loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import runpy, sys; sys.argv = ['harness', 'validate', *sys.argv[1:]]\n"
            "try:\n    runpy.run_module('harness', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules)",
            *specs,
        ],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
    ).stdout.split()[-1]
    load = os.getloadavg()[0]
    print(
        f"{sys.executable}: validate {len(specs)} specs (one process, serial): median {v:.3f} s wall, {v_cpu:.3f} s "
        f"CPU over {args.repeat} cold runs (baseline python + yaml + jsonschema: {b:.3f} s wall, {b_cpu:.3f} s CPU; "
        f"harness's own share {v - b:.3f} s wall); load average {load:.1f} on {os.cpu_count()} CPUs; "
        f"torch imported: {torch_loaded}"
    )


if __name__ == "__main__":
    main()
