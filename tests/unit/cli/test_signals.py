"""The exit status of ``python -m harness`` after a Ctrl-C (harness/cli/signals.py's ``as_program``).

A small Python of its own per case (no torch, no rank), started with ``-m`` as the CLI is: CPython
decides how such a process ends only as it exits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

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
