"""``run`` / ``render`` --backend: a spec pinned to a backend keeps it (with a one-line note)
unless --force-backend; an ``auto`` spec takes the requested one (harness/load/backend_choice.py)."""

from __future__ import annotations

from tests.support.cli import cli, no_traceback
from tests.support.specs import TINY_2, TINY_FAKE_2
from tests.support.specs import write_spec as write

PINNED_FAKE = TINY_FAKE_2  # 2 ranks: the forced gloo run stays small
AUTO = TINY_2


def summary(proc) -> str:
    return next(line for line in proc.stdout.splitlines() if line.startswith("tiny: "))


def test_a_pinned_spec_keeps_its_backend_and_says_which(pinned_fake_run):
    proc = pinned_fake_run.proc  # PINNED_FAKE run with --backend gloo (tests/cli/conftest.py)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "note: tiny keeps its backend fake (pinned in the spec), not gloo; --force-backend runs it on gloo"
        in proc.stdout
    )
    assert ", fake, 2 ranks" in summary(proc)
    no_traceback(proc)


def test_force_backend_runs_a_pinned_spec_on_the_requested_one(tmp_path):
    path = write(tmp_path, PINNED_FAKE)
    proc = cli("run", str(path), "--backend", "gloo", "--force-backend")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "keeps its backend" not in proc.stdout
    assert ", gloo, 2 ranks" in summary(proc)


def test_an_auto_spec_takes_the_requested_backend_without_a_note(tmp_path):
    path = write(tmp_path, AUTO)
    proc = cli("run", str(path), "--backend", "fake")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "keeps its backend" not in proc.stdout
    assert ", fake, 2 ranks" in summary(proc)


def test_render_keeps_the_pin_too_and_notes_it_on_stderr(tmp_path):
    path = write(tmp_path, PINNED_FAKE)
    proc = cli("render", str(path), "--backend", "nccl")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "note: tiny keeps its backend fake (pinned in the spec), not nccl" in proc.stderr
    assert "keeps its backend" not in proc.stdout  # stdout is the Markdown


def test_force_backend_without_backend_is_a_usage_error(tmp_path):
    path = write(tmp_path, PINNED_FAKE)
    for command in ("run", "render"):
        proc = cli(command, str(path), "--force-backend")
        assert proc.returncode == 2
        assert "--force-backend applies --backend to pinned specs: give --backend too" in proc.stderr
        no_traceback(proc)
