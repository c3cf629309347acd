"""The Markdown cluster report (``--report``) from synthetic observations: hosts and ranks, the
environment with the differing value marked, the nccl-tests table, results, a failed run's error."""

from __future__ import annotations

from harness.judge.checks import check
from harness.language.entry import make_entry
from harness.report.markdown import DIFFERS, SpecRun, cluster_report
from tests.support.observations import timed_observation


def report_for(obs, results=(), **kwargs) -> str:
    return cluster_report([SpecRun("specs/x.yaml", "x", "a cluster", obs, list(results), **kwargs)])


def test_hosts_and_ranks():
    text = report_for(timed_observation())
    assert "| node-a | 0 | 0, 1 | 0, 1 | 2 × cpu |" in text
    assert "| node-b | 1 | 2, 3 | 0, 1 | 2 × cpu |" in text


def test_a_differing_value_is_marked_and_named():
    obs = timed_observation()
    obs["ranks"][3]["environment"]["torch_version"] = "2.12.0"
    text = report_for(obs)
    assert "ranks differ in: torch." in text
    assert f"| 3 | node-b | 1 | 1 | cpu | - | **2.12.0** {DIFFERS} | gloo |" in text
    assert "| 0 | node-a | 0 | 0 | cpu | - | 2.13.0 | gloo |" in text
    assert report_for(timed_observation()).count("every rank agrees") == 1


def test_the_bandwidth_table_and_the_results():
    obs = timed_observation(wrong_rank=1)
    failed = check(make_entry("bandwidth", {"op": "all_gather", "wrong": 0}, id="ag_correct", table="sweep"), obs)
    text = report_for(obs, [failed])
    assert (
        "| size (B) | count (elements) | type | redop | root | time (us) | algbw (GB/s) | busbw (GB/s) | #wrong |"
        in text
    )
    assert "| 4,720,896 | 2,360,448 | bfloat16 | none | -1 | 11500.0 | 0.41 | 0.31 | 5 | all_gather | layer |" in text
    assert "| ✗ | sweep | ag_correct | fail |" in text
    assert "failing ranks: 1 (host node-a)" in text


def test_a_failed_run_reports_its_error():
    text = report_for(None, error="run timed out after 30 s\nDiagnosis: rank 2 never entered all_gather #3")
    assert "The run failed:" in text and "Diagnosis: rank 2 never entered all_gather #3" in text
