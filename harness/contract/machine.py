"""What this machine offers a run, torch-free: the CPUs this process may use (the pre-flight
check's process limit is a multiple of them)."""

from __future__ import annotations

import os

__all__ = ["usable_cpus"]


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one, else ``os.cpu_count``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1
