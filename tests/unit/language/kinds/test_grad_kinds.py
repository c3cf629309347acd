"""Check kinds grads and unit_dtypes on a hand-written observation (layers.0 frozen at step 0 and
trainable at step 1; layers.1 trainable throughout): counts add up over parameters and steps,
dtypes and shapes are the selected records' common value, null where there is none, and a wrong
figure fails that field only. The real runs: specs/unfreeze_between_steps.yaml,
unfreeze_after_frozen_first_forward.yaml, grad_dtype_dropped.yaml."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

from harness.judge.checks import check
from harness.language.entry import make_entry
from tests.support import REPO
from tests.support.observations import walkthrough_observation

SCHEMA = json.loads((REPO / "harness" / "contract" / "observation.schema.json").read_text())


def _grads(obs, step: int) -> list[dict]:
    out = []
    for unit in obs["fsdp_units"]:
        for fqn in unit["params"]:
            trains = unit["name"] == "layers.1" or step == 1
            out.append(
                {
                    "step_index": step,
                    "fqn": fqn,
                    "requires_grad": trains,
                    "grad_dtype": "bfloat16" if trains else None,
                    "grad_local_shape": ([128, 512] if fqn.endswith("q_proj.weight") else [4]) if trains else None,
                    "param_grad_dtype": "bfloat16",
                }
            )
    return out


def _unit_dtypes(step: int) -> list[dict]:
    return [
        {"step_index": step, "microbatch": 0, "unit": "layers.0", "orig_dtype": None, "reduce_dtype": None,
         "trainable": 11 * step, "params": 11},
        {"step_index": step, "microbatch": 0, "unit": "layers.1", "orig_dtype": "float32",
         "reduce_dtype": "float32", "trainable": 11, "params": 11},
    ]  # fmt: skip


@pytest.fixture(scope="module")
def obs():
    doc = walkthrough_observation()
    for r in doc["ranks"]:
        r["grads"] = _grads(doc, 0) + _grads(doc, 1)
        r["unit_dtypes"] = _unit_dtypes(0) + _unit_dtypes(1)
    return doc


def run(obs, kind, **values):
    return check(make_entry(kind, values, id="e", spec="specs/x.yaml", line=3, section="S"), obs)


def field(result, name):
    return next(f for f in result.fields if f.field == name)


def test_the_hand_written_observation_is_schema_valid(obs):
    Draft202012Validator(SCHEMA).validate(obs)


@pytest.mark.parametrize(
    "values",
    [
        {"layer": 0, "step_index": 0, "params": 11, "trainable": 0, "with_grad": 0, "grad_dtype": None},
        {"layer": 0, "step_index": 1, "trainable": 11, "with_grad": 11, "grad_dtype": "bfloat16"},
        {"layer": 1, "trainable": 22, "with_grad": 22, "params": 11},  # both steps add up
        {"params": 22, "with_grad": 33, "param_grad_dtype": "bfloat16", "grad_dtype": "bfloat16"},
        {"layer": 0, "param": "self_attn.q_proj.weight", "step_index": 0, "grad_local_shape": None},
        {"fqn": "layers.0.self_attn.q_proj.weight", "step_index": 1, "grad_local_shape": [128, 512]},
    ],
)
def test_grads_count_and_select(obs, values):
    result = run(obs, "grads", **values)
    assert result.status == "pass", result.explain()


def test_grads_wrong_figures_fail_their_field_only(obs):
    result = run(obs, "grads", layer=0, step_index=0, trainable=0, with_grad=11)
    assert result.status == "fail" and field(result, "trainable").ok and not field(result, "with_grad").ok
    result = run(obs, "grads", layer=1, step_index=1, grad_dtype="float32")
    assert result.status == "fail" and "bfloat16" in result.explain()
    shapes = run(obs, "grads", layer=0, param="self_attn.q_proj.weight", grad_local_shape=[128, 512])
    assert shapes.status == "fail"  # step 0 has no gradient: the steps' shapes differ


def test_grads_not_recorded_is_an_error(obs):
    result = run(walkthrough_observation(), "grads", with_grad=0)
    assert result.status == "error" and "no gradient record" in result.explain()
    assert run(obs, "grads", step_index=2, with_grad=0).status == "error"


@pytest.mark.parametrize(
    "values",
    [
        {"layer": 0, "step_index": 0, "orig_dtype": None, "reduce_dtype": None, "trainable": 0},
        {"layer": 0, "step_index": 1, "orig_dtype": None, "reduce_dtype": None, "trainable": 11},
        {"layer": 1, "orig_dtype": "float32", "reduce_dtype": "float32", "trainable": 11, "units": 1},
        {"role": "layer", "step_index": 1, "units": 2, "trainable": 22},
    ],
)
def test_unit_dtypes_select(obs, values):
    result = run(obs, "unit_dtypes", **values)
    assert result.status == "pass", result.explain()


def test_unit_dtypes_wrong_figures_fail(obs):
    result = run(obs, "unit_dtypes", layer=0, step_index=1, orig_dtype="float32", trainable=11)
    assert result.status == "fail" and not field(result, "orig_dtype").ok and field(result, "trainable").ok
    assert run(obs, "unit_dtypes", role="layer", step_index=0, reduce_dtype="float32").status == "fail"  # null and fp32
    assert run(obs, "unit_dtypes", layer=0, trainable=11).status == "fail"  # step 0 had 0


def test_unit_dtypes_of_a_unit_without_parameters_is_an_error(obs):
    result = run(obs, "unit_dtypes", unit="root", units=1)
    assert result.status == "error" and "no resolved unit dtypes" in result.explain()
