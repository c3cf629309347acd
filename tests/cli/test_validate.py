"""``harness validate`` as a subprocess: every error of a spec on its own line, no traceback, exit 1;
the same lines piped as on a terminal, without importing rich; over processes (fan-out) the same
lines as one spec at a time, and Ctrl-C ends it with 130 and no process left."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support import REPO
from tests.support.specs import SMALL as BASE
from tests.support.specs import edit, line_of
from tests.support.specs import write_spec as write


def test_validate_prints_every_error_without_traceback(tmp_path):
    text = edit("check: param\n", "check: parm\n").replace("step: step2.k_heads", "step: step2.kv_heads")
    bad = write(tmp_path, text, "bad.yaml")
    proc = validate(bad, columns=1000)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, proc.stdout
    assert lines[0].startswith(
        f"✗ {bad}:{line_of(text, 'kv_heads')}: tables[0].entries[1].step: unknown step 'step2.kv_heads'"
    )
    assert lines[1].startswith(
        f"✗ {bad}:{line_of(text, 'check: parm')}: tables[1].check: did you mean 'param'? expected one of ['param',"
    )


def validate(*paths: Path, columns: int | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, "-m", "harness", "validate", *map(str, paths)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
    )


def test_validate_prints_one_line_per_bad_spec_and_exits_1(tmp_path):
    bad_text = edit("check: param\n", "check: parm\n")
    bad, good = write(tmp_path, bad_text, "bad.yaml"), write(tmp_path, BASE, "good.yaml")
    proc = validate(bad, good, columns=1000)
    assert proc.returncode == 1, proc
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, proc.stdout
    assert lines[0].startswith(
        f"✗ {bad}:{line_of(bad_text, 'check: parm')}: tables[1].check: did you mean 'param'? expected one of ['param',"
    )
    assert lines[1] == f"✓ {good}: 5 entries, world size 4"


def test_validate_error_is_one_line_when_piped(tmp_path):
    bad = write(tmp_path, edit("check: param\n", "check: parm\n"), "bad.yaml")
    proc = validate(bad)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert len(proc.stdout.splitlines()) == 1, proc.stdout


def test_validate_on_the_command_line_imports_no_torch():
    """``python -m harness validate`` of every shipped spec: torch (seconds to import) is left
    for the commands that run ranks."""
    code = (
        "import glob, runpy, sys; sys.argv = ['harness', 'validate', *sorted(glob.glob('specs/*.yaml'))]\n"
        "try:\n    runpy.run_module('harness', run_name='__main__')\nexcept SystemExit as exc:\n"
        "    sys.stderr.write(f'status {exc.code}, torch imported: {\"torch\" in sys.modules}')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.stderr == "status 0, torch imported: False", proc.stderr


def test_validate_off_a_terminal_prints_the_terminal_s_characters_without_colour():
    """An editor or pre-commit hook reads validate through a pipe: the same lines as a terminal
    shows (marks, file, entries), without colour codes."""
    specs = ["specs/qwen3_walkthrough.yaml", "specs/whole_model.yaml"]
    command = [sys.executable, "-m", "harness", "validate", *specs]
    plain = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert (plain.returncode, plain.stderr) == (0, "") and "\x1b[" not in plain.stdout
    colored = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=120, env={**os.environ, "FORCE_COLOR": "1"}
    )
    assert "\x1b[" in colored.stdout
    assert re.sub(r"\x1b\[[0-9;]*m", "", colored.stdout) == plain.stdout
    assert plain.stdout.splitlines()[0].startswith("✓ specs/qwen3_walkthrough.yaml: ")
