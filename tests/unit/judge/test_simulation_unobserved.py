"""The judge on a simulated (fake backend) run: an entry that reads what fake tensors cannot hold
(values, parameter updates, peaks, a device kernel's error message) is skipped with the reason; every other field of
the same kinds is still checked, and a wrong expectation there still fails."""

from __future__ import annotations

import pytest

from harness.judge.evaluate import evaluate_item
from harness.language.entry import make_entry
from harness.load.spec import SpecItem
from tests.support.observations import walkthrough_observation


def _simulated(simulated: bool = True) -> dict:
    obs = walkthrough_observation()
    obs["environment"]["simulated"] = simulated
    for r in obs["ranks"]:  # what a simulated clip_grad_norm_ records: no value, no reference
        r["grad_norms"] = [
            {"step_index": 0, "value": None, "local_value": None, "reference": None, "shard_reference": None}
            | {"is_dtensor": True, "placements": ["Replicate()"], "dtype": "float32", "max_norm": 1.0}
            | {"norm_type": 2.0, "clip_coef": None, "reference_clip_coef": None}
        ]
    return obs


def _judge(obs: dict, kind: str, **values):
    return evaluate_item(SpecItem(make_entry(kind, values, id="e")), obs)


@pytest.mark.parametrize(
    "kind, values, words",
    [
        ("grad_norm", {"rel_diff": "<= 1e-6"}, "holds no values (fake tensors): rel_diff not observed"),
        ("grad_norm", {"clip_coef": 1.0, "placements": ["Replicate()"]}, "clip_coef not observed"),
        ("param_update", {"param": "self_attn.q_proj.weight", "rows_changed": 512}, "records no parameter updates"),
        ("param", {"param": "self_attn.q_proj.weight", "layer": 0, "finite": True}, "finite not observed"),
        ("memory", {"layer": 0, "state": "Peak Backward", "sharded_grad": 0}, "its peaks are not a real rank's"),
        ("memory", {"layer": 0, "state": "After Pre-Forward", "temp": 0}, "temp not observed"),
        ("collectives", {"select": {"op": "all_to_all"}, "count": 4}, "carry what the router chose"),
    ],
)
def test_what_fake_tensors_cannot_hold_is_skipped_with_the_reason(kind, values, words):
    result = _judge(_simulated(), kind, **values)
    assert result.status == "skip" and words in result.message, result.message


def test_the_same_kinds_structural_fields_are_still_checked():
    obs = _simulated()
    assert _judge(obs, "grad_norm", placements=["Replicate()"], is_dtensor=True).status == "pass"
    wrong = _judge(obs, "grad_norm", placements=["Shard(dim=0)"])
    assert wrong.status == "fail", wrong.message
    assert _judge(obs, "param", param="self_attn.q_proj.weight", layer=0, local_shape=[128, 512]).status == "pass"
    assert _judge(obs, "param", param="self_attn.q_proj.weight", layer=0, local_shape=[127, 512]).status == "fail"
    assert _judge(obs, "memory", layer=0, state="After Pre-Forward", unsharded_param="4.72 MB").status == "pass"
    assert _judge(obs, "memory", layer=0, state="After Pre-Forward", unsharded_param="4.73 MB").status == "fail"


def test_an_entry_selecting_other_ops_beside_all_to_all_is_still_checked():
    obs = _simulated()
    assert _judge(obs, "collectives", select={"op": ["all_to_all", "all_gather"]}, count=0).status == "fail"
    assert _judge(obs, "collectives", select={"op": "all_gather", "layer": 0}, count=2).status == "pass"


def test_a_real_run_is_not_skipped():
    result = _judge(_simulated(False), "param_update", param="self_attn.q_proj.weight", rows_changed=512)
    assert result.status == "error" and "no parameter updates recorded" in result.message


def test_an_error_whose_message_alone_differs_is_skipped_and_the_rest_is_checked():
    obs = _simulated()
    meta = "_foreach_norm cannot compute infinity norm on empty tensor"  # the meta kernel's words
    for r in obs["ranks"]:
        r["error"] = {"type": "RuntimeError", "qualname": "builtins.RuntimeError", "message": meta, "phase": "x"}
    cpu = {"matches": "_foreach_norm cannot compute the infinity norm on an empty tensor"}
    result = _judge(obs, "expect_error", ranks=[0], raised=True, type="RuntimeError", message=cpu)
    assert result.status == "skip" and "meta kernel" in result.message and meta in result.message
    assert _judge(obs, "expect_error", ranks=[0], raised=True, type="ValueError", message=cpu).status == "fail"
    assert _judge(obs, "expect_error", ranks=[0], raised=True, phase="backward").status == "fail"
    assert _judge(obs, "expect_error", ranks=[0], raised=True, type="RuntimeError").status == "pass"
    obs["environment"]["simulated"] = False  # a real run's message is checked
    assert _judge(obs, "expect_error", ranks=[0], raised=True, message=cpu).status == "fail"
