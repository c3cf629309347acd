"""Peak memory of each rank process of one spec's run, against the pre-flight estimate.

    python benchmarks/bench_rank_memory.py specs/qwen3_walkthrough.yaml

Samples every 50 ms the forkserver's children (the rank processes) from
``/proc/<pid>/smaps_rollup``: RSS, PSS (shared pages divided among their users: torch's
libraries are shared with the forkserver) and private bytes; prints each rank's peaks, the peak
of all ranks' PSS together, and ``harness.run.preflight.estimate``'s parts. Runs the spec on
gloo with the pre-flight check off. Not a test: figures depend on the machine and its load.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from harness.load.spec import load_spec
from harness.run.launch import forkserver
from harness.run.preflight import describe, estimate
from harness.run.runner import run_setup


def _ranks() -> list[int]:
    from multiprocessing import forkserver

    server = forkserver._forkserver._forkserver_pid
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == server:
                        out.append(int(entry))
            except OSError:
                continue
    return out


def _sample(pid: int) -> dict[str, int]:
    values = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, value = line.split(":", 1)
                if key in ("Rss", "Pss", "Private_Clean", "Private_Dirty"):
                    values[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return values


def main() -> None:
    spec = load_spec(sys.argv[1])
    peaks: dict[int, dict[str, int]] = {}
    total = [0]
    done = threading.Event()

    def monitor() -> None:
        while not done.is_set():
            together = 0
            for pid in _ranks():
                v = _sample(pid)
                if not v:
                    continue
                p = peaks.setdefault(pid, {"rss": 0, "pss": 0, "private": 0})
                p["rss"] = max(p["rss"], v["Rss"])
                p["pss"] = max(p["pss"], v["Pss"])
                p["private"] = max(p["private"], v.get("Private_Clean", 0) + v.get("Private_Dirty", 0))
                together += v["Pss"]
            total[0] = max(total[0], together)
            time.sleep(0.05)

    forkserver.forkserver_context()
    thread = threading.Thread(target=monitor, daemon=True)
    thread.start()
    started = time.perf_counter()
    run_setup(spec.setup, backend="gloo", timeout_s=1800, preflight=False)
    done.set()
    thread.join()
    print(f"{sys.argv[1]}: {time.perf_counter() - started:.1f} s")
    print("estimate per rank (MB):", {k: round(v / 1e6) for k, v in describe(estimate(spec.setup)).items()})
    for pid, p in sorted(peaks.items()):
        print(f"rank process {pid}: peak MB", {k: round(v / 1e6) for k, v in p.items()})
    print(f"all ranks' PSS together, peak: {total[0] / 1e6:,.0f} MB")


if __name__ == "__main__":
    main()
