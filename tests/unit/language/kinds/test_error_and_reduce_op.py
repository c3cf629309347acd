"""The check kinds of issue 10's units part, on hand-written observations: expect_error,
reduce_op, the pattern form of an expectation, mesh-dim attribution of a shared group."""

from __future__ import annotations

import copy
import json

import pytest
from jsonschema import Draft202012Validator

from harness.judge.checks import check
from harness.language.entry import make_entry
from harness.language.expect import ExpectationError, parse_expectation
from harness.run.rank.recorders.collectives import resolve_mesh_dims
from tests.support import REPO
from tests.support.observations import walkthrough_observation

SCHEMA = json.loads((REPO / "harness" / "contract" / "observation.schema.json").read_text())

REFUSED = {
    "type": "RuntimeError",
    "qualname": "builtins.RuntimeError",
    "message": "Cannot use ReduceOp.PREMUL_SUM with Gloo",
    "phase": "backward",
    "traceback": "...",
}


def run(kind, obs, **values):
    return check(make_entry(kind, values, id="e", spec="specs/x.yaml", line=3, section="S"), obs)


def with_errors(errors):
    obs = walkthrough_observation()
    for r, e in zip(obs["ranks"], errors):
        r["error"] = copy.deepcopy(e)
    return obs


def test_an_observation_with_errors_is_schema_valid():
    Draft202012Validator(SCHEMA).validate(with_errors([REFUSED, None, REFUSED, REFUSED]))


def test_the_expected_error_passes():
    obs = with_errors([REFUSED] * 4)
    result = run(
        "expect_error",
        obs,
        raised=True,
        type="RuntimeError",
        message={"matches": "PREMUL_SUM with Gloo"},
        phase="backward",
    )
    assert result.status == "pass", result.explain()


def test_a_different_error_fails_showing_both():
    other = dict(REFUSED, type="ValueError", message="reshard_after_forward should be a bool", phase="setup")
    result = run("expect_error", with_errors([other] * 4), type="RuntimeError", message={"matches": "PREMUL_SUM"})
    text = result.explain()
    assert result.status == "fail"
    assert "expected RuntimeError; observed ValueError" in text
    assert "expected a string matching /PREMUL_SUM/; observed reshard_after_forward should be a bool" in text


def test_no_error_fails_showing_null():
    result = run("expect_error", with_errors([None] * 4), raised=True, type="RuntimeError")
    assert result.status == "fail"
    assert "expected true; observed false" in result.explain() and "observed null" in result.explain()


def test_one_rank_without_the_error_fails_that_rank():
    result = run("expect_error", with_errors([REFUSED, None, REFUSED, REFUSED]), raised=True)
    assert result.status == "fail" and result.fields[0].failed_ranks == [1]


def test_an_observation_without_recorded_errors_cannot_be_checked():
    result = run("expect_error", walkthrough_observation(), raised=False)
    assert result.status == "error" and "errors were not recorded" in result.message


def test_a_pattern_must_be_a_regular_expression():
    assert parse_expectation({"matches": "a+"}).holds("baa")
    assert not parse_expectation({"matches": "^a"}).holds("ba") and not parse_expectation({"matches": "a"}).holds(None)
    with pytest.raises(ExpectationError, match="regular expression"):
        parse_expectation({"matches": "(unclosed"})


def _reduce_obs(op="AVG", factor=None):
    obs = walkthrough_observation()
    for u in obs["fsdp_units"]:
        u["state"] = {
            "managed": u["role"] == "layer",
            "gradient_divide_factor": factor,
            "force_sum_reduction_for_comms": False,
        }
    for r in obs["ranks"]:
        for c in r["collectives"]:
            c["reduce_op"] = op if c["op"] == "reduce_scatter" else None
    return obs


def test_reduce_op_reads_the_op_and_the_units_state():
    obs = _reduce_obs("PREMUL_SUM", 8.0)
    Draft202012Validator(SCHEMA).validate(obs)
    assert (
        run("reduce_op", obs, layer=0, count=1, reduce_op="PREMUL_SUM", divide_factor=8, force_sum=False).status
        == "pass"
    )
    failed = run("reduce_op", obs, layer=0, reduce_op="AVG")
    assert failed.status == "fail" and "expected AVG; observed PREMUL_SUM" in failed.explain()
    assert run("reduce_op", _reduce_obs(), role="layer", count=2, reduce_op="AVG", divide_factor=None).status == "pass"


def test_a_group_shared_by_two_mesh_dims_is_attributed_as_fsdp_issues_it():
    records = [
        {"op": "all_reduce", "mesh_dim": ("dp_replicate", "dp_shard")},
        {"op": "reduce_scatter", "mesh_dim": ("dp_replicate", "dp_shard")},
        {"op": "all_gather", "mesh_dim": ["dp_replicate", "dp_shard"]},
        {"op": "all_reduce", "mesh_dim": "dp_shard"},
    ]
    assert [r["mesh_dim"] for r in resolve_mesh_dims(records)] == ["dp_replicate", "dp_shard", "dp_shard", "dp_shard"]
