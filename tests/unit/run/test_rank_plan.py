"""The rank's plan (``harness.run.rank.plan.plan_rank``): mode, init and numerics decided up front
from the setup and the world, with no torch objects, for every combination the rank body runs."""

from __future__ import annotations

import dataclasses

import pytest

from harness.contract.instrument_names import INSTRUMENTS
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


def test_without_the_numerics_instrument_no_replica_runs_and_the_weights_stay():
    """The init is the setup's (full, for a replica), so the weights are those of a run with numerics."""
    plain = plan_rank(dataclasses.replace(_setup(), instruments=()), 1, 4)
    assert (plain.init, plain.numerics, plain.instruments) == ("full", "off", frozenset())
    assert plan_rank(_setup(), 1, 4).instruments == frozenset(INSTRUMENTS)  # default: every instrument


def test_parameter_updates_follow_their_instrument_unless_the_schedules_numerics_compare_them():
    schedule = _setup(schedule=SCHEDULE)
    assert plan_rank(dataclasses.replace(schedule, instruments=("numerics",)), 0, 4).param_updates
    no_numerics = _setup(schedule=SCHEDULE, numerics=False)
    assert not plan_rank(dataclasses.replace(no_numerics, instruments=("memory",)), 0, 4).param_updates
    assert plan_rank(dataclasses.replace(no_numerics, instruments=("updates",)), 0, 4).param_updates


def test_an_unknown_instrument_is_refused_by_name():
    with pytest.raises(ValueError, match=r"setup.instruments: unknown instrument\(s\) \['profiler'\]; expected"):
        plan_rank(dataclasses.replace(_setup(), instruments=("profiler",)), 0, 4)
