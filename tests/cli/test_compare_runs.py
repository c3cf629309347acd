"""``run --json`` lists the specs whose run failed (``failed_specs``), and ``compare`` shows that
error where one side failed instead of only "observed only in A"."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import cli, no_traceback
from tests.support.specs import TINY_FAKE_2, write_spec

RAISING = "def refuse(model, unit, module, rank, world_size):\n    raise ValueError(f'refused {unit!r}')\n"


def test_a_failed_run_is_listed_in_json_and_compare_shows_its_error(tmp_path: Path):
    (tmp_path / "h.py").write_text(RAISING)
    good = write_spec(tmp_path, TINY_FAKE_2, "tiny.yaml")
    failing = tmp_path / "failing"
    failing.mkdir()
    (failing / "h.py").write_text(RAISING)
    hooked = TINY_FAKE_2.replace("  mesh:", "  hooks: {file: h.py, after_fully_shard: refuse}\n  mesh:")
    write_spec(failing, hooked, "tiny.yaml")
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert cli("run", str(good), "--json", str(a)).returncode == 0
    ran = cli("run", str(failing / "tiny.yaml"), "--json", str(b))
    assert ran.returncode == 2, ran.stdout + ran.stderr
    failed = json.loads(b.read_text())["failed_specs"]
    assert list(failed) == [str(failing / "tiny.yaml")] and "ValueError: refused" in failed[str(failing / "tiny.yaml")]
    assert json.loads(a.read_text())["failed_specs"] == {}
    compared = cli("compare", str(a), str(b))
    assert compared.returncode == 1, compared.stdout
    lines = compared.stdout.splitlines()
    assert "  the run failed in B:" in lines and any("ValueError: refused" in line for line in lines)
    assert "  tiny.yaml: observed in A, failed in B" in lines
    assert cli("compare", str(b), str(b)).returncode == 0  # the same failure on both sides
    no_traceback(compared)
