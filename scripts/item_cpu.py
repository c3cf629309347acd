"""CPU-seconds per test item, under xdist too: where the suite's time goes when both cores are busy.

Wall time per item (``--durations``) misleads on a 2-core machine: an item's wall includes the
other worker's load. This pytest plugin records, for each item, the CPU its worker and every
process it started used during the item: the worker's own and reaped children's rusage, plus
each live descendant's own and reaped-children CPU from ``/proc/<pid>/stat``
(:mod:`tests.support.processes`). That counts the ranks a worker's forkserver forked (reaped by
the forkserver, which lives past the item) and the CLIs, torchrun agents and pytest subprocesses
a test started. A child that ended but is not yet reaped counts at the item that reaps it.
Linux only (reads ``/proc``).

Record (one JSON line per item: node id, CPU s, wall s, worker), then summarise per file::

    ITEM_CPU_LOG=/tmp/items.jsonl PYTHONPATH=scripts python -m pytest -p item_cpu -p no:cacheprovider -n auto
    python scripts/item_cpu.py /tmp/items.jsonl

Not a test and not loaded by the suite: the figures depend on the machine and its load.
"""

from __future__ import annotations

import collections
import json
import os
import resource
import sys
import time
from pathlib import Path

import pytest

from tests.support.processes import descendants, stat

_TICKS = os.sysconf("SC_CLK_TCK")


def _descendants_cpu(root: int) -> float:
    """CPU s of the live descendants of ``root``: each one's own plus its reaped children's."""
    total = 0.0
    for pid in descendants(root):
        fields = stat(pid)  # after the command: state, ppid, ... utime (14th field), stime, cutime, cstime
        total += sum(int(v) for v in fields[11:15]) / _TICKS if fields else 0.0
    return total


def _cpu_s() -> float:
    own, reaped = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    rusage = own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime
    return rusage + _descendants_cpu(os.getpid())


def pytest_configure(config):
    if not os.environ.get("ITEM_CPU_LOG"):
        raise pytest.UsageError("item_cpu: set ITEM_CPU_LOG to the file the per-item records are appended to")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, start = _cpu_s(), time.monotonic()
    yield
    record = {
        "id": item.nodeid,
        "cpu_s": round(_cpu_s() - cpu, 3),
        "wall_s": round(time.monotonic() - start, 3),
        "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
    }
    with open(os.environ["ITEM_CPU_LOG"], "a") as f:
        f.write(json.dumps(record) + "\n")


def summarise(path: str, top: int = 30) -> None:
    """Print CPU s and wall s per test file (the spec items together, the unit tests together)."""
    records = [json.loads(line) for line in Path(path).read_text().splitlines()]
    groups: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for r in records:
        name = r["id"].split("::")[0]
        name = "specs/*" if name.startswith("specs/") else "tests/unit/*" if name.startswith("tests/unit/") else name
        groups[name][0] += 1
        groups[name][1] += r["cpu_s"]
        groups[name][2] += r["wall_s"]
    print(f"{len(records)} items, {sum(r['cpu_s'] for r in records):.1f} CPU s")
    for name, (count, cpu, wall) in sorted(groups.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"{cpu:8.1f} CPU s {wall:8.1f} wall s {count:5d} items  {name}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/item_cpu.py ITEMS.jsonl")
    summarise(sys.argv[1])
