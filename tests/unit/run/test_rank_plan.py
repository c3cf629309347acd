"""The rank's plan (``harness.run.rank.plan.plan_rank``): mode, init and numerics decided up front
from the setup and the world, with no torch objects, for every combination the rank body runs."""

from __future__ import annotations

import dataclasses

import pytest

from harness.load.setup import RunSetup
from harness.run.rank.plan import INITS, MODES, NUMERICS, RankPlan, plan_rank

SCHEDULE = {"loss": "sum", "steps": [{}, {}]}


def _setup(**data) -> RunSetup:
    return RunSetup.from_mapping({"mesh": {"shape": [4]}, **data})


@pytest.mark.parametrize(
    "data, simulated, expected",
    [
        # the walkthrough's default: a replica on every rank, so every rank builds the full model
        ({}, False, ("real", "full", "each_rank", False)),
        ({"numerics_reference": "rank_0"}, False, ("real", "meta", "rank_0", True)),
        ({"numerics": False}, False, ("real", "local", "off", True)),
        ({"schedule": SCHEDULE}, False, ("real", "full", "schedule", False)),
        ({"numerics": False, "schedule": SCHEDULE}, False, ("real", "local", "off", True)),
        ({"init": "meta"}, False, ("real", "meta", "each_rank", True)),
        ({"init": "full", "numerics": False}, False, ("real", "full", "off", False)),
        # simulated: no data, so no numerics, and never a meta init of a real rank's kind; its
        # init is the real rank's, which it records (fully_shard_calls' device "before")
        ({}, True, ("simulated", "full", "off", False)),
        ({"numerics": False}, True, ("simulated", "local", "off", False)),
        ({"numerics_reference": "rank_0"}, True, ("simulated", "meta", "off", False)),
        ({"init": "meta"}, True, ("simulated", "meta", "off", False)),
    ],
)
def test_mode_init_and_numerics(data, simulated, expected):
    plan = plan_rank(_setup(**data), 1, 4, simulated=simulated)
    assert (plan.mode, plan.init, plan.numerics, plan.meta_init) == expected
    assert plan.mode in MODES and plan.init in INITS and plan.numerics in NUMERICS
    assert plan.simulated is simulated


def test_rows_are_the_ranks_samples_or_the_simulated_ranks_own():
    setup = _setup()
    B = setup.batch_per_rank
    assert plan_rank(setup, 3, 4).rows == (3 * B, 4 * B)  # rank r takes samples r*B .. r*B+B-1
    assert plan_rank(setup, 3, 4, simulated=True).rows == (0, B)  # a simulated rank makes only its own rows


def test_parameter_updates_are_recorded_for_a_real_schedule_only():
    assert plan_rank(_setup(schedule=SCHEDULE), 0, 4).param_updates
    assert not plan_rank(_setup(schedule=SCHEDULE), 0, 4, simulated=True).param_updates
    assert not plan_rank(_setup(), 0, 4).param_updates


def test_a_world_of_another_size_is_refused():
    with pytest.raises(ValueError, match=r"world size 2 but setup.mesh.shape \[4\] needs 4"):
        plan_rank(_setup(), 0, 2)


def test_the_plan_holds_no_torch_objects():
    plan = plan_rank(_setup(), 0, 4)
    assert isinstance(plan, RankPlan)
    for f in dataclasses.fields(plan):
        value = getattr(plan, f.name)
        assert type(value).__module__ == "builtins", (f.name, type(value))
