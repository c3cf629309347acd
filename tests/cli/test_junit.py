"""The harness's JUnit file against pytest's own --junitxml for the same spec run (subprocesses)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import REPO as ROOT
from tests.support import WALKTHROUGH
from tests.support.junit import MUTATIONS, cases_of


@pytest.mark.slow
def test_same_cases_as_pytests_own_junitxml(tmp_path):
    text = WALKTHROUGH.read_text(encoding="utf-8")
    for old, new in MUTATIONS:
        assert old in text, old
        text = text.replace(old, new, 1)
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "walk.yaml").write_text(text, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("PYTEST_ADDOPTS", None)
    ours = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            "specs/walk.yaml",
            "--backend",
            "fake",
            "--failures-only",
            "--junitxml",
            "ours.xml",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ours.returncode == 1, ours.stdout + ours.stderr
    # pytest with the installed spec plugin (harness.pytest_plugin), rooted at tmp_path so that the node ids
    # are relative to the same directory the CLI ran in
    theirs = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            str(tmp_path),
            "-o",
            "junit_family=xunit2",
            "--fsdp2-backend",
            "fake",
            "specs/walk.yaml",
            "--junitxml",
            "pytest.xml",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert theirs.returncode == 1, theirs.stdout + theirs.stderr
    ours_cases = cases_of((tmp_path / "ours.xml").read_text(encoding="utf-8"))
    theirs_cases = cases_of((tmp_path / "pytest.xml").read_text(encoding="utf-8"))
    assert list(ours_cases) == list(theirs_cases)  # same test cases, same order

    def unrooted(text):
        return None if text is None else text.replace(f"{tmp_path}/", "")

    outcomes = {}
    for key, theirs_case in theirs_cases.items():
        ours_case = ours_cases[key]
        assert ours_case["outcome"] == theirs_case["outcome"], key
        # pytest's items load the spec by absolute path, the CLI by the path it was given
        assert ours_case["message"] == unrooted(theirs_case["message"]), key
        if theirs_case["outcome"] == "failure":
            assert ours_case["text"] == unrooted(theirs_case["text"]), key
        outcomes[theirs_case["outcome"]] = outcomes.get(theirs_case["outcome"], 0) + 1
    assert outcomes == {
        "pass": len(theirs_cases) - 5,
        "failure": 2,
        "skipped:pytest.xfail": 1,
        "skipped:pytest.skip": 2,
    }
    fail = theirs_cases[("specs.walk.yaml.layer_totals", "layer_numel")]
    assert "≈2.37M" in fail["text"] and "specs/walk.yaml:" in fail["text"]
