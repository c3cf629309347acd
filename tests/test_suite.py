"""The suite's own rules: a test outside ``tests/integration/`` and ``tests/cli/`` launches no rank
(so neither does the fast tier, ``-m "not slow"``), and the layout's folders mean what they say
(``tests/conftest.py``, ``tests/support/no_ranks/sitecustomize.py``).

Each guard test trips the guard on purpose and then empties the refusals file, so that only the
trip it asserts is forgiven: a second, unexpected launch would still fail the test at teardown.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

import pytest

from tests.support import REPO
from tests.support.cli import harness_env
from tests.support.collection import whole_tests_folder
from tests.support.no_ranks.sitecustomize import LOG, RankLaunched
from tests.support.specs import TINY, write_spec


def _refusals_then_forgive() -> str:
    """What the guard wrote down for this test so far; emptied (the trip was the test's own)."""
    with open(os.environ[LOG], "a+", encoding="utf-8") as f:
        f.seek(0)
        text = f.read()
        f.truncate(0)
    return text


def _child() -> None:  # a process target that would do nothing: the start itself is refused
    pass


def test_a_multiprocessing_start_is_refused_in_the_tests_process():
    process = multiprocessing.get_context("spawn").Process(target=_child, name="would-be-rank")
    with pytest.raises(
        RankLaunched, match="outside tests/integration/ and tests/cli/ launched a multiprocessing process"
    ):
        process.start()
    assert "would-be-rank" in _refusals_then_forgive()


@pytest.mark.slow
def test_a_start_is_refused_in_a_test_marked_slow_outside_the_rank_folders():
    """The ``slow`` marker alone (a test slow for its time) does not let a unit test launch ranks."""
    process = multiprocessing.get_context("spawn").Process(target=_child, name="slow-would-be-rank")
    with pytest.raises(RankLaunched):
        process.start()
    assert "slow-would-be-rank" in _refusals_then_forgive()


def test_torchrun_is_refused():
    with pytest.raises(RankLaunched, match="torchrun"):
        subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "x.py"])
    assert "torch.distributed.run" in _refusals_then_forgive()


def test_the_harness_launching_ranks_in_a_subprocess_is_refused(tmp_path):
    """``harness run`` on real gloo ranks, started by a test outside the rank folders: the subprocess
    imports the guard as its ``sitecustomize`` and refuses the first rank of the forkserver."""
    spec = write_spec(tmp_path, TINY.replace("tables:", "backend: gloo\ntables:"))
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", str(spec)],
        cwd=REPO,
        env=harness_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "fsdp2-rank-0" in _refusals_then_forgive(), proc.stdout + proc.stderr


def test_a_process_that_is_not_a_rank_still_starts():
    """The guard refuses ranks, not subprocesses: the CLI, pytester and fan-out tests start Pythons."""
    proc = subprocess.run(
        [sys.executable, "-c", "print('ok')"], env=harness_env(), capture_output=True, text=True, timeout=60
    )
    assert proc.stdout == "ok\n" and _refusals_then_forgive() == ""


@pytest.mark.slow  # collects the suite in a subprocess (seconds), twice unless this session collected it, no rank
def test_the_suite_collects_the_same_items_under_importlib(request):
    """The tests import their shared code as ``tests.support``, never as a top-level module, so
    ``--import-mode=importlib`` collects exactly what the default mode collects: what this session
    collected under ``tests/`` where it collected all of it in the default mode (the README's
    command), else a default-mode collection of its own."""

    def collected(*args: str) -> list[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args, "tests"],
            cwd=REPO,
            env=harness_env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return [line for line in proc.stdout.splitlines() if "::" in line]

    kept = whole_tests_folder(request.config)
    default = list(kept) if kept is not None else collected()
    assert len(default) > 500
    assert collected("--import-mode=importlib") == default


@pytest.mark.slow  # a subprocess collection of tests/integration (seconds) unless this session collected it, no rank
def test_every_integration_item_is_slow(request):
    """``-m "not slow" tests/integration`` selects nothing: every item there carries the marker ``-m``
    matches, as this session's collection of ``tests/`` (where it collected all of it) or a
    collection of its own says."""
    collected = whole_tests_folder(request.config)
    if collected is not None:
        integration = {node: marks for node, marks in collected.items() if node.startswith("tests/integration/")}
        assert len(integration) > 50
        assert [node for node, marks in integration.items() if "slow" not in marks] == []
        return
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "not slow",
            "tests/integration",
        ],
        cwd=REPO,
        env=harness_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("no tests collected (") and "deselected" in last, proc.stdout[-3000:]
