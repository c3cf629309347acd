"""specs/premul_sum_reduce_scatter_one_rank.yaml judged on hand-written one-rank NCCL observations.

No GPU here: the spec is skipped whole on this CPU build (tests/cli/test_gates.py shows how). Its
entries are held against what torch 2.11 did on an H200 (issue 39: all_reduce 1.0, reduce_scatter
2.0): every entry holds and the deviation is known; against a torch that applies the factor the
shortcut entry fails and the deviation asks for the spec to be updated; outside its range or build
every entry is skipped with the reason.
"""

from __future__ import annotations

from harness.judge.evaluate import evaluate_spec
from harness.load.spec import load_spec
from tests.support import REPO
from tests.support.observations import walkthrough_observation

SPEC = REPO / "specs" / "premul_sum_reduce_scatter_one_rank.yaml"


def observation(torch_version="2.11.0+cu130", cuda="13.0", **values):
    obs = walkthrough_observation()
    obs["environment"].update(
        torch_version=torch_version, torch_cuda_version=cuda, backend="nccl", device_type="cuda", world_size=1
    )
    obs["environment"].update(mesh_shape=[1], observed_ranks=[0])
    rank = obs["ranks"][0]
    measured = {"world_size": 1, "all_reduce": 1.0, "reduce_scatter": 2.0}  # H200, torch 2.11
    rank["custom"] = [{"step_index": 0, "values": {**measured, **values}}]
    obs["ranks"] = [rank]
    return obs


def statuses(obs):
    return {r.entry.id: r.status for r in evaluate_spec(load_spec(SPEC), obs)}


def test_what_torch_2_11_did_holds_and_the_deviation_is_known():
    assert statuses(observation()) == {
        "one_rank": "pass",
        "all_reduce_applies_the_factor": "pass",
        "reduce_scatter_ignores_the_factor": "pass",
        "reduce_scatter_applies_the_factor": "xfail",
    }


def test_a_torch_that_applies_the_factor_fails_the_shortcut_entry_and_asks_for_an_update():
    assert statuses(observation(reduce_scatter=1.0)) == {
        "one_rank": "pass",
        "all_reduce_applies_the_factor": "pass",
        "reduce_scatter_ignores_the_factor": "fail",
        "reduce_scatter_applies_the_factor": "xpass",
    }
    assert statuses(observation(all_reduce=2.0))["all_reduce_applies_the_factor"] == "fail"


def test_outside_its_range_or_on_a_cpu_build_every_entry_is_skipped():
    assert set(statuses(observation(torch_version="2.10.0+cu128")).values()) == {"skip"}
    assert set(statuses(observation(torch_version="2.13.0+cpu", cuda=None)).values()) == {"skip"}
