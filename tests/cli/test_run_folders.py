"""``run DIR`` and ``validate DIR``: a folder stands for every .yaml/.yml file below it, each a
spec (harness/load/spec_files.py); an empty or mistyped one fails loudly, naming the file, and
a folder without any names itself: nothing is dropped silently (issue 39, item 6)."""

from __future__ import annotations

from tests.support.cli import cli, no_traceback
from tests.support.specs import TINY_FAKE_2, line_of


def folder_of_specs(tmp_path):
    folder = tmp_path / "mine"
    (folder / "deep").mkdir(parents=True)
    (folder / "good.yaml").write_text(TINY_FAKE_2, encoding="utf-8")
    (folder / "empty.yaml").write_text("")
    mistyped = TINY_FAKE_2.replace("tables:", "tabels:")
    (folder / "deep" / "mistyped.yml").write_text(mistyped, encoding="utf-8")
    (folder / "hooks.py").write_text("")  # not YAML: not a spec
    (tmp_path / "none").mkdir()
    return folder, line_of(mistyped, "tabels:")


def test_run_a_folder_runs_every_spec_and_fails_naming_each_broken_one(tmp_path):
    folder, line = folder_of_specs(tmp_path)
    proc = cli("run", str(folder), str(tmp_path / "none"))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert (
        f"{folder}/empty.yaml:1: expected a mapping with keys spec, title, document, setup, tables, got an empty file"
        in out
    )
    assert f"{folder}/deep/mistyped.yml:{line}: tabels: Additional properties are not allowed" in out
    assert f"{tmp_path / 'none'}: a folder with no spec file (.yaml or .yml) below it" in out
    assert "tiny: 1 passed, 0 failed" in out  # good.yaml ran
    assert "hooks.py" not in out
    no_traceback(proc)


def test_validate_a_folder(tmp_path):
    folder, line = folder_of_specs(tmp_path)
    proc = cli("validate", str(folder))
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert f"✗ {folder}/deep/mistyped.yml:{line}: tabels: Additional properties are not allowed" in proc.stdout
    assert any(x.startswith(f"✗ {folder}/empty.yaml:1: expected a mapping") for x in lines)
    assert any(x.startswith(f"✓ {folder}/good.yaml: 1 entries") for x in lines)
