"""What several test files read, made once per xdist worker instead of once each: a command-line
run, and pytest's ``--help`` with the spec plugin installed."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cli import cli, harness_env
from tests.support.specs import TINY_FAKE_2, write_spec


@dataclass(frozen=True)
class SharedRun:
    """``harness run`` of a 2-rank spec pinned to ``backend: fake``, asked for ``--backend gloo``,
    with ``--no-preflight`` and ``--json``: the process (exit status, stdout, stderr) and the JSON
    document it wrote (None if it wrote none)."""

    proc: subprocess.CompletedProcess
    payload: dict | None


@pytest.fixture(scope="session")
def pinned_fake_run(tmp_path_factory) -> SharedRun:
    """Read by tests/cli/test_backend_pins.py (the pin is kept, with its note) and
    tests/cli/test_bad_inputs.py (--no-preflight reaches the runner; --json is written)."""
    folder: Path = tmp_path_factory.mktemp("pinned-fake")
    out = folder / "out.json"
    proc = cli("run", str(write_spec(folder, TINY_FAKE_2)), "--backend", "gloo", "--no-preflight", "--json", str(out))
    return SharedRun(proc, json.loads(out.read_text()) if out.exists() else None)


@pytest.fixture(scope="session")
def plugin_help(tmp_path_factory) -> str:
    """``pytest --help`` in an empty folder (no conftest.py, no pytest settings: a user's repository
    with this package installed), stdout; read by tests/cli/test_pytest_plugin.py (every option of
    the plugin's group is prefixed) and tests/cli/test_bad_inputs.py (``--fsdp2-no-preflight``)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--help"],
        cwd=tmp_path_factory.mktemp("pytest-help"),
        env=harness_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout
