"""Every observed field declared once (``harness/contract/fields.py``): the schema generated from
the declarations, the check kinds they name, and the API the judge, compare, repeat and the
loader read."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.contract import fields, observation_schema
from harness.contract.field_tree import Keyed, Leaf, Record
from harness.contract.observation import SCHEMA_PATH
from harness.judge.evaluate import simulation_unobserved
from harness.language.entry import make_entry
from harness.language.kinds import REGISTRY, read_by


def test_the_shipped_schema_is_the_one_the_declarations_generate():
    assert SCHEMA_PATH.read_text(encoding="utf-8") == observation_schema.schema_text(), (
        "observation.schema.json is out of date: python -m harness.contract.observation_schema"
    )
    assert observation_schema.main(["--check"]) == 0


def test_the_drift_check_fails_on_a_hand_edit(tmp_path, monkeypatch, capsys):
    edited = tmp_path / "observation.schema.json"
    edited.write_text(SCHEMA_PATH.read_text().replace('"minimum": 0', '"minimum": 1', 1))
    monkeypatch.setattr(observation_schema, "SCHEMA_PATH", edited)
    assert observation_schema.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err


def test_state_dict_sets_gathered_dtype_is_declared():
    declared = fields.lookup("state_dict_options.set_model.entries.gathered_dtype")
    assert declared.path == "state_dict_options.set_model.entries.gathered_dtype"
    assert read_by("state_dict_set")["gathered_dtype"] == declared
    assert declared.unobserved["fake"] == "makes no state-dict calls"


@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_every_check_kind_reads_declared_fields_naming_its_own(kind):
    assert read_by(kind), f"check kind {kind!r} declares no reads"
    named = {name for reads in REGISTRY[kind].reads for name in reads.names}
    assert named <= {f.name for f in REGISTRY[kind].fields}, kind


WHOLE_KIND_UNOBSERVED = {
    "numerics": "records no numerics",
    "state_dict": "saves no checkpoint",
    "state_dict_get": "makes no state-dict calls",
    "state_dict_set": "makes no state-dict calls",
    "param_update": "records no parameter updates: it holds no values (fake tensors)",
    "bandwidth": "a simulated run moves no data: nothing to time",  # new: was an error (no rows)
}
FIELDS_UNOBSERVED = {  # the judge's table before the declarations replaced it
    "param": {"finite", "pinned", "grad_pinned"},
    "buffer": {"finite"},
    "grad_norm": {"value", "clipped", "reference", "abs_diff", "rel_diff", "local_value", "local_equals_value"}
    | {"shard_reference", "local_shard_rel_diff", "clip_coef", "reference_clip_coef", "clip_coef_rel_diff"},
    "memory": {"temp", "total"},
    "experts": {"tokens", "tokens_total", "unrouted_here", "unrouted_anywhere", "zero_grad_rows"}
    | {"zero_grad_rows_are_unrouted"},
    "expect_error": {"died", "signal", "exit_code"},  # new: a rank's death (the simulation is one process)
}


@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_what_a_simulated_run_cannot_observe_is_what_the_judge_skipped_before(kind):
    unobserved = {name for name, f in read_by(kind).items() if f.unobserved.get("fake")}
    kind_fields = {f.name for f in REGISTRY[kind].fields}
    if kind in WHOLE_KIND_UNOBSERVED:
        assert unobserved == set(read_by(kind))
        entry = SimpleNamespace(check=kind, selectors={}, expect={})
        assert simulation_unobserved(entry) == WHOLE_KIND_UNOBSERVED[kind]
    else:
        assert unobserved & kind_fields == FIELDS_UNOBSERVED.get(kind, set())


def test_the_judge_names_the_unobserved_fields_an_entry_expects():
    entry = make_entry("grad_norm", {"rel_diff": "<= 1e-6", "placements": ["Replicate()"]}, id="e")
    assert simulation_unobserved(entry) == "holds no values (fake tensors): rel_diff not observed"
    peak = make_entry("memory", {"layer": 0, "state": "Peak Backward", "sharded_grad": 0}, id="e")
    assert "its peaks are not a real rank's" in simulation_unobserved(peak)
    plain = make_entry("memory", {"layer": 0, "state": "After Pre-Forward", "buffer": 0}, id="e")
    assert simulation_unobserved(plain) is None


def test_lookup_answers_for_sub_documents_and_whole_records_and_names_what_is_undeclared():
    assert fields.lookup("setup.model.config").path == "setup"
    assert fields.lookup("error").path == "error.type"  # a null record: its first field's facts
    with pytest.raises(KeyError, match="'memory.nonsense' is not declared"):
        fields.lookup("memory.nonsense")


def test_worlds_variation_and_record_conditions():
    assert not fields.observed_in("params.finite", "fake") and fields.observed_in("params.finite", "gloo")
    assert fields.unobserved_reason("params.finite", "fake") == "holds no values (fake tensors)"
    assert fields.observed_in("memory.bytes.activation", "fake")
    peak = {"module": "", "state": "Peak"}
    assert "peaks" in fields.unobserved_reason("memory.bytes.activation", "fake", peak)
    assert not fields.stable("memory.bytes.activation", "gloo", peak)
    assert fields.stable("memory.bytes.activation", "fake", peak)
    assert not fields.stable("memory.bytes.temp", "nccl") and fields.stable("memory.bytes.temp", "fake")
    assert not fields.stable("timings_s.forward")
    gloo = {f.path for f in fields.varying_in("gloo")}
    assert {"timings_s", "bandwidth.time_s", "rank_environment.pid", "error.traceback"} <= gloo
    assert "memory.bytes.temp" not in {f.path for f in fields.varying_in("fake")}
    with pytest.raises(ValueError, match="world 'tpu'"):
        fields.varying_in("tpu")


def test_units_and_aspects():
    assert fields.lookup("memory.bytes.sharded_param").unit == "bytes"
    assert fields.lookup("collectives.numel_in").unit == "elements"
    assert fields.lookup("timings_s").unit == "s" and fields.lookup("timings_s").aspect == "timing"
    assert fields.lookup("rank_environment.host").aspect == "environment"
    assert fields.lookup("environment.world_size").aspect == "behaviour"
    assert fields.lookup("memory.bytes.temp").by.startswith("harness/run/rank/recorders/memory.py")


def test_a_declaration_with_an_unknown_world_fact_or_key_is_refused():
    with pytest.raises(ValueError, match="world 'tpu'"):
        Leaf({"type": "string"}, unobserved={"tpu": "no"})
    with pytest.raises(ValueError, match="aspect 'speed'"):
        Leaf({"type": "string"}, aspect="speed")
    with pytest.raises(TypeError, match="unknown facts"):
        Leaf({"type": "string"}, colour="red")
    with pytest.raises(ValueError, match="required"):
        Record({"a": Leaf({})}, required=("b",))
    with pytest.raises(ValueError, match="keys"):
        Keyed({"a": "one"}, Leaf({}), by_key={"b": {}})
