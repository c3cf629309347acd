"""The command line's width: COLUMNS, else the terminal's, else 80; piped output is not fixed at 160."""

from __future__ import annotations

import subprocess
import sys

from tests.support.cli import harness_env

WIDTH = "from harness.cli.console import stdout_console; print(stdout_console().width)"


def _width(**env: str) -> int:
    environ = {k: v for k, v in harness_env().items() if k != "COLUMNS"} | env  # this shell's COLUMNS left out
    proc = subprocess.run(
        [sys.executable, "-c", WIDTH],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout)


def test_columns_sets_the_width():
    assert _width(COLUMNS="93") == 93


def test_with_no_terminal_and_no_columns_the_width_is_80():
    """No stream is a terminal here (stdin /dev/null, stdout and stderr pipes); it once was 160."""
    assert _width() == 80
