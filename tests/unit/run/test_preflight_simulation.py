"""The pre-flight check of simulated worlds: the run's own estimate of time and memory, no fixed cap
(issue 42 item 3), and refusals whose hints do not go in a circle (issue 41 item 5)."""

from __future__ import annotations

import pytest

from harness.load.setup import RunSetup
from harness.run import preflight
from harness.run.preflight import PYTEST_OPTIONS, PreflightError

PLENTY = 64 * 10**9


def _world(size: int, **extra) -> RunSetup:
    return RunSetup.from_mapping({"mesh": {"shape": [size]}, **extra})


def test_the_estimate_grows_with_the_world_the_parameters_and_the_observed_ranks():
    one = preflight.simulation_estimate(_world(65_536))
    assert (one.parameters, one.observed, one.layers) == (22, 1, 2)  # 2 walkthrough layers of 11
    assert one.seconds == pytest.approx(preflight.SIMULATED_SHARD_S * 22 * 65_536 + 2 * preflight.SIMULATED_LAYER_S)
    assert preflight.simulation_estimate(_world(131_072)).seconds > one.seconds
    three = preflight.simulation_estimate(_world(65_536, observe_ranks=[0, 1, 65_535]))
    assert three.seconds == pytest.approx(3 * one.seconds)
    more = preflight.simulation_estimate(_world(131_072)).bytes - one.bytes  # less the shards, a few bytes smaller
    assert more == pytest.approx(preflight.SIMULATED_SHARD_BYTES * 22 * 65_536, abs=1000)


def test_131072_ranks_of_the_moe_layer_fit_the_default_timeout():
    moe = RunSetup.from_mapping(
        {"model": {"config": "Qwen3-235B-A22B", "overrides": {"num_hidden_layers": 1}}, "mesh": {"shape": [131_072]}}
    )
    est = preflight.check(moe, "fake", memory=PLENTY)
    assert est.seconds < preflight.DEFAULT_TIMEOUT_S


def test_a_simulation_over_its_timeout_is_refused_with_the_estimate_and_a_time_that_would_do():
    with pytest.raises(PreflightError) as refused:
        preflight.check(_world(100_000), "fake", timeout_s=2, memory=PLENTY)
    message = str(refused.value)
    assert "simulating a world of 100,000 ranks would take ~24 s for 1 simulated rank(s)" in message
    assert "over the run's timeout of 2 s" in message
    assert message.endswith(
        "; observe fewer ranks (setup.observe_ranks) or run fewer layers, or allow it the time (--timeout 36)"
    )
    assert "--no-preflight" not in message


def test_an_absurd_world_is_refused_without_suggesting_a_day_of_waiting():
    with pytest.raises(PreflightError, match=r"~\d[\d,]* h for 1 simulated rank") as refused:
        preflight.check(_world(10**12), "fake", memory=PLENTY)
    assert "allow it the time" not in str(refused.value)


def test_too_many_processes_point_at_the_simulation_only_where_it_would_run():
    with pytest.raises(PreflightError) as refused:
        preflight.check(_world(100_000), "gloo", memory=PLENTY)
    assert refused.value.advice.startswith("use --backend fake to simulate it (~24 s for 1 simulated rank(s)")
    assert "--no-preflight" not in str(refused.value)  # it would start 100,000 processes
    with pytest.raises(PreflightError) as both:
        preflight.check(_world(10**12), "auto", memory=PLENTY)
    assert "--backend fake" not in str(both.value) and "--no-preflight" not in str(both.value)
    assert "; simulated, it would be refused too: simulating a world of 1,000,000,000,000 ranks" in str(both.value)


def test_a_memory_refusal_on_a_real_backend_still_offers_both_ways():
    with pytest.raises(PreflightError) as refused:
        preflight.check(_world(4), "gloo", memory=10**6)
    assert refused.value.advice == "use --backend fake to simulate it, or --no-preflight to run anyway"


def test_the_advice_names_the_pytest_plugins_options_there():
    with pytest.raises(PreflightError) as refused:
        preflight.check(_world(100_000), "fake", timeout_s=2, memory=PLENTY)
    assert str(refused.value.for_options(PYTEST_OPTIONS)).endswith("(--fsdp2-run-timeout 36)")
    with pytest.raises(PreflightError) as real:
        preflight.check(_world(4), "gloo", memory=10**6)
    assert real.value.for_options(PYTEST_OPTIONS).advice == (
        "use --fsdp2-backend fake to simulate it, or --fsdp2-no-preflight to run anyway"
    )
