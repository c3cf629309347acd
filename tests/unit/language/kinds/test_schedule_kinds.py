"""The check kinds of the schedule, measured on a hand-written observation: events (order and
sequence), param_update, grad_norm, and the step_index/microbatch selectors on existing kinds.

The schedule's setup keys, load errors, step plan and reference: tests/unit/load/test_schedule.py;
the real runs are the shipped specs (specs/grad_accumulation.yaml, event_order.yaml, ...)."""

from __future__ import annotations

import copy

import jsonschema
import pytest

from harness.contract.observation import load_schema
from harness.judge.checks import check
from harness.language.entry import make_entry
from tests.support.observations import walkthrough_observation


def _events() -> list[dict]:
    def e(event, unit, source="fsdp", state=None, phase="forward", mb=0):
        return {
            "event": event,
            "unit": unit,
            "source": source,
            "training_state": state,
            "phase": phase,
            "step_index": 0,
            "microbatch": mb,
        }

    return [
        e("root_pre_forward", None, state="FORWARD"),
        e("pre_forward", "layers.0", state="FORWARD"),
        e("all_gather", "layers.0", state="FORWARD"),
        e("unshard", "layers.0", "harness"),
        e("post_forward", "layers.0", state="FORWARD"),
        e("reshard", "layers.0", "harness"),
        e("pre_forward", "layers.1", state="FORWARD"),
        e("all_gather", "layers.1", state="FORWARD"),
        e("unshard", "layers.1", "harness"),
        e("post_forward", "layers.1", state="FORWARD"),
        e("pre_backward", "layers.1", state="PRE_BACKWARD", phase="backward"),
        e("post_backward_reduce", "layers.1", state="POST_BACKWARD", phase="backward"),
        e("reshard", "layers.1", "harness", phase="backward"),
    ]


def _updates(step: int) -> list[dict]:
    return [
        {
            "step_index": step,
            "fqn": "layers.1.mlp.up_proj.weight",
            "rows": 256,
            "rows_changed": 256 if step else 0,
            "unchanged_rows": [] if step else list(range(512, 576)),
            "max_abs_update": 0.0,
            "max_abs_diff": 1e-7 * (step + 1),
            "max_abs_ref": 0.1,
            "ref_rows_changed": 256 if step else 0,
            "same_rows_as_reference": True,
        },
        {
            "step_index": step,
            "fqn": "layers.1.mlp.gate_proj.weight",
            "rows": 256,
            "rows_changed": 256,
            "unchanged_rows": [],
            "max_abs_update": 1e-3,
            "max_abs_diff": 2e-7,
            "max_abs_ref": 0.1,
            "ref_rows_changed": 256,
            "same_rows_as_reference": True,
        },
    ]


@pytest.fixture(scope="module")
def obs():
    doc = walkthrough_observation()
    for r in doc["ranks"]:
        for c in r["collectives"]:
            c.update(step_index=0, microbatch=0)
        r["events"] = _events()
        r["param_updates"] = _updates(0) + _updates(1)
        r["grad_norms"] = [
            {
                "step_index": 0,
                "max_norm": 1.0,
                "norm_type": 2.0,
                "value": 3.0,
                "is_dtensor": True,
                "placements": ["Replicate()"],
                "dtype": "float32",
                "reference": 3.0 + 3e-7 * r["rank"],
            }
        ]
    return doc


def run(kind: str, obs, **values):
    return check(make_entry(kind, values, id="t", section="S", table="t", spec="x.yaml", line=1), obs)


def test_the_hand_written_observation_is_schema_valid(obs):
    jsonschema.Draft202012Validator(load_schema()).validate(obs)


def test_events_order_and_sequence(obs):
    assert (
        run(
            "events",
            obs,
            events=["reshard layers.0", "all_gather layers.1"],
            order=["reshard layers.0", "all_gather layers.1"],
        ).status
        == "pass"
    )
    result = run(
        "events",
        obs,
        events=["reshard layers.0", "all_gather layers.1"],
        order=["all_gather layers.1", "reshard layers.0"],
    )
    assert result.status == "fail" and "observed [reshard layers.0, all_gather layers.1]" in result.explain()
    assert (
        run(
            "events",
            obs,
            phase="forward",
            source="harness",
            sequence=["unshard layers.0", "reshard layers.0", "unshard layers.1"],
        ).status
        == "pass"
    )
    assert run("events", obs, events=["*_forward*"], training_state="FORWARD", count=5).status == "pass"
    assert run("events", obs, events=["root_pre_forward"], count=1).status == "pass"  # a label naming no unit
    assert run("events", obs, phase="backward", microbatch=1, count=0).status == "pass"


def test_events_missing_is_an_error(obs):
    old = copy.deepcopy(obs)
    del old["ranks"][2]["events"]
    result = run("events", old, count=1)
    assert result.status == "error" and "rank 2: no events recorded" in result.message


