"""The command line as a subprocess, as a user runs it (exit status, stdout, stderr)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support import REPO


def harness_env(**extra: str) -> dict[str, str]:
    """This environment with the checkout first on PYTHONPATH, plus ``extra``."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, PYTHONPATH=path, **extra)


def cli(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m harness ARGS`` in the checkout; ``env`` is added to :func:`harness_env`."""
    environ = harness_env()
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], capture_output=True, text=True, cwd=REPO, timeout=timeout, env=environ
    )


def no_traceback(proc: subprocess.CompletedProcess) -> None:
    """A bad input ends in clear lines, never a Python traceback."""
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
