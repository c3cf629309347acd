"""Seeing a real run through the CLI: one ``harness run`` of the walkthrough (4 gloo ranks,
output piped) with ``--trace``, ``--plot``, ``--junitxml`` and ``--json``, then each output
held against the observation the same run wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from harness.load.spec import load_spec
from harness.report.trace import collective_events, missing_collectives, ranks_of
from tests.support import REPO as ROOT
from tests.support import WALKTHROUGH

pytestmark = pytest.mark.slow


def _is_chrome_event(e: dict) -> bool:
    """The Trace Event Format's required fields for the phases the profiler writes."""
    if not isinstance(e.get("ph"), str) or "pid" not in e or "name" not in e:
        return False
    if e["ph"] == "M":
        return isinstance(e.get("args"), dict)
    if e["ph"] == "X":
        return isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))
    return isinstance(e.get("ts"), (int, float))


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """``harness run`` of the walkthrough with every view on (one launch for this module)."""
    out = tmp_path_factory.mktemp("seen")
    views = ["--trace", str(out / "trace"), "--junitxml", str(out / "junit.xml")]
    try:
        import matplotlib  # noqa: F401

        views += ["--plot", str(out / "plot")]
    except ImportError:
        pass
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "run",
        "specs/qwen3_walkthrough.yaml",
        "--failures-only",
        "--json",
        str(out / "run.json"),
        *views,
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    observation = json.loads((out / "run.json").read_text())["observations"]["specs/qwen3_walkthrough.yaml"]
    return out, proc, observation


def test_trace_holds_every_rank_and_collective(cli_run):
    out, proc, observation = cli_run
    ranks = observation["environment"]["observed_ranks"]
    assert sorted(p.name for p in (out / "trace" / "qwen3_walkthrough").iterdir()) == [f"rank{r}.json" for r in ranks]
    for name in ("qwen3_walkthrough.json", "qwen3_walkthrough.fsdp.json"):
        merged = json.loads((out / "trace" / name).read_text())  # valid JSON
        events = merged["traceEvents"]
        assert events and all(_is_chrome_event(e) for e in events), [e for e in events if not _is_chrome_event(e)][:3]
        assert ranks_of(merged) == ranks == sorted({e["pid"] for e in events})
        assert missing_collectives(merged, observation) == []
        assert sum(len(collective_events(merged, r)) for r in ranks) == 6 * len(ranks)  # AG x2, AG x2, RS x2 per rank
        labels = {e["name"].split(" (")[0] for e in events if e["ph"] == "X" and e["name"].startswith("FSDP::")}
        assert {"FSDP::pre_forward", "FSDP::all_gather", "FSDP::post_backward_reduce"} <= labels
    assert "ui.perfetto.dev" in proc.stdout


def test_plots_for_every_rank(cli_run):
    pytest.importorskip("matplotlib", reason="matplotlib is optional (pip install .[plot]); the run drew nothing")
    out, _, observation = cli_run
    expected = sorted(
        f"qwen3_walkthrough_memory_rank{r}.{ext}"
        for r in observation["environment"]["observed_ranks"]
        for ext in ("png", "svg")
    )
    assert sorted(p.name for p in (out / "plot").iterdir()) == expected


def test_junit_has_one_passing_case_per_entry(cli_run):
    out, _, _ = cli_run
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    cases = suite.findall("testcase")
    entries = len(load_spec(WALKTHROUGH).items)  # the walkthrough spec's entries, 115 today
    assert len(cases) == int(suite.get("tests")) == entries and suite.get("failures") == "0"
    names = {(c.get("classname"), c.get("name")) for c in cases}
    assert ("specs.qwen3_walkthrough.yaml.shard_per_rank", "self_attn.q_proj.weight") in names


def test_progress_is_silent_when_piped(cli_run):
    _, proc, _ = cli_run
    for stage in ("launching ranks", "checking", "building the model"):
        assert stage not in proc.stdout + proc.stderr
