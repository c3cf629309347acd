"""Check kind ``fsdp_units`` on the walkthrough's synthetic observation: the units fully_shard made,
selected by role, unit or layer; a wrong expectation fails on that field."""

from __future__ import annotations

from harness.judge.checks import check
from harness.language.entry import make_entry
from tests.support.observations import walkthrough_observation


def _check(**values):
    return check(make_entry("fsdp_units", values, id="units"), walkthrough_observation())


def test_every_unit_in_fully_shard_order_with_its_parameters():
    result = _check(count=3, names=["layers.0", "layers.1", "root"], param_counts=[11, 11, 0], params=22)
    assert result.status == "pass", result.explain()


def test_selectors_narrow_the_units():
    assert _check(role="layer", names=["layers.0", "layers.1"], params=22).status == "pass"
    assert _check(unit="root", count=1, param_counts=[0]).status == "pass"
    assert _check(layer=1, names=["layers.1"]).status == "pass"


def test_a_wrong_expectation_fails_on_that_field():
    result = _check(count=3, names=["layers.0", "root", "layers.1"])
    assert result.status == "fail"
    assert [f.field for f in result.fields if not f.ok] == ["names"]


def test_a_unit_the_run_lacks_is_an_error():
    assert _check(layer=5, count=1).status == "error"
