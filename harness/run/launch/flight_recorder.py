"""PyTorch's NCCL flight recorder in local NCCL ranks: enabled before the process group, dumped on a hang.

Each rank keeps 2,000 entries; on a timeout the launcher asks every rank for its dump through its
debug pipe and names the files (``torchfrtrace <folder>`` reads them). Nothing on gloo."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import tempfile
import time
from collections.abc import Mapping
from typing import Any

__all__ = [
    "FLIGHT_RECORDER_PREFIX",
    "BUFFER_ENTRIES",
    "buffer_size_variable",
    "buffer_size_environment",
    "make_folder",
    "enable",
    "dump",
    "clean_up",
    "oldest_not_completed",
    "device_view",
]

FLIGHT_RECORDER_PREFIX = "nccl_trace_rank_"
"""File name of a rank's NCCL flight recorder dump, followed by the rank."""


BUFFER_ENTRIES = 2000
"""Collectives each rank's flight recorder keeps."""

_BUFFER_SIZE_VARIABLES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")


def buffer_size_variable(torch_version: str | None = None) -> str:
    """The variable sizing the flight recorder in ``torch_version`` (default: the installed one, from its
    metadata): ``TORCH_FR_BUFFER_SIZE`` from 2.11, ``TORCH_NCCL_TRACE_BUFFER_SIZE`` before."""
    if torch_version is None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            torch_version = version("torch")
        except PackageNotFoundError:
            return _BUFFER_SIZE_VARIABLES[0]
    from packaging.version import InvalidVersion, Version

    try:
        release = Version(torch_version.split("+")[0]).release
    except InvalidVersion:
        return _BUFFER_SIZE_VARIABLES[0]
    return _BUFFER_SIZE_VARIABLES[0] if release[:2] >= (2, 11) else _BUFFER_SIZE_VARIABLES[1]


def buffer_size_environment(torch_version: str | None = None) -> dict[str, str]:
    """``{variable: "2000"}``, or nothing where the user set either name."""
    if any(name in os.environ for name in _BUFFER_SIZE_VARIABLES):
        return {}
    return {buffer_size_variable(torch_version): str(BUFFER_ENTRIES)}


def make_folder() -> str:
    """A fresh folder for one run's dumps; it outlives the run when a dump was written (:func:`clean_up`)."""
    return tempfile.mkdtemp(prefix="fsdp2-flight-recorder-")


def enable(folder: str) -> None:
    """In a NCCL rank, before init_process_group: keep :data:`BUFFER_ENTRIES` entries, dump to
    ``folder/nccl_trace_rank_<r>`` on request through ``folder/pipe_<r>.pipe``; the user's variables kept."""
    prefix = os.path.join(folder, FLIGHT_RECORDER_PREFIX)
    for name, value in (
        *buffer_size_environment().items(),
        ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1"),
        ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", prefix),
        ("TORCH_FR_DUMP_TEMP_FILE", prefix),
        ("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", os.path.join(folder, "pipe_")),
    ):
        os.environ.setdefault(name, value)


def dump(folder: str, world_size: int, wait_s: float = 5.0) -> list[str]:
    """Ask each NCCL rank for its dump through its pipe; the files written (none on gloo)."""
    asked = []
    for rank in range(world_size):
        pipe = os.path.join(folder, f"pipe_{rank}.pipe")
        if not os.path.exists(pipe):
            continue
        try:
            fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # no reader: the rank is gone
            continue
        try:
            os.write(fd, b"1\n")
            asked.append(os.path.join(folder, f"{FLIGHT_RECORDER_PREFIX}{rank}"))
        finally:
            os.close(fd)
    deadline = time.monotonic() + (wait_s if asked else 0)
    while asked and time.monotonic() < deadline and not all(os.path.exists(p) for p in asked):
        time.sleep(0.1)
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.startswith(FLIGHT_RECORDER_PREFIX))


def clean_up(folder: str) -> None:
    """After the run: keep the dumps for torchfrtrace and remove the pipes; no dump, no folder."""
    kept = [n for n in os.listdir(folder) if n.startswith(FLIGHT_RECORDER_PREFIX)]
    if not kept:
        shutil.rmtree(folder, ignore_errors=True)
        return
    for name in set(os.listdir(folder)) - set(kept):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(folder, name))


def _entry_done(entry: Mapping[str, Any]) -> bool:
    return entry.get("state") == "completed" or bool(entry.get("retired"))


def oldest_not_completed(dump: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The first entry of one rank's dump (a dict with ``entries``) the device has not finished, or None."""
    entries = sorted(dump.get("entries") or [], key=lambda e: e.get("record_id", 0))
    return next((e for e in entries if not _entry_done(e)), None)


def _describe(entry: Mapping[str, Any]) -> str:
    group = entry.get("process_group")
    group = group[1] if isinstance(group, (list, tuple)) and len(group) > 1 else group
    return (
        f"{entry.get('profiling_name', '?')} #{entry.get('collective_seq_id', '?')} (group {group}, "
        f"state {entry.get('state', '?')}, input sizes {entry.get('input_sizes', '?')})"
    )


def _load(path: str) -> Any:
    """A dump as torch writes it: pickled by default, JSON where the user asked for JSON."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return pickle.loads(data)
    except Exception:  # noqa: BLE001 - not a pickle: the JSON dump
        return json.loads(data)


def device_view(dumps: list[str]) -> list[str]:
    """One line per dump file: the oldest collective the rank's device has not completed, which the
    hang recorder cannot see for a synchronous op. A file that cannot be read says so."""
    lines = []
    for path in sorted(dumps, key=lambda p: (len(p), p)):
        rank = os.path.basename(path).removeprefix(FLIGHT_RECORDER_PREFIX)
        try:
            dump = _load(path)
        except Exception as exc:  # noqa: BLE001 - a partial or foreign file: say so, do not stop the diagnosis
            lines.append(f"rank {rank} on the device (flight recorder): unreadable dump ({type(exc).__name__})")
            continue
        oldest = oldest_not_completed(dump) if isinstance(dump, Mapping) else None
        said = (
            f"oldest not completed {_describe(oldest)}" if oldest is not None else "every recorded collective completed"
        )
        lines.append(f"rank {rank} on the device (flight recorder): {said}")
    return lines
