"""A rank that died without a result: ``deaths`` in the observation (harness/contract/observation.py)."""

from __future__ import annotations

import pytest

from harness.contract.observation import build_observation
from harness.load.setup import RunSetup

SETUP = RunSetup.from_mapping({"mesh": {"shape": [2], "dim_names": ["dp"]}})
DEATHS = [{"death": {"rank": r, "exit_code": -11, "signal": "SIGSEGV", "phase": "backward"}} for r in (1, 0)]
ENVIRONMENT = {
    "torch_version": "2.13.0+cpu",
    "cuda_version": None,
    "python_version": "3.11.7",
    "backend": "gloo",
    "device_type": "cpu",
}


def test_every_rank_dead_is_an_observation_of_deaths_alone():
    doc = build_observation(SETUP, DEATHS, launcher="local", simulated=False, environment=ENVIRONMENT)
    assert doc["ranks"] == [] and doc["fsdp_units"] == [] and doc["environment"]["observed_ranks"] == []
    assert [d["rank"] for d in doc["deaths"]] == [0, 1] and doc["deaths"][0]["signal"] == "SIGSEGV"


def test_without_a_live_rank_the_environment_must_be_given():
    with pytest.raises(ValueError, match="every rank died"):
        build_observation(SETUP, DEATHS, launcher="local", simulated=False)
