"""What the state-dict round trip adds to a cold ``python -m harness run``.

Each measurement is a fresh process from a shell, timed from start to exit: the run of
``specs/state_dict_3_ranks.yaml``'s setup (3 gloo ranks, one tiny layer, AdamW) with its
round trip and the reload on 2 ranks, paired run by run with the baseline, the same setup
without ``state_dict`` (no checkpoint). Both specs hold one ``params_total`` entry, written to
a temporary folder. Medians of ``--repeat`` pairs are printed, and the ranks' own
``state_dict`` phase time from the observation (``timings_s``).

Run: ``python benchmarks/bench_state_dict.py [--repeat 3]``. Not a test: figures depend on the
machine's load (say how loaded it was when you report them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def spec_text(setup: dict, name: str) -> str:
    return yaml.safe_dump(
        {
            "spec": name,
            "title": name,
            "document": "benchmark",
            "backend": "gloo",
            "setup": setup,
            "tables": [
                {
                    "section": "每个 rank 上的参数分片",
                    "check": "params_total",
                    "entries": [{"id": "layer", "layer": 0, "numel": 37024}],
                }
            ],
        },
        allow_unicode=True,
        sort_keys=False,
    )


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with open(os.path.join(ROOT, "specs", "state_dict_3_ranks.yaml"), encoding="utf-8") as f:
        setup = yaml.safe_load(f)["setup"]
    baseline_setup = {k: v for k, v in setup.items() if k != "state_dict"}
    with tempfile.TemporaryDirectory() as tmp:
        with_sd, without = os.path.join(tmp, "with.yaml"), os.path.join(tmp, "without.yaml")
        open(with_sd, "w", encoding="utf-8").write(spec_text(setup, "with_state_dict"))
        open(without, "w", encoding="utf-8").write(spec_text(baseline_setup, "without_state_dict"))
        out = os.path.join(tmp, "obs.json")
        cmd = lambda path: [sys.executable, "-m", "harness", "run", path, "--json", out]  # noqa: E731
        timed(cmd(without))  # writes the bytecode caches and starts nothing else: not measured
        pairs = [(timed(cmd(with_sd)), timed(cmd(without))) for _ in range(args.repeat)]
        timed(cmd(with_sd))
        observation = json.load(open(out, encoding="utf-8"))["observations"][with_sd]
        phase = [r["timings_s"].get("state_dict", 0.0) for r in observation["ranks"]]
    w = statistics.median(p[0] for p in pairs)
    b = statistics.median(p[1] for p in pairs)
    print(
        f"cold harness run, 3 gloo ranks: with round trip + reload on 2: median {w:.1f} s; "
        f"without state_dict: {b:.1f} s; difference {w - b:.1f} s over {args.repeat} pairs; "
        f"ranks' state_dict phase in one more run: {', '.join(f'{t:.2f}' for t in phase)} s; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )


if __name__ == "__main__":
    main()
