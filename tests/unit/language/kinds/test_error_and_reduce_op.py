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


def with_a_death(rank=1, exit_code=-11, signal="SIGSEGV", phase="forward"):
    """Errors recorded on every rank but ``rank``, which died: in ``deaths``, not in ``ranks``."""
    obs = with_errors([REFUSED] * 4)
    obs["ranks"] = [r for r in obs["ranks"] if r["rank"] != rank]
    obs["environment"]["observed_ranks"].remove(rank)
    obs["deaths"] = [{"rank": rank, "exit_code": exit_code, "signal": signal, "phase": phase}]
    return obs


def test_a_rank_that_died_by_a_signal_is_checked():
    obs = with_a_death()
    Draft202012Validator(SCHEMA).validate(obs)
    died = run("expect_error", obs, ranks=[1], died=True, signal="SIGSEGV", exit_code=-11, phase="forward")
    assert died.status == "pass", died.explain()
    assert run("expect_error", obs, ranks=[0, 2, 3], died=False, raised=True).status == "pass"
    every = run("expect_error", obs, died=False)  # every rank: the dead one fails, named
    assert every.status == "fail" and every.fields[0].failed_ranks == [1]


def test_a_wrong_signal_fails_and_other_kinds_name_the_death():
    wrong = run("expect_error", with_a_death(), ranks=[1], signal="SIGABRT")
    assert wrong.status == "fail" and "expected SIGABRT; observed SIGSEGV" in wrong.explain()
    other = run("collectives", with_a_death(), ranks=[1], select={"op": "all_gather"}, count=4)
    assert other.status == "error"
    assert "rank 1 died by SIGSEGV in phase forward: nothing else of it was observed" in other.message


def test_a_signal_name_is_checked_at_load():
    from harness.language.vocabulary import SIGNAL

    assert SIGNAL.problem(parse_expectation("SIGKILL")) is None and SIGNAL.problem(parse_expectation(None)) is None
    assert SIGNAL.problem(parse_expectation("SIGFOO")) == "expected a signal's name like SIGSEGV, or null, got 'SIGFOO'"
    assert SIGNAL.problem(parse_expectation(11)) is not None


def test_the_launcher_names_the_signal_of_a_negative_exit_code():
    from harness.run.launch.local import death_record

    assert death_record(1, -11, "forward") == {"rank": 1, "exit_code": -11, "signal": "SIGSEGV", "phase": "forward"}
    assert death_record(2, 3, "backward")["signal"] is None  # os._exit(3): no signal
    assert death_record(0, None, "setup")["signal"] is None


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
