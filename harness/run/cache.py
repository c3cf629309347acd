"""Run each distinct setup once per test session, shared by pytest-xdist workers.

The first worker to need a setup takes a file lock, runs it, and writes the observation (or
the run's error) next to the lock; the others wait on the lock and read the file. The key
covers what changes the observation: the resolved setup, the backend and torch's version.
"""

from __future__ import annotations

import hashlib
import json
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


def cached_run(cache_dir: Path, key: str, run: Callable[[], Mapping[str, Any]], *, lock_timeout_s: float) -> Mapping[str, Any]:
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
