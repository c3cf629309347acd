"""scripts/gpu_suite on this CPU machine: gpu_check (every check SKIP: no GPU), the observation-cost
benchmark (not run: no CUDA device), then a part of the
suite (GPU_SUITE_PYTEST_ARGS: two tests here, one failing), and the figures it writes: the
gpu_check table, the suite's counts and failed ids, each part's seconds, exit 1 for the failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.support import REPO

TESTS = """
def test_holds():
    assert True


def test_breaks():
    assert 1 == 2
"""


def test_the_suite_s_figures_and_its_failure(tmp_path):
    tests = tmp_path / "test_two.py"
    tests.write_text(TESTS)
    out = tmp_path / "out"
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(tmp_path), os.path.dirname(sys.executable), "/usr/bin", "/bin"]),  # no nvidia-smi
        "PYTHON": sys.executable,
        "GPU_SUITE_SITE": str(tmp_path / "site"),
        "GPU_SUITE_WORKERS": "1",
        "GPU_SUITE_BUDGET_S": "200",
        "GPU_SUITE_PYTEST_ARGS": f"{tests}",
    }
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_suite"), str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a test failed
    summary = json.loads((out / "summary.json").read_text())
    assert {row["status"] for row in summary["gpu_check"]["table"]} == {"SKIP"}
    assert summary["gpu_check"]["exit"] == 0
    suite = summary["pytest"]
    assert (suite["tests"], suite["failures"], suite["interrupted"]) == (2, 1, False)
    # junit's classname holds the path from pytest's rootdir, which depends on where the temp folder sits
    assert len(suite["failed_ids"]) == 1 and suite["failed_ids"][0].endswith("test_two::test_breaks")
    assert suite["closing"].startswith("1 failed, 1 passed")
    assert "pytest -n: exit 1" in (out / "summary.txt").read_text()
    assert "observe cost: no CUDA device, not run" in (out / "summary.txt").read_text()
