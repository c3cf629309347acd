"""Run each distinct setup once per test session, shared by pytest-xdist workers.

The first worker to need a setup takes a file lock, runs it, and writes the observation (or
the run's error) next to the lock; the others wait on the lock and read the file. The key
covers what changes the observation: the resolved setup, the backend and torch's version.

Runs on NCCL also take :func:`one_at_a_time`'s lock for their set of GPUs: every local NCCL run
puts rank r on GPU r, so two xdist workers running different setups at once would share GPUs
(their memory, their NCCL channels) and each would see the other's traffic in its figures.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Callable, Mapping

from filelock import FileLock

from harness.load.setup import RunSetup


class CachedRunError(RuntimeError):
    """The run for this setup failed (in this process or another worker); the text is its error."""


def run_key(setup: RunSetup, backend: str, torch_version: str) -> str:
    """Stable key for (setup, backend, torch version)."""
    blob = json.dumps({"setup": setup.to_dict(), "backend": backend, "torch": torch_version}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def cached_run(
    cache_dir: Path, key: str, run: Callable[[], Mapping[str, Any]], *, lock_timeout_s: float
) -> Mapping[str, Any]:
    """Return the observation for ``key``, calling ``run()`` only if no worker has yet.

    Raises:
        CachedRunError: the run failed, now or earlier in this session (same message each time).
        filelock.Timeout: another worker held the lock longer than ``lock_timeout_s``.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    done, failed = cache_dir / f"{key}.json", cache_dir / f"{key}.error.txt"
    with FileLock(str(cache_dir / f"{key}.lock"), timeout=lock_timeout_s):
        if done.exists():
            return json.loads(done.read_text())
        if failed.exists():
            raise CachedRunError(failed.read_text())
        try:
            observation = run()
        except Exception as exc:  # any run failure is recorded once and shown by every item
            failed.write_text(f"{type(exc).__name__}: {exc}")
            raise CachedRunError(failed.read_text()) from None
        tmp = done.with_suffix(".tmp")
        tmp.write_text(json.dumps(observation))
        tmp.replace(done)
        return observation


def gpu_lock_path(cache_dir: Path, visible_devices: str | None) -> Path:
    """The lock file of the GPUs ``CUDA_VISIBLE_DEVICES=visible_devices`` shows (None: all of them)."""
    name = "all" if visible_devices is None else re.sub(r"[^A-Za-z0-9-]+", "_", visible_devices) or "none"
    return cache_dir / f"gpus-{name[:80]}.lock"


def one_at_a_time(lock_path: Path, run: Callable[[], Mapping[str, Any]], *, lock_timeout_s: float) -> Mapping[str, Any]:
    """``run()`` while holding the file lock ``lock_path``: one run at a time among every process
    that uses the same path (the xdist workers of a session, for one set of GPUs).

    Raises:
        filelock.Timeout: another process held the lock longer than ``lock_timeout_s``.
    """
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock_path), timeout=lock_timeout_s):
        return run()
