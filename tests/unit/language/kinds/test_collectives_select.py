"""The collectives kind's ``select`` (harness/language/kinds/collectives.py): null is a value it
matches, as the observation writes it for a collective outside every FSDP hook and unit."""

from __future__ import annotations

import copy

import pytest

from harness.judge.checks import check
from harness.language.entry import make_entry
from harness.language.kinds.collectives import check_select
from harness.language.vocabulary import Context
from tests.support.observations import walkthrough_observation

CTX = Context(world_size=4, mesh_dim_names=("dp",), num_layers=2, unit_names=("layers.0", "layers.1", ""))


def _with_clip_all_reduce(obs):
    """The walkthrough observation plus, on every rank, one all-reduce outside any FSDP hook and
    unit (what clip_grad_norm_'s norm all-reduce looks like)."""
    obs = copy.deepcopy(obs)
    for doc in obs["ranks"]:
        for c in doc["collectives"]:  # the synthetic FSDP collectives name no hook; a real run's do
            c["hook"] = c.get("hook") or ("post_backward_reduce" if c["op"] == "reduce_scatter" else "pre_forward")
        c = dict(doc["collectives"][0])
        c.update(
            op="all_reduce",
            hook=None,
            unit=None,
            fsdp_label=None,
            phase="clip_grad_norm",
            reduce_op="sum",
            numel_in=1,
            numel_out=1,
            buffer_bytes=4,
            dtype="float32",
            element_size=4,
        )
        doc["collectives"].append(c)
    return obs


@pytest.mark.parametrize(
    "select",
    [
        {"hook": None},
        {"unit": None},
        {"fsdp_label": None},
        {"reduce_op": None},
        {"unit": [None, "layers.0"]},
        {"not": {"hook": None}},
    ],
)
def test_null_selects_load(select):
    assert check_select(select, CTX) is None


@pytest.mark.parametrize(
    "select, says",
    [({"hook": 3}, "hook: expected a string, null"), ({"unit": [None, "layers.7"]}, "no FSDP unit named 'layers.7'")],
)
def test_bad_selects_are_refused(select, says):
    assert says in check_select(select, CTX)


def test_null_hook_and_unit_select_the_collective_outside_fsdp():
    obs = _with_clip_all_reduce(walkthrough_observation())
    for select in ({"hook": None}, {"unit": None}):
        entry = make_entry("collectives", {"select": select, "count": 1, "op": "all_reduce"}, id="outside")
        assert check(entry, obs).status == "pass", check(entry, obs).explain()
    wrong = check(make_entry("collectives", {"select": {"unit": None}, "count": 2}, id="outside"), obs)
    assert wrong.status == "fail" and wrong.fields[0].failed_ranks == [0, 1, 2, 3]
    inside = make_entry("collectives", {"select": {"not": {"hook": None}}, "count": 6}, id="inside")
    assert check(inside, obs).status == "pass", check(inside, obs).explain()
