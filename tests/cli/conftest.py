"""The command-line run that several test files read: one launch per xdist worker, not one each."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cli import cli
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
