"""Simulated ranks: one Qwen3-32B decoder layer, forward + backward + step, cold processes.

Each measurement is a fresh Python process, timed from its start to its exit by this script:
it imports the harness (torch, FSDP2, FakeTensorMode), runs ``run_setup(setup,
backend="fake")`` for one Qwen3-32B layer (bfloat16, B=1, L=16, SGD) at the world size (rank 0
simulated: the fake process group and FakeTensorMode, ``fully_shard`` on the layer and the
root, forward, backward and the optimizer step with every recorder on: collectives + FSDP
labels, FSDPMemTracker, parameter states, step shapes; the document validated) and exits.
Printed per world size: the median wall time and CPU time (user + system, from
``getrusage``) of the whole process, and the rank's own phase timings from the document.

``--baseline DIR`` times another checkout (e.g. ``git worktree add /tmp/base main``) the same
way, alternating with this one (this tree, baseline, this tree, ...), so both see the same
machine load; medians of ``--repeat`` rounds. The load average is printed before and after.

Targets (issue 12): 4096 ranks <= 3 s and 16,384 ranks <= 10 s, whole cold process.

Run: ``python benchmarks/bench_fake.py [--world-sizes 1024,4096,16384] [--repeat 3]
[--baseline DIR] [--layers N]``.
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
TARGETS_S = {4096: 3.0, 16384: 10.0}

CHILD = """
import json, sys
from harness.run.runner import run_setup
from harness.load.setup import ModelSetup, RunSetup
world, layers = int(sys.argv[1]), int(sys.argv[2])
setup = RunSetup(model=ModelSetup(config="Qwen3-32B", overrides={"num_hidden_layers": layers}),
                 mesh_shape=(world,))
doc = run_setup(setup, backend="fake", timeout_s=3600)
rank = doc["ranks"][0]
gather = next(c for c in rank["collectives"] if c["op"] == "all_gather")
print(json.dumps({"timings": rank["timings_s"], "collectives": len(rank["collectives"]),
                  "all_gather_numel_out": gather["numel_out"]}))
"""


def cold(tree: str, world: int, layers: int) -> dict:
    """One whole process on ``tree``: wall and CPU seconds, and what the child printed."""
    env = dict(os.environ, PYTHONPATH=tree)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(world), str(layers)], cwd=tree, env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{tree}, {world} ranks: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, **json.loads(proc.stdout.strip().splitlines()[-1])}


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-sizes", default="1024,4096,16384")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--layers", type=int, default=1, help="num_hidden_layers override (default 1)")
    parser.add_argument("--baseline", help="another checkout to time the same way, alternating")
    args = parser.parse_args()
    trees = {"this": ROOT}
    if args.baseline:
        trees["baseline"] = os.path.abspath(args.baseline)
    worlds = [int(w) for w in args.world_sizes.split(",")]
    print(f"load average (1, 5, 15 min) before: {load()}; {os.cpu_count()} CPUs", flush=True)
    runs: dict[tuple[str, int], list[dict]] = {}
    for i in range(args.repeat):
        for world in worlds:
            for name, tree in trees.items():
                r = cold(tree, world, args.layers)
                runs.setdefault((name, world), []).append(r)
                print(
                    f"round {i + 1}: {name:8s} {world:6d} ranks: wall {r['wall']:6.2f} s, cpu {r['cpu']:6.2f} s "
                    f"(load {load()})",
                    flush=True,
                )
    print(f"load average after: {load()}")
    print(f"\nmedians of {args.repeat} cold processes, one Qwen3-32B layer x {args.layers}, rank 0 simulated:")
    for world in worlds:
        for name in trees:
            rs = runs[name, world]
            wall = statistics.median(r["wall"] for r in rs)
            cpu = statistics.median(r["cpu"] for r in rs)
            t = {k: statistics.median(r["timings"][k] for r in rs) for k in rs[0]["timings"]}
            phases = ", ".join(
                f"{k} {t[k]:.2f}" for k in ("setup", "forward", "backward", "optimizer", "observe") if k in t
            )
            target = f" (target <= {TARGETS_S[world]:g} s)" if world in TARGETS_S else ""
            print(
                f"{name:8s} {world:6d} ranks: wall {wall:6.2f} s{target}, cpu {cpu:6.2f} s; rank step {t['total']:.2f} s "
                f"({phases}); {rs[0]['collectives']} collectives, all-gather out {rs[0]['all_gather_numel_out']:,} elements"
            )


if __name__ == "__main__":
    main()
