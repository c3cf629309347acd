"""busbw of specs/cluster_bandwidth.yaml's rows on this machine, against a plain baseline.

Harness: ``python -m harness run specs/cluster_bandwidth.yaml --backend gloo --json OUT`` as a
cold command, REPEATS times; per row the median busbw (nccl-tests' formula on the recorded
times, harness/language/algbw_busbw.py).

Baseline: a plain ``torch.multiprocessing`` script (no harness) on 4 gloo ranks timing
``dist.all_gather_into_tensor`` and ``dist.reduce_scatter_tensor`` of the walkthrough layer
(2,360,448 bfloat16 elements, 4,720,896 B) the same way: 2 warm-up, a barrier, 5 timed
operations, the mean over ranks; median over REPEATS runs. The two agree when the harness adds
nothing to what it times.

    PYTHONPATH=. python benchmarks/bench_bandwidth.py [--repeats 3]

The machine is shared: figures move with its load; compare the two columns, not runs.
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NUMEL, WORLD, WARMUP, ITERS = 2_360_448, 4, 2, 5


def _baseline_rank(rank: int, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    times = {}
    for op in ("all_gather", "reduce_scatter"):
        if op == "all_gather":
            inp, res = torch.ones(NUMEL // WORLD, dtype=torch.bfloat16), torch.empty(NUMEL, dtype=torch.bfloat16)

            def call(res=res, inp=inp):
                return dist.all_gather_into_tensor(res, inp)
        else:
            inp, res = torch.ones(NUMEL, dtype=torch.bfloat16), torch.empty(NUMEL // WORLD, dtype=torch.bfloat16)

            def call(res=res, inp=inp):
                return dist.reduce_scatter_tensor(res, inp)

        for _ in range(WARMUP):
            call()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(ITERS):
            call()
        times[op] = (time.perf_counter() - t0) / ITERS
    gathered = [None] * WORLD
    dist.all_gather_object(gathered, times)
    if rank == 0:
        Path(out).write_text(json.dumps(gathered))
    dist.destroy_process_group()


def baseline() -> dict[str, float]:
    """busbw (GB/s) per op of one plain run."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "times.json")
        mp.spawn(_baseline_rank, args=(port, out), nprocs=WORLD, join=True)
        per_rank = json.loads(Path(out).read_text())
    s_bytes = NUMEL * 2
    return {
        op: s_bytes / (statistics.fmean(r[op] for r in per_rank)) / 1e9 * (WORLD - 1) / WORLD
        for op in ("all_gather", "reduce_scatter")
    }


def harness() -> tuple[dict[tuple[str, str], float], float]:
    """busbw per (op, row name) of one cold harness run, and the command's wall seconds."""
    sys.path.insert(0, str(REPO))
    from harness.language.algbw_busbw import bandwidth_rows

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run.json")
        t0 = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "harness",
                "run",
                "specs/cluster_bandwidth.yaml",
                "--backend",
                "gloo",
                "--json",
                out,
            ],
            cwd=REPO,
            check=True,
            capture_output=True,
            timeout=900,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        seconds = time.perf_counter() - t0
        obs = json.loads(Path(out).read_text())["observations"]["specs/cluster_bandwidth.yaml"]
    return {(r.op, r.name): r.busbw for r in bandwidth_rows(obs)}, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs, walls, bases = [], [], []
    for _ in range(args.repeats):
        figures, seconds = harness()
        runs.append(figures)
        walls.append(seconds)
        bases.append(baseline())
        print(
            f"run {len(runs)}: harness {seconds:.1f} s, busbw "
            + ", ".join(f"{op} {name} {v:.3f}" for (op, name), v in figures.items())
            + "; plain "
            + ", ".join(f"{op} {v:.3f}" for op, v in bases[-1].items()),
            flush=True,
        )
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {args.repeats} runs; medians; "
        "GB/s = 10^9 B/s"
    )
    print(f"{'op':<15} {'row':<18} {'harness busbw':>14} {'plain busbw':>12}")
    for key in runs[0]:
        plain = statistics.median(b[key[0]] for b in bases) if key[1] == "walkthrough_layer" else None
        shown = "-" if plain is None else f"{plain:.3f}"
        print(f"{key[0]:<15} {key[1]:<18} {statistics.median(r[key] for r in runs):>14.3f} {shown:>12}")
    print(f"cold harness command: median {statistics.median(walls):.1f} s")


if __name__ == "__main__":
    main()
