"""Simulated worlds to 131,072 ranks: whole cold processes, against the pre-flight estimate and the calculator.

``python benchmarks/bench_simulated_worlds.py [--repeat 3] [--case 32b|moe|all]``

Each measurement is a fresh Python process, timed by this script from its start to its exit: it
imports the harness, runs ``run_setup(setup, backend="fake")`` with the pre-flight check on (the
run's own estimate of time and memory, ``harness.run.preflight.simulation_estimate``) and every
recorder on, then compares each simulated rank's parameters (local and full shapes) and the
layer's collectives (op, dtype, sizes, bytes, group) with ``harness.calculator``'s
closed-form tables, computed in the same process after the run (neither side reads the other).

Cases:

- ``32b``: one Qwen3-32B layer (bfloat16, B=1, L=16) at 65,536 ranks, rank 0 simulated. Bound
  (issue 42): 10 s, whole cold process, on this 2-core machine.
- ``moe``: one Qwen3-235B-A22B layer (128 experts) at 131,072 ranks, ranks 0 (one expert) and
  131,071 (none) simulated. Must run and agree with the calculator.

Printed per case (on a shared machine the CPU time is the figure the others' load leaves alone;
the wall time is the bound's): the medians of wall and CPU time (user + system, ``getrusage``) and peak RSS
over ``--repeat`` runs, the rank's phase timings, the pre-flight estimate (s, bytes), and whether
every compared value agreed. The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CASES = {
    "32b": {"config": "Qwen3-32B", "world": 65_536, "observe": [0], "bound_s": 10.0},
    "moe": {"config": "Qwen3-235B-A22B", "world": 131_072, "observe": [0, 131_071], "bound_s": None},
}

CHILD = """
import json, sys
from harness import calculator as calc
from harness.language.observed import ring_bytes
from harness.load.setup import ModelSetup, RunSetup
from harness.run.preflight import simulation_estimate
from harness.run.runner import run_setup
from model import get_config

config, world, observe = sys.argv[1], int(sys.argv[2]), [int(r) for r in sys.argv[3].split(",")]
setup = RunSetup(
    model=ModelSetup(config=config, overrides={"num_hidden_layers": 1}, dtype="bfloat16"),
    mesh_shape=(world,), batch_per_rank=1, seq_len=16, observe_ranks=tuple(observe),
)
est = simulation_estimate(setup)
doc = run_setup(setup, backend="fake", timeout_s=3600)
tables = calc.layer_tables(get_config(config, num_hidden_layers=1), world, storage_dtype="bfloat16")
wrong = []
for entry in doc["ranks"]:
    r = entry["rank"]
    params = {p["fqn"].removeprefix("layers.0."): p for p in entry["params"]}
    if sorted(params) != sorted(p.name for p in tables.params):
        wrong.append(f"rank {r}: parameters {sorted(params)}")
    for p in tables.params:
        got = params.get(p.name, {})
        if tuple(got.get("local_shape", ())) != p.local_shapes[r] or tuple(got.get("full_shape", ())) != p.full_shape:
            wrong.append(f"rank {r}: {p.name} {got.get('local_shape')} != {list(p.local_shapes[r])}")
    by = {(c["phase"], c["op"]): c for c in entry["collectives"] if c["unit"] == "layers.0"}
    if len(by) != len(tables.collectives):
        wrong.append(f"rank {r}: {len(by)} layer collectives, calculator {len(tables.collectives)}")
    for expected in tables.collectives:
        got = by.get((expected.phase, expected.op))
        fields = {k: v for k, v in expected.fields().items() if k != "ring_bytes"}
        if got is None or {k: got.get(k) for k in fields} != fields or ring_bytes(got) != expected.ring_bytes:
            wrong.append(f"rank {r}: {expected.phase} {expected.op}: {got and {k: got.get(k) for k in fields}}")
gather = tables.collective("all_gather", "forward")
print(json.dumps({
    "timings": {e["rank"]: e["timings_s"] for e in doc["ranks"]},
    "estimate_s": est.seconds, "estimate_bytes": est.bytes,
    "compared": len(doc["ranks"]) * (len(tables.params) + len(tables.collectives)), "wrong": wrong,
    "all_gather_numel_out": gather.numel_out,
}))
"""


def cold(case: dict) -> dict:
    """One whole process: wall and CPU seconds, peak RSS (bytes), and what the child printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, case["config"], str(case["world"]), ",".join(map(str, case["observe"]))],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=ROOT),
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{case['config']} at {case['world']:,} ranks: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "rss": after.ru_maxrss * 1024, **json.loads(proc.stdout.strip().splitlines()[-1])}


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=[*CASES, "all"], default="all")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {load()}")
    for name in CASES if args.case == "all" else [args.case]:
        case = CASES[name]
        runs = [cold(case) for _ in range(args.repeat)]
        med = {k: statistics.median(r[k] for r in runs) for k in ("wall", "cpu")}
        last = runs[-1]
        bound = ""
        if case["bound_s"] is not None:
            met = {k: "met" if med[k] <= case["bound_s"] else "NOT met" for k in ("wall", "cpu")}
            bound = f" (bound {case['bound_s']:g} s: wall {met['wall']}, cpu {met['cpu']})"
        print(
            f"{name}: {case['config']} layer at {case['world']:,} ranks, simulated {case['observe']}: "
            f"wall {med['wall']:.1f} s, cpu {med['cpu']:.1f} s (median of {len(runs)}){bound}"
        )
        print(f"  walls {[round(r['wall'], 1) for r in runs]}; peak RSS (largest child) {last['rss'] / 1e6:.0f} MB")
        print(f"  pre-flight estimate: {last['estimate_s']:.1f} s, {last['estimate_bytes'] / 1e6:.0f} MB")
        for rank, timings in last["timings"].items():
            print(f"  rank {rank}: " + ", ".join(f"{k} {v:.2f}" for k, v in timings.items()))
        agreed = "every one agrees" if not last["wrong"] else f"{len(last['wrong'])} differ: {last['wrong'][:5]}"
        print(f"  calculator: {last['compared']} values compared, {agreed}")
        print(f"  all-gather output {last['all_gather_numel_out']:,} elements")
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
