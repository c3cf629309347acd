"""Processes as Linux's /proc shows them: the CLI's descendants (its forkserver and ranks), which
of them still run, and their names; shared by tests/cli/test_interrupt.py and
scripts/try_bad_inputs.py. Every function reads /proc at the call and holds nothing."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["stat", "live_processes", "descendants", "running", "cmdline", "comm"]


def stat(pid: int | str) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state, ppid, pgrp, session, ...); None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def live_processes() -> dict[int, list[str]]:
    """Every live (not zombie) process: pid -> its /proc stat fields."""
    found = {}
    for entry in os.listdir("/proc"):
        fields = stat(entry) if entry.isdigit() else None
        if fields is not None and fields[0] != "Z":
            found[int(entry)] = fields
    return found


def descendants(pid: int) -> list[int]:
    """The live descendants of ``pid``, children before their own children."""
    kids: dict[int, list[int]] = {}
    for child, fields in live_processes().items():
        kids.setdefault(int(fields[1]), []).append(child)
    out, todo = [], [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def running(pids: list[int]) -> list[int]:
    """Those of ``pids`` that still run (neither gone nor zombies)."""
    return [pid for pid in pids if (fields := stat(pid)) is not None and fields[0] != "Z"]


def cmdline(pid: int) -> bytes:
    """The process's command line (NUL-separated), b"" if gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def comm(pid: int) -> str:
    """The process's name (its thread name as set with prctl), "" if gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
