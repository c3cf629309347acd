"""Simulated ranks: one Qwen3-32B decoder layer at 64, 256, 1024 and 4096 fake ranks.

Each run is ``run_setup(setup, backend="fake")`` in this process: the fake process group and
FakeTensorMode, ``fully_shard`` on the layer and the root, forward, backward and an SGD step,
with every recorder on (collectives + FSDP labels, FSDPMemTracker, parameter states, step
shapes), the document validated. Printed per world size: the wall time of the whole call and
the rank's phase timings. The first call in a process also pays one-time imports
(FakeTensorMode imports torch._dynamo); it is printed separately as "cold".

Target: at most 5 s for the 1024-rank layer, forward+backward recorded, on this
2-core machine.

Run: ``python benchmarks/bench_fake.py [--layers N]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=1, help="num_hidden_layers override (default 1)")
    parser.add_argument("--world-sizes", default="64,256,1024,4096")
    args = parser.parse_args()

    t0 = time.perf_counter()
    from harness.run.runner import run_setup
    from harness.load.setup import ModelSetup, RunSetup

    print(f"import harness: {time.perf_counter() - t0:.2f} s")

    def setup(world: int) -> RunSetup:
        return RunSetup(model=ModelSetup(config="Qwen3-32B", overrides={"num_hidden_layers": args.layers}), mesh_shape=(world,))

    start = time.perf_counter()
    run_setup(setup(1024), backend="fake")
    print(f"cold (first call in this process), 1024 ranks: {time.perf_counter() - start:.2f} s")
    for world in [int(w) for w in args.world_sizes.split(",")]:
        start = time.perf_counter()
        doc = run_setup(setup(world), backend="fake")
        wall = time.perf_counter() - start
        rank = doc["ranks"][0]
        t = rank["timings_s"]
        ag = next(c for c in rank["collectives"] if c["op"] == "all_gather")
        phases = ", ".join(f"{k} {t[k]:.2f}" for k in ("setup", "forward", "backward", "optimizer", "observe") if k in t)
        print(
            f"{world:5d} ranks: {wall:.2f} s ({phases}); {len(rank['collectives'])} collectives, "
            f"all-gather out {ag['numel_out']:,} elements"
        )


if __name__ == "__main__":
    main()
