"""setup.hooks at load: the file and its names are checked without importing it (torch-free),
every problem reported as ``file:line: setup.hooks.<key>: what was expected``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.load.spec import SpecError, load_spec
from tests.support import REPO
from tests.support.specs import edit, line_of, write_spec

HOOKS = """\
import torch  # never imported at load


def freeze(model, rank, world_size):
    pass


def observe(model, step_index, rank, world_size):
    return {}
"""


def with_hooks(hooks: str) -> str:
    return edit("  seed: 0\n", f"  seed: 0\n  hooks: {hooks}\n")


def test_a_valid_hooks_file_loads_with_its_absolute_path_and_digest(tmp_path):
    (tmp_path / "my_hooks.py").write_text(HOOKS)
    spec = load_spec(write_spec(tmp_path, with_hooks("{file: my_hooks.py, after_build: freeze, observe: observe}")))
    hooks = spec.setup.hooks
    assert hooks.file == str((tmp_path / "my_hooks.py").resolve())
    assert hooks.named() == {"after_build": "freeze", "observe": "observe"}
    assert len(hooks.digest) == 64


def test_the_digest_follows_the_file_so_a_cached_run_is_not_reused(tmp_path):
    (tmp_path / "my_hooks.py").write_text(HOOKS)
    path = write_spec(tmp_path, with_hooks("{file: my_hooks.py, after_build: freeze}"))
    before = load_spec(path).setup.cache_key()
    (tmp_path / "my_hooks.py").write_text(HOOKS + "\n# changed\n")
    assert load_spec(path).setup.cache_key() != before


@pytest.mark.parametrize(
    "hooks, key, message",
    [
        ("{file: missing.py, after_build: freeze}", "setup.hooks.file", "cannot read hooks file"),
        (
            "{file: my_hooks.py, after_build: unfreeze}",
            "setup.hooks.after_build",
            "'unfreeze' is not a top-level function of 'my_hooks.py'; defined there: ['freeze', 'observe']",
        ),
        ("{file: my_hooks.py, before_stp: freeze}", "setup.hooks", "before_stp"),
        ("{after_build: freeze}", "setup.hooks", "file"),
        ("{file: my_hooks.py, loss: 'not a name'}", "setup.hooks.loss", "pattern"),
    ],
)
def test_a_bad_hooks_key_names_file_line_and_key(tmp_path, hooks, key, message):
    _assert_first_error(tmp_path, with_hooks(hooks), "  hooks:", key, message)


def _assert_first_error(tmp_path, text, marker, key, message):
    """Loading ``text`` beside HOOKS fails, its first line naming the file, ``marker``'s line and ``key``."""
    (tmp_path / "my_hooks.py").write_text(HOOKS)
    path = write_spec(tmp_path, text)
    with pytest.raises(SpecError) as err:
        load_spec(path)
    first = str(err.value).splitlines()[0]
    assert first.startswith(f"{path}:{line_of(text, marker)}: {key}"), first
    assert message in first, first


def test_a_hooks_file_that_is_not_python_is_refused_with_its_line(tmp_path):
    (tmp_path / "my_hooks.py").write_text("def freeze(model:\n")
    with pytest.raises(SpecError, match=r"setup\.hooks\.file: hooks file .* line 1 is not valid Python"):
        load_spec(write_spec(tmp_path, with_hooks("{file: my_hooks.py, after_build: freeze}")))


def test_a_nested_function_is_not_a_hook(tmp_path):
    (tmp_path / "my_hooks.py").write_text("def outer():\n    def freeze(model, rank, world_size):\n        pass\n")
    with pytest.raises(SpecError, match=r"setup\.hooks\.after_build: 'freeze' is not a top-level function"):
        load_spec(write_spec(tmp_path, with_hooks("{file: my_hooks.py, after_build: freeze}")))


def test_validate_imports_neither_torch_nor_the_hooks_file(tmp_path):
    (tmp_path / "my_hooks.py").write_text(
        "raise SystemExit('imported!')\n\ndef freeze(model, rank, world_size):\n    pass\n"
    )
    path = write_spec(tmp_path, with_hooks("{file: my_hooks.py, after_build: freeze}"))
    code = (
        "import sys; from harness.load.spec import load_spec; load_spec(sys.argv[1]); "
        "assert 'torch' not in sys.modules, 'torch imported'; print('ok')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=REPO, timeout=120, check=False
    )
    assert proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def schedule_with_call(hooks: str | None, name: str) -> str:
    text = edit("  seed: 0\n", f"  seed: 0\n  schedule:\n    steps:\n      - {{}}\n      - {{call: {name}}}\n")
    return edit("  seed: 0\n", f"  seed: 0\n  hooks: {hooks}\n", text) if hooks else text


def test_a_schedule_call_names_a_function_of_the_hooks_file(tmp_path):
    (tmp_path / "my_hooks.py").write_text(HOOKS)
    spec = load_spec(write_spec(tmp_path, schedule_with_call("{file: my_hooks.py}", "freeze")))
    assert [s.call for s in spec.setup.schedule.steps] == [None, "freeze"]
    text = schedule_with_call("{file: my_hooks.py}", "thaw")
    with pytest.raises(SpecError) as err:
        load_spec(write_spec(tmp_path, text))
    assert (
        str(err.value)
        .splitlines()[0]
        .startswith(
            f"{tmp_path / 'spec.yaml'}:{line_of(text, 'call: thaw')}: setup.schedule.steps[1].call: 'thaw' is not a "
            "top-level function of 'my_hooks.py'"
        )
    )


def test_a_schedule_call_without_a_hooks_file_is_refused(tmp_path):
    text = schedule_with_call(None, "freeze")
    with pytest.raises(SpecError, match=r"setup\.schedule\.steps\[1\]\.call: calling 'freeze' needs setup\.hooks"):
        load_spec(write_spec(tmp_path, text))


@pytest.mark.parametrize(
    "text, marker, key, message",
    [
        (
            edit("  seed: 0\n", "  seed: 0\n  hooks: {file: my_hooks.py}\n  fsdp: {all_reduce_hook: on_reduce}\n"),
            "  fsdp:",
            "setup.fsdp.all_reduce_hook",
            "'on_reduce' is not a top-level function of 'my_hooks.py'; defined there: ['freeze', 'observe']",
        ),
        (
            edit("  seed: 0\n", "  seed: 0\n  fsdp: {units: [{modules: 'layers.*', all_reduce_hook: freeze}]}\n"),
            "  fsdp:",
            "setup.fsdp.units[0].all_reduce_hook",
            "calling 'freeze' needs setup.hooks: {file: <your hooks>.py}",
        ),
    ],
)
def test_an_all_reduce_hook_names_a_function_of_the_hooks_file(tmp_path, text, marker, key, message):
    _assert_first_error(tmp_path, text, marker, key, message)
