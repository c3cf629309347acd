"""The instrument switch (``RunSetup.instruments``): a run records the fields of the instruments it
turns on, as a run with every one records them, and leaves the others' fields empty.

Simulated runs (the fake backend, in this process) cover every instrument a simulation has; one
slow run on gloo ranks covers the two that only real ranks have (the replica, parameter updates).
"""

from __future__ import annotations

import dataclasses
import functools
import json

import pytest

from harness.contract.instrument_names import INSTRUMENTS
from harness.load.setup import RunSetup
from harness.report.compare import flatten_observation
from harness.run.runner import run_setup
from tests.support.specs import TINY_DIMS

EMPTY = ([], None, {"before": [], "calls": []})
"""What a field of an instrument left off holds (``fully_shard_calls``: its empty record)."""

_SIMULATED = ("collectives", "events", "memory", "param_states", "fully_shard_calls", "params", "steps", "grads")


def _setup(**extra) -> RunSetup:
    return RunSetup.from_mapping(
        {
            "model": {"overrides": TINY_DIMS, "dtype": "float32"},
            "mesh": {"shape": [2], "dim_names": ["dp"]},
            "schedule": {"steps": [{"clip_grad_norm": {"max_norm": 1.0}}, {}]},
            **extra,
        }
    )


def _run(setup: RunSetup, names, backend: str = "fake") -> dict:
    return run_setup(dataclasses.replace(setup, instruments=names), backend=backend, timeout_s=600)


@functools.cache
def _all_simulated() -> dict:
    return _run(_setup(), None)


def _fields(doc: dict, fields) -> dict:
    """The flattened values of ``fields`` (timings and process ids left out, as ``compare`` does)."""
    return {k: v for k, v in flatten_observation(doc).items() if k.part in fields}


def _left_empty(doc: dict, on) -> list[str]:
    """The fields of instruments not in ``on`` that hold something, as "rank r: field"."""
    off = [f for name, fields in INSTRUMENTS.items() if name not in on for f in fields]
    return [f"rank {e['rank']}: {f}" for e in doc["ranks"] for f in off if e.get(f) not in EMPTY]


@pytest.mark.parametrize("name", _SIMULATED)
def test_one_instrument_records_its_fields_and_only_them(name):
    fields = INSTRUMENTS[name]
    alone, every = _run(_setup(), (name,)), _all_simulated()
    recorded = _fields(alone, fields)
    assert recorded, f"{name} recorded nothing"
    assert recorded == _fields(every, fields)
    assert _left_empty(alone, {name}) == []


def test_every_instrument_on_fills_every_field_a_simulation_has():
    every = _all_simulated()
    for name in _SIMULATED:
        assert _fields(every, INSTRUMENTS[name]), name
    assert _left_empty(_run(_setup(), ()), set()) == []


def test_an_unknown_instrument_is_refused_before_any_rank_starts():
    with pytest.raises(ValueError, match=r"unknown instrument\(s\) \['tracker'\]; expected some of \['collectives'"):
        _run(_setup(), ("memory", "tracker"), backend="gloo")


@pytest.mark.slow
def test_the_replica_and_the_update_tracker_follow_their_switches_on_real_ranks():
    setup = _setup(optimizer={"name": "adamw", "lr": 0.01})
    plain = _run(setup, (), backend="gloo")
    measured = _run(setup, ("numerics", "updates"), backend="gloo")
    assert _left_empty(plain, set()) == []
    assert all(e["numerics"] is None and "param_updates" not in e for e in plain["ranks"])
    assert all(e["numerics"] is not None and e["param_updates"] for e in measured["ranks"])
    assert _left_empty(measured, {"numerics", "updates"}) == []


def test_the_setup_names_its_instruments_only_where_a_subset_was_chosen():
    """A run with every instrument writes the setup it wrote before the switch existed."""
    assert "instruments" not in _setup().to_dict()
    assert dataclasses.replace(_setup(), instruments=("memory",)).to_dict()["instruments"] == ["memory"]


COLLECTIVES_ONLY = """\
spec: collectives_only
title: a spec that reads only collectives
document: a document
setup:
  model: {config: walkthrough, overrides: {num_hidden_layers: 2}}
  mesh: {shape: [2], dim_names: [dp]}
tables:
  - section: "Forward"
    title: gathers
    check: collectives
    entries:
      - {id: one_gather_per_layer, select: {phase: forward, op: all_gather, layer: 0}, count: 1}
"""


@pytest.mark.slow
def test_a_spec_reading_only_collectives_starts_no_tracker_and_no_replica(tmp_path):
    """``harness run`` of a spec whose one entry reads collectives: its setup keeps numerics and
    the memory tracker on, yet the run records the collectives alone: no memory snapshot, no
    replica (no numerics, no replica time), the other instruments' fields empty."""
    from harness.cli import main
    from tests.support.specs import write_spec

    spec = write_spec(tmp_path, COLLECTIVES_ONLY, "collectives_only.yaml")
    assert main(["run", str(spec), "--json", str(tmp_path / "out.json")]) == 0
    doc = next(iter(json.loads((tmp_path / "out.json").read_text())["observations"].values()))
    assert doc["setup"]["instruments"] == ["collectives"]
    assert doc["setup"]["numerics"] is True and doc["setup"]["track_memory"] is True
    for entry in doc["ranks"]:
        assert entry["memory"] == [] and entry["numerics"] is None and "replica" not in entry["timings_s"]
        assert entry["collectives"]
    assert _left_empty(doc, {"collectives"}) == []
