"""The exit status of ``python -m harness`` after a Ctrl-C (harness/cli/signals.py's ``as_program``),
the exit bound after a first signal and the exit at once on a second (``install``).

A small Python of its own per case (no torch, no rank), started with ``-m`` as the CLI is: CPython
decides how such a process ends only as it exits.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.support.cli import harness_env

# main() as the CLI would be, with its Ctrl-C landing in code run by exec of a string, as in a
# dataclass or namedtuple being built by a lazy import
MAINS = {
    "caught by the command": """
        def main():
            try:
                exec("raise KeyboardInterrupt")
            except KeyboardInterrupt:
                sys.stderr.write("interrupted\\n")
                return 130
    """,
    "caught by as_program": """
        def main():
            exec("raise KeyboardInterrupt")
    """,
}


@pytest.mark.parametrize("where", MAINS)
def test_a_ctrl_c_that_left_exec_code_still_exits_130_not_by_sigint(tmp_path, where):
    package = tmp_path / "interrupted_cli"
    package.mkdir()
    program = "import sys\nfrom harness.cli.signals import as_program\n"
    program += textwrap.dedent(MAINS[where]) + "sys.exit(as_program(main))\n"
    (package / "__main__.py").write_text(program)
    env = harness_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    proc = subprocess.run(
        [sys.executable, "-m", package.name], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path
    )
    assert (proc.returncode, proc.stderr) == (130, "interrupted\n")  # -2: CPython killed itself with SIGINT


# A command line whose clean-up never ends after the first signal: install() as python -m harness
# does, a 1 s bound instead of EXIT_BOUND_S, and the first signal swallowed.
STUCK = """
import os, signal, sys, time
from harness.cli import signals
from harness.run.launch import teardown
signals.EXIT_BOUND_S = 1.0
signals.install()
teardown.at_hard_exit(os.rmdir, {folder!r})

def main():
    try:
        signal.raise_signal(signal.{first})
    except KeyboardInterrupt:
        pass
    print("first handled", flush=True)
    time.sleep(60)  # stuck, as a clean-up waiting on a process nobody stopped was
    return 0

sys.exit(signals.as_program(main))
"""


@pytest.mark.parametrize("first, status, line", [("SIGINT", 130, "interrupted\n"), ("SIGTERM", 143, "terminated\n")])
def test_the_exit_bound_ends_a_stuck_clean_up(tmp_path, first, status, line):
    folder = tmp_path / "left"
    folder.mkdir()
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", STUCK.format(folder=str(folder), first=first)],
        capture_output=True,
        text=True,
        timeout=60,
        env=harness_env(),
    )
    assert (proc.returncode, proc.stderr, proc.stdout) == (status, line, "first handled\n")
    assert time.monotonic() - started < 30  # the bound (1 s), not the 60 s sleep
    assert not folder.exists()  # the hard exit's clean-ups ran


def test_a_second_signal_after_the_first_exits_at_once(tmp_path):
    folder = tmp_path / "left"
    folder.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", STUCK.format(folder=str(folder), first="SIGINT").replace("1.0", "60.0")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=harness_env(),
    )
    assert proc.stdout.readline() == "first handled\n"
    proc.send_signal(signal.SIGINT)
    second = time.monotonic()
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (130, "interrupted\n")  # the line once, the first signal's status
    assert time.monotonic() - second < 10  # not the bound (60 s here), not the sleep
    assert not folder.exists()
