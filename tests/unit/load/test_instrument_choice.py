"""Choosing a run's instruments from what its entries read (harness/load/instrument_choice.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.contract.instrument_names import INSTRUMENTS, instruments_filling, recorded_instruments
from harness.language.entry import make_entry
from harness.load.instrument_choice import chosen_setup, needed_instruments, setup_instruments
from harness.load.setup import RunSetup
from harness.load.spec import load_spec
from tests.support import SPECS, WALKTHROUGH


def _entry(kind: str, **values):
    return make_entry(kind, values, id="e")


@pytest.mark.parametrize(
    "kind, values, needed",
    [
        ("collectives", {"select": {"op": "all_gather"}, "count": 1}, {"collectives"}),
        ("param", {"param": "self_attn.q_proj.weight", "local_shape": [128, 512]}, {"params"}),
        ("params_total", {"local_numel": 1}, {"params"}),
        ("memory", {"state": "After Optimizer Step", "sharded_param": 1}, {"memory"}),
        ("numerics", {"grads_rel_diff": "< 1e-3"}, {"numerics"}),
        ("events", {"count": 1}, {"events"}),
        ("step", {"step": "attn_output", "shape": [1]}, {"steps"}),
        ("param_state", {"point": "after_forward", "count": 1}, {"param_states", "fully_shard_calls", "params"}),
        # a field inside another's part: the replica only where a field computed from it is named
        ("grad_norm", {"placements": ["Replicate()"]}, {"grads"}),
        ("grad_norm", {"rel_diff": "< 1e-3"}, {"grads", "numerics"}),
        ("grad_norm", {"shard_reference": 1.0}, {"grads", "numerics"}),
        ("param_update", {"rows_changed": 1}, {"updates"}),
        ("param_update", {"rel_diff": "< 1e-3"}, {"updates", "numerics"}),
        ("param_update", {"same_rows_as_reference": True}, {"updates", "numerics"}),
        # parts no instrument fills
        ("state_dict", {"param": "self_attn.q_proj.weight", "local_shape": [1]}, set()),
        ("environment", {"same_torch_version": True}, set()),
        ("expect_error", {"raised": True}, set()),
    ],
)
def test_an_entry_needs_the_instruments_filling_what_it_reads(kind, values, needed):
    assert needed_instruments([_entry(kind, **values)]) == needed


def test_a_spec_needs_the_union_of_its_entries_and_nothing_for_none():
    entries = [_entry("collectives", count=1), _entry("memory", sharded_param=1), _entry("param_update", rows=1)]
    assert needed_instruments(entries) == {"collectives", "memory", "updates"}
    assert needed_instruments([]) == frozenset()


def test_the_chosen_setup_names_a_subset_and_leaves_every_instrument_as_none():
    walkthrough = load_spec(WALKTHROUGH)
    chosen = chosen_setup(walkthrough)
    assert chosen.instruments is not None and "memory" in chosen.instruments and "events" not in chosen.instruments
    assert chosen.instruments == tuple(sorted(chosen.instruments))
    assert chosen_setup(walkthrough, every=True).instruments is None
    assert chosen_setup(walkthrough, also=("events",)).instruments == tuple(sorted({*chosen.instruments, "events"}))
    everything = SimpleNamespace(setup=RunSetup(), items=[SimpleNamespace(entry=_entry("collectives", count=1))])
    assert chosen_setup(everything, also=set(INSTRUMENTS)).instruments is None  # the document as before the switch
    only_collectives = load_spec(SPECS / "backward_prefetch.yaml")
    assert chosen_setup(only_collectives).instruments == ("collectives",)


def test_the_fields_an_instrument_fills_and_the_set_a_document_records():
    assert instruments_filling("memory.bytes.temp") == {"memory"}
    assert instruments_filling("grad_norms.reference") == {"grads", "numerics"}
    assert instruments_filling("grad_norms.value") == {"grads"}
    assert instruments_filling("rank_environment.host") == frozenset()
    assert recorded_instruments({}) == frozenset(INSTRUMENTS)
    assert recorded_instruments({"instruments": ["collectives"]}) == {"collectives"}


def test_timing_the_steps_collectives_needs_the_collective_recorder_whatever_the_entries_read():
    """The bandwidth rows of size ``step`` replay the sizes the recorder saw: without it they
    would be missing (the cluster spec's step rows failed so)."""
    cluster = load_spec(SPECS / "cluster_bandwidth.yaml")
    assert cluster.setup.bandwidth.step
    assert "collectives" not in needed_instruments(item.entry for item in cluster.items)
    assert "collectives" in chosen_setup(cluster).instruments
    no_step = SimpleNamespace(bandwidth=SimpleNamespace(step=False))
    assert (
        setup_instruments(no_step) == frozenset() and setup_instruments(SimpleNamespace(bandwidth=None)) == frozenset()
    )
