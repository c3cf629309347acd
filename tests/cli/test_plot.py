"""``--plot`` without a usable matplotlib, as a subprocess: one line, exit 2, before any rank starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.report.plot import INSTALL_HINT
from tests.support import REPO as ROOT
from tests.support import WALKTHROUGH


def test_cli_without_matplotlib_stops_before_running(tmp_path):
    code = (
        "import sys; sys.modules['matplotlib'] = None; from harness.cli import main; "
        f"sys.exit(main(['run', {str(WALKTHROUGH)!r}, '--plot', {str(tmp_path)!r}]))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout.strip().splitlines() == [f"✗ {INSTALL_HINT}"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["run", "render"])
def test_cli_with_a_matplotlib_that_fails_to_import_stops_before_running(tmp_path, command):
    """An installed matplotlib that cannot be imported (here a stand-in package raising ImportError,
    as a copy built against another numpy does) is found before any rank starts: one line, exit 2,
    no traceback, nothing written. Looking the package up without importing it let the run go on
    and end in a traceback after the step."""
    broken = tmp_path / "site" / "matplotlib"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise ImportError("numpy.core.multiarray failed to import")\n')
    out = tmp_path / "plots"
    env = {**os.environ, "PYTHONPATH": f"{broken.parent}{os.pathsep}{ROOT}"}
    proc = subprocess.run(
        [sys.executable, "-m", "harness", command, str(WALKTHROUGH), "--plot", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert lines == [
        "✗ matplotlib is installed but cannot be imported (ImportError: numpy.core.multiarray failed "
        "to import): --plot needs it (pip install --force-reinstall matplotlib)"
    ], lines
    assert not out.exists()