def test_param_update_aggregates_and_selects(obs):
    assert (
        run(
            "param_update",
            obs,
            layer=1,
            param="mlp.up_proj.weight",
            step_index=0,
            rows_changed=0,
            rows_unchanged=256,
            unchanged_rows=list(range(512, 576)),
        ).status
        == "pass"
    )
    assert (
        run(
            "param_update",
            obs,
            params=2,
            rows=1024,
            rows_changed=768,
            all_rows_changed=False,
            max_abs_diff=2e-7,
            same_rows_as_reference=True,
            ref_rows_changed=768,
        ).status
        == "pass"
    )
    assert run("param_update", obs, step_index=1, all_rows_changed=True, rel_diff="<= 3e-6").status == "pass"
    result = run("param_update", obs, step_index=0, all_rows_changed=True)
    assert result.status == "fail" and "false" in result.explain()
    result = run("param_update", obs, fqn="layers.0.mlp.up_proj.weight", rows=1)
    assert result.status == "error" and "no parameter update for ['layers.0.mlp.up_proj.weight']" in result.message


def test_param_update_without_a_reference_has_no_diff(obs):
    plain = copy.deepcopy(obs)
    for r in plain["ranks"]:
        for u in r["param_updates"]:
            for k in ("max_abs_diff", "max_abs_ref", "ref_rows_changed", "same_rows_as_reference"):
                del u[k]
    assert run("param_update", plain, rows=1024).status == "pass"
    result = run("param_update", plain, max_abs_diff="<= 1")
    assert result.status == "error" and "field 'max_abs_diff' not observed" in result.message


def test_grad_norm(obs):
    assert (
        run(
            "grad_norm", obs, placements=["Replicate()"], is_dtensor=True, clipped=True, value=3.0, rel_diff="<= 1e-6"
        ).status
        == "pass"
    )
    result = run("grad_norm", obs, abs_diff="<= 5e-7")
    assert result.status == "fail" and result.fields[0].failed_ranks == [2, 3]
    result = run("grad_norm", obs, step_index=1, value=3.0)
    assert result.status == "error" and "no clip_grad_norm_ recorded at step 1" in result.message


def test_position_selectors_on_existing_kinds(obs):
    later = copy.deepcopy(obs)
    for r in later["ranks"]:
        r["collectives"][-1].update(step_index=1, microbatch=1)
        for s in r["steps"]:
            s.update(step_index=0, microbatch=0)
        r["steps"][-1].update(step_index=1)
        for m in r["memory"]:
            m.update(step_index=0, microbatch=0)
        r["memory"].append({**r["memory"][0], "step_index": 1, "microbatch": 0, "bytes": {"unsharded_param": 7}})
    assert (
        run(
            "collectives",
            later,
            select={"step_index": 1, "microbatch": 1},
            count=1,
            sequence=["reduce_scatter layers.0"],
        ).status
        == "pass"
    )
    assert run("collectives", later, select={"step_index": 0}, count=5).status == "pass"
    assert run("step", later, step="step10.output", step_index=0, layers=1).status == "pass"
    assert run("memory", later, layer=0, state="After Pre-Forward", step_index=1, unsharded_param=7).status == "pass"
    assert run("memory", later, layer=0, state="After Pre-Forward", unsharded_param=7).status == "fail"  # the first one
    result = run("memory", later, layer=0, state="After Pre-Forward", step_index=2, unsharded_param=7)
    assert result.status == "error" and "at {'step_index': 2}" in result.message


def _partial_max_obs(obs):
    """The hand-written observation with an inf norm: Partial(max), each rank's local value its own
    shard's maximum (rank r: 1 + r, so rank 3 holds the full norm 4), gradients scaled by 0.1."""
    doc = copy.deepcopy(obs)
    for r in doc["ranks"]:
        local = 1.0 + r["rank"]
        r["grad_norms"][0].update(
            norm_type=float("inf"),
            placements=["Partial(max)"],
            value=4.0,
            local_value=local,
            reference=4.0,
            shard_reference=local * (1 + 1e-7),
            clip_coef=0.1 * (1 + 2e-7 * r["rank"]),
            reference_clip_coef=0.1,
        )
    return doc


def test_grad_norm_local_value_per_rank(obs):
    doc = _partial_max_obs(obs)
    assert run("grad_norm", doc, ranks=[3], local_value=4.0, local_equals_value=True).status == "pass"
    result = run("grad_norm", doc, local_equals_value=True)
    assert result.status == "fail" and result.fields[0].failed_ranks == [0, 1, 2]
    assert run("grad_norm", doc, ranks=[1], local_value=2.0, local_shard_rel_diff="<= 2e-7").status == "pass"
    result = run("grad_norm", doc, local_shard_rel_diff="<= 1e-8")
    assert result.status == "fail" and result.fields[0].failed_ranks == [0, 1, 2, 3]
    # a Replicate() norm: every rank's local value is the full one
    replicated = copy.deepcopy(obs)
    for r in replicated["ranks"]:
        r["grad_norms"][0]["local_value"] = 3.0
    assert run("grad_norm", replicated, local_equals_value=True, local_value=3.0).status == "pass"


def test_grad_norm_clip_coef(obs):
    doc = _partial_max_obs(obs)
    assert run("grad_norm", doc, ranks=[0], clip_coef="≈0.1000000", reference_clip_coef=0.1).status == "pass"
    result = run("grad_norm", doc, clip_coef_rel_diff="<= 3e-7")
    assert result.status == "fail" and result.fields[0].failed_ranks == [2, 3]
    result = run("grad_norm", obs, clip_coef=1)  # not recorded (a record without the field)
    assert result.status == "error" and "clip_coef" in result.message


def test_grad_norm_records_with_the_new_fields_are_schema_valid(obs):
    jsonschema.Draft202012Validator(load_schema()).validate(_partial_max_obs(obs))
