"""``harness validate`` as a subprocess: every error of a spec on its own line, no traceback, exit 1;
the same lines piped as on a terminal, without importing rich; over processes (fan-out) the same
lines as one spec at a time, and Ctrl-C ends it with 130 and no process left."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support import SHIPPED_SPECS as SPECS
from tests.support.cli import harness_env as _env
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
    assert lines[0].startswith(f"✗ {bad}:{line_of(text, 'kv_heads')}: tables[0].entries[1].step: unknown step 'step2.kv_heads'")
    assert lines[1].startswith(f"✗ {bad}:{line_of(text, 'check: parm')}: tables[1].check: expected one of [")


def validate(*paths: Path, columns: int | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "harness", "validate", *map(str, paths)], cwd=REPO, env=env,
                          capture_output=True, text=True, encoding="utf-8", timeout=120)


def test_validate_prints_one_line_per_bad_spec_and_exits_1(tmp_path):
    bad_text = edit("check: param\n", "check: parm\n")
    bad, good = write(tmp_path, bad_text, "bad.yaml"), write(tmp_path, BASE, "good.yaml")
    proc = validate(bad, good, columns=1000)
    assert proc.returncode == 1, proc
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, proc.stdout
    assert lines[0].startswith(f"✗ {bad}:{line_of(bad_text, 'check: parm')}: tables[1].check: expected one of [")
    assert lines[1] == f"✓ {good}: 5 entries, world size 4"


def test_validate_error_is_one_line_when_piped(tmp_path):
    bad = write(tmp_path, edit("check: param\n", "check: parm\n"), "bad.yaml")
    proc = validate(bad)
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert len(proc.stdout.splitlines()) == 1, proc.stdout


def test_validate_off_a_terminal_prints_rich_s_characters_without_importing_rich():
    """An editor or pre-commit hook reads validate through a pipe: the same lines as rich prints
    there (marks, file, entries), and no rich import (about 60 ms of a ~0.5 s command)."""
    specs = ["specs/qwen3_walkthrough.yaml", "specs/whole_model.yaml"]
    code = ("import runpy, sys; sys.argv = ['harness', 'validate', *sys.argv[1:]]\n"
            "try:\n    runpy.run_module('harness', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('rich imported' if 'rich' in sys.modules else 'no rich')")
    plain = subprocess.run([sys.executable, "-c", code, *specs], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert plain.stderr.endswith("no rich"), plain.stderr
    colored = subprocess.run([sys.executable, "-c", code, *specs], cwd=REPO, capture_output=True, text=True,
                             timeout=120, env={**os.environ, "FORCE_COLOR": "1"})
    assert colored.stderr.endswith("rich imported") and "\x1b[" in colored.stdout
    assert re.sub(r"\x1b\[[0-9;]*m", "", colored.stdout) == plain.stdout
    assert plain.stdout.splitlines()[0].startswith("✓ specs/qwen3_walkthrough.yaml: ")


def _validate(*paths: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "validate", *map(str, paths)], cwd=REPO,
                          env=_env(COLUMNS="1000"),
                          capture_output=True, text=True, timeout=timeout)


def test_validate_over_processes_prints_what_one_spec_at_a_time_prints(tmp_path):
    """Every shipped spec and three broken ones, in argument order: the lines each file gives
    when loaded on its own here (no fork), and status 1."""
    from harness.__main__ import _validated

    bad = {"a_bad_yaml.yaml": "spec: [\n", "m_no_tables.yaml": "spec: x\n", "z_bad_kind.yaml": None}
    for name, text in bad.items():
        if text is None:
            text = (REPO / "specs" / "qwen3_walkthrough.yaml").read_text().replace("check: ", "check: no_such_", 1)
        (tmp_path / name).write_text(text)
    paths = sorted([*SPECS, *(tmp_path / name for name in bad)], key=lambda p: p.name)
    together = _validate(*paths)
    alone = [_validated(path) for path in paths]
    assert (together.returncode, together.stderr) == (1, "")
    assert together.stdout == "".join(("✓ " if ok else "✗ ") + line + "\n" for ok, text in alone
                                      for line in text.splitlines())
    assert [ok for ok, _ in alone].count(False) == 3


def test_ctrl_c_during_a_long_validate_exits_130_and_leaves_no_process(tmp_path):
    for i in range(3000):  # seconds of loading even spread over 16 processes; the signal ends it early
        shutil.copy(SPECS[i % len(SPECS)], tmp_path / f"{i:04d}.yaml")
    proc = subprocess.Popen([sys.executable, "-m", "harness", "validate", *sorted(map(str, tmp_path.glob("*.yaml")))],
                            cwd=REPO, env=_env(PYTHONUNBUFFERED="1"),  # each line as printed, forked or not
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout.readline().startswith("✓ ")  # loading has begun (the first spec, before any fork)
    time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: to every process of the group
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (130, "interrupted\n")
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # no process of the session is left
