"""Run each distinct setup once per test session, shared by pytest-xdist workers.

The first worker to need a setup takes a file lock, runs it and writes the observation (or error)
beside the lock; the others read it, running another setup meanwhile rather than waiting. The key
is the resolved setup (hooks digest and instruments included), the backend and torch's version.
NCCL runs also take :func:`one_at_a_time`'s lock per set of GPUs (docs/testing.md, "The spec plugin")."""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from filelock import FileLock, Timeout

from harness.load.setup import RunSetup


class CachedRunError(RuntimeError):
    """The run for this setup failed (in this process or another worker); the text is its error."""


def run_key(setup: RunSetup, backend: str, torch_version: str) -> str:
    """Stable key for (setup, backend, torch version)."""
    blob = json.dumps({"setup": setup.to_dict(), "backend": backend, "torch": torch_version}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def cached_run(
    cache_dir: Path,
    key: str,
    run: Callable[[], Mapping[str, Any]],
    *,
    lock_timeout_s: float,
    meanwhile: Iterable[tuple[str, Callable[[], Mapping[str, Any]]]] = (),
    served_by: Iterable[str] = (),
) -> Mapping[str, Any]:
    """The observation for ``key``, calling ``run()`` only if no worker has and no key of ``served_by``
    (runs holding everything ``key``'s would) has one recorded. While another process holds ``key``'s
    lock, runs the next free ``(key, run)`` of ``meanwhile``, then looks again; none left, it waits.
    Raises CachedRunError (the run failed, now or earlier: the same message) or filelock.Timeout
    (held longer than ``lock_timeout_s``)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    served_by = tuple(served_by)
    served = _served(cache_dir, served_by)
    if served is not None:
        return served
    deadline = time.monotonic() + lock_timeout_s
    lock = FileLock(str(cache_dir / f"{key}.lock"))
    others = iter(meanwhile)
    while not _acquired(lock, 0):
        if not any(other != key and _ran_if_free(cache_dir, other, other_run) for other, other_run in others):
            lock.acquire(timeout=max(deadline - time.monotonic(), 0))
            break
    try:
        served = _served(cache_dir, served_by)  # recorded while this process waited
        return served if served is not None else _recorded_run(cache_dir, key, run)
    finally:
        lock.release()


def _served(cache_dir: Path, keys: tuple[str, ...]) -> Mapping[str, Any] | None:
    """The first recorded observation of ``keys`` (written whole by a rename: no lock needed)."""
    for key in keys:
        done = cache_dir / f"{key}.json"
        if done.exists():
            return json.loads(done.read_text())
    return None


def _acquired(lock: FileLock, timeout: float) -> bool:
    try:
        lock.acquire(timeout=timeout)
    except Timeout:
        return False
    return True


def _ran_if_free(cache_dir: Path, key: str, run: Callable[[], Mapping[str, Any]]) -> bool:
    """Run and record ``key`` if no process has run or is running it; whether this call ran it."""
    lock = FileLock(str(cache_dir / f"{key}.lock"))
    if not _acquired(lock, 0):
        return False
    try:
        if _recorded(cache_dir, key):
            return False
        try:
            _recorded_run(cache_dir, key, run)
        except CachedRunError:
            pass  # recorded: the items of that setup show it
        return True
    finally:
        lock.release()


def _recorded(cache_dir: Path, key: str) -> bool:
    return (cache_dir / f"{key}.json").exists() or (cache_dir / f"{key}.error.txt").exists()


def _recorded_run(cache_dir: Path, key: str, run: Callable[[], Mapping[str, Any]]) -> Mapping[str, Any]:
    """Under ``key``'s lock: the recorded observation (or error), else ``run()``'s, recorded."""
    done, failed = cache_dir / f"{key}.json", cache_dir / f"{key}.error.txt"
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
    """``run()`` holding the file lock ``lock_path`` (filelock.Timeout after ``lock_timeout_s``)."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock_path), timeout=lock_timeout_s):
        return run()
