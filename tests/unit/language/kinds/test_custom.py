"""check kind custom on hand-written observations: the fields are the observe hook's own keys,
expected exactly, rounded or bounded; a wrong figure fails that field on the ranks that differ."""

from __future__ import annotations

import json

from jsonschema import Draft202012Validator

from harness.judge.checks import check
from harness.language.entry import make_entry
from harness.language.kinds import get_kind
from tests.support import REPO
from tests.support.observations import walkthrough_observation

SCHEMA = json.loads((REPO / "harness" / "contract" / "observation.schema.json").read_text())


def observation():
    obs = walkthrough_observation()
    for r in obs["ranks"]:
        r["custom"] = [
            {"step_index": 0, "values": {"trainable": 0, "dtype": "float32", "norm": 1.25e6}},
            {
                "step_index": 1,
                "values": {"trainable": 11, "dtype": "float32", "norm": 2.0 + r["rank"], "shape": [32, 64]},
            },
        ]
    return obs


def run(obs, **values):
    return check(make_entry("custom", values, id="e", spec="specs/x.yaml", line=3, section="S"), obs)


def field(result, name):
    return next(f for f in result.fields if f.field == name)


def test_the_observation_with_custom_values_is_schema_valid():
    Draft202012Validator(SCHEMA).validate(observation())


def test_exact_rounded_and_bound_expectations_pass():
    result = run(observation(), step_index=1, trainable=11, shape=[32, 64], norm=">= 2", dtype="float32")
    assert result.status == "pass", result.explain()
    assert run(observation(), step_index=0, norm="≈1.25M").status == "pass"


def test_a_wrong_value_fails_that_field_only():
    result = run(observation(), step_index=1, trainable=10, shape=[32, 64])
    assert result.status == "fail"
    assert not field(result, "trainable").ok and field(result, "shape").ok
    assert "10" in result.explain() and "11" in result.explain()


def test_a_bound_fails_on_the_ranks_outside_it():
    result = run(observation(), step_index=1, norm="<= 3.5")
    assert result.status == "fail" and field(result, "norm").failed_ranks == [2, 3]


def test_without_a_step_selector_the_steps_must_agree():
    assert run(observation(), dtype="float32").status == "pass"
    assert run(observation(), trainable=11).status == "fail"  # step 0 says 0


def test_no_custom_observation_is_an_error_naming_the_hook():
    result = run(walkthrough_observation(), trainable=0)
    assert result.status == "error" and "setup.hooks.observe" in result.explain()


def test_any_key_but_a_selector_is_a_field():
    kind = get_kind("custom")
    assert kind.unknown_key("anything_at_all") is None
    assert kind.field_named("step_index") is None
    assert kind.field_named("x").type.name == "json"
