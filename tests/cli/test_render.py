"""``harness render`` as a subprocess: from a ``run --json`` file, running nothing."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support import REPO as ROOT
from tests.support import WALKTHROUGH
from tests.support.document_tables import missing_figures
from tests.support.observations import walkthrough_observation


def test_cli_renders_from_a_json_observation(tmp_path):
    """``render --from-json`` reads what ``run --json`` writes, runs nothing, writes DIR/<spec>.md."""
    obs = walkthrough_observation()
    payload = {
        "torch_version": obs["environment"]["torch_version"],
        "results": [],
        "observations": {"specs/qwen3_walkthrough.yaml": obs},
    }
    source = tmp_path / "run.json"
    source.write_text(json.dumps(payload))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "render",
            str(WALKTHROUGH),
            "--from-json",
            str(source),
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    written = (tmp_path / "out" / "qwen3_walkthrough.md").read_text()
    assert missing_figures(written) == []
    assert "torch" not in proc.stderr


def test_cli_from_json_without_this_spec_says_so(tmp_path):
    source = tmp_path / "run.json"
    source.write_text(
        json.dumps(
            {
                "observations": {
                    "specs/other.yaml": walkthrough_observation(),
                    "specs/another.yaml": walkthrough_observation(),
                }
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "render", str(WALKTHROUGH), "--from-json", str(source)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""  # stdout is for the Markdown; the one-line error goes to stderr
    assert str(source) in proc.stderr and "specs/other.yaml" in proc.stderr, proc.stderr
