"""The ``forward_input`` check kind on a hand-written observation: what the root's forward received
per forward (rank ``forward_inputs``). The real runs: specs/forward_input_structure.yaml and
specs/forward_input_user_dict.yaml; the recorder: tests/unit/run/test_forward_input.py."""

from __future__ import annotations

import jsonschema
import pytest

from harness.contract.observation import load_schema
from harness.judge.checks import check
from harness.language.entry import make_entry
from tests.support.observations import walkthrough_observation


def _record(step: int, argument: str, container: str, dtype: str) -> dict:
    return {
        "step_index": step,
        "microbatch": 0,
        "forward": 0,
        "argument": argument,
        "container": container,
        "dtype": dtype,
        "shape": [2, 8, 64],
    }


@pytest.fixture
def obs():
    doc = walkthrough_observation()
    for r in doc["ranks"]:
        r["forward_inputs"] = [
            _record(0, "keyword", "Tensor", "bfloat16"),
            _record(1, "positional", "UserDict", "float32"),
        ]
    return doc


def run(obs, **values):
    return check(make_entry("forward_input", values, id="t", section="S", table="t", spec="x.yaml", line=1), obs)


def test_the_records_are_schema_valid(obs):
    jsonschema.Draft202012Validator(load_schema()).validate(obs)


def test_each_step_is_measured_on_its_own(obs):
    assert run(obs, step_index=0, argument="keyword", container="Tensor", dtype="bfloat16", forwards=1).status == "pass"
    assert run(obs, step_index=1, container="UserDict", dtype="float32", shape=[2, 8, 64]).status == "pass"


def test_a_wrong_expectation_fails_on_that_field(obs):
    result = run(obs, step_index=1, container="UserDict", dtype="bfloat16")
    assert result.status == "fail"
    assert [f.field for f in result.fields if not f.ok] == ["dtype"]


def test_steps_that_differ_are_not_one_value(obs):
    """Over both steps the container is a list of the two, which no single expectation meets."""
    assert run(obs, container="Tensor").status == "fail"
    assert run(obs, forwards=2).status == "pass"


def test_no_record_at_that_step_is_an_error(obs):
    result = run(obs, step_index=3, dtype="bfloat16")
    assert result.status == "error" and "no forward recorded at step 3" in result.message
