"""The ``all_gather_extension`` check kind on a hand-written observation (rank
``all_gather_extensions``). The real run: specs/all_gather_extension.yaml; the recorder:
tests/unit/run/test_all_gather_extensions.py."""

from __future__ import annotations

import jsonschema
import pytest

from harness.contract.observation import load_schema
from harness.judge.checks import check
from harness.language.entry import make_entry
from tests.support.observations import walkthrough_observation

FQN = "layers.0.self_attn.q_proj.weight"


def _call(call: str, phase: str, into_out: bool | None) -> dict:
    pre = call == "pre"
    return {
        "fqn": FQN,
        "call": call,
        "step_index": 0,
        "microbatch": 0,
        "phase": phase,
        "received_dtypes": ["float32"] if pre else ["bfloat16"],
        "received_shapes": [[32, 64]] if pre else [[64, 64]],
        "returned_dtypes": ["bfloat16"] if pre else ([] if into_out else ["float32"]),
        "returned_shapes": [[32, 64]] if pre else ([] if into_out else [[64, 64]]),
        "metadata": None,
        "param_dtype": None if pre else "float32",
        "into_out": None if pre else into_out,
    }


@pytest.fixture
def obs():
    doc = walkthrough_observation()
    for r in doc["ranks"]:
        r["all_gather_extensions"] = [
            _call("pre", "forward", None),
            _call("post", "forward", False),
            _call("pre", "backward", None),
            _call("post", "backward", True),
        ]
    return doc


def run(obs, **values):
    entry = make_entry("all_gather_extension", values, id="t", section="S", table="t", spec="x.yaml", line=1)
    return check(entry, obs)


def test_the_records_are_schema_valid(obs):
    jsonschema.Draft202012Validator(load_schema()).validate(obs)


def test_pre_and_post_by_phase(obs):
    assert run(obs, call="pre", fqn=FQN, calls=2, received_dtypes=["float32"], returned_dtypes=["bfloat16"]).ok
    assert run(obs, call="post", fqn=FQN, phase="forward", returned_dtypes=["float32"], into_out=False).ok
    assert run(obs, call="post", fqn=FQN, phase="backward", returned_dtypes=[], into_out=True).ok


def test_a_wrong_expectation_fails_on_that_field(obs):
    result = run(obs, call="post", fqn=FQN, phase="forward", into_out=True, received_dtypes=["bfloat16"])
    assert [f.field for f in result.fields if not f.ok] == ["into_out"]


def test_no_call_is_an_error(obs):
    result = run(obs, call="pre", fqn="layers.0.mlp.up_proj.weight", calls=1)
    assert result.status == "error" and "no fsdp_pre_all_gather call recorded" in result.message
