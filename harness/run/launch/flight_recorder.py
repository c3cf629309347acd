"""PyTorch's NCCL flight recorder in local NCCL ranks: enabled before the process group, dumped on a hang.

Each rank keeps ``TORCH_NCCL_TRACE_BUFFER_SIZE`` entries; on a timeout the launcher asks every
rank for its dump through the rank's debug pipe and names the files (read them with
``torchfrtrace <folder>``). On gloo no rank opens a pipe and nothing is dumped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time

__all__ = ["FLIGHT_RECORDER_PREFIX", "make_folder", "enable", "dump", "clean_up"]

FLIGHT_RECORDER_PREFIX = "nccl_trace_rank_"
"""File name of a rank's NCCL flight recorder dump, followed by the rank."""


def make_folder() -> str:
    """A fresh folder for one run's dumps; it outlives the run when a dump was written (:func:`clean_up`)."""
    return tempfile.mkdtemp(prefix="fsdp2-flight-recorder-")


def enable(folder: str) -> None:
    """In a NCCL rank, before init_process_group: keep PyTorch's flight recorder
    (``TORCH_NCCL_TRACE_BUFFER_SIZE`` entries), dump it to ``folder/nccl_trace_rank_<r>`` and
    open the pipe ``folder/pipe_<r>.pipe`` through which the launcher asks for a dump on a hang
    (``TORCH_NCCL_DEBUG_INFO_PIPE_FILE``). Variables the user set are kept."""
    prefix = os.path.join(folder, FLIGHT_RECORDER_PREFIX)
    for name, value in (
        ("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"),
        ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1"),
        ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", prefix),
        ("TORCH_FR_DUMP_TEMP_FILE", prefix),
        ("TORCH_NCCL_DEBUG_INFO_PIPE_FILE", os.path.join(folder, "pipe_")),
    ):
        os.environ.setdefault(name, value)


def dump(folder: str, world_size: int, wait_s: float = 5.0) -> list[str]:
    """Ask each NCCL rank for its flight recorder dump (write to its pipe), wait for the files.

    Returns the dump files written (none on gloo: no rank opened a pipe)."""
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
