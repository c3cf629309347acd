"""The check kinds are found, not listed: every module of harness/language/kinds/ with a ``KIND``
is registered in its declared order, and what a kind reads is checked against the field declarations."""

from __future__ import annotations

import pkgutil

import pytest

import harness.language.kinds as kinds
from harness.language.kinds import REGISTRY, part_kind, read_by
from harness.language.vocabulary import CheckKind, Reads


def test_every_module_with_a_kind_is_registered_in_its_declared_order():
    modules = {m.name for m in pkgutil.iter_modules(kinds.__path__)}
    assert set(REGISTRY) <= modules  # each kind lives in the module of its name
    assert [k.order for k in REGISTRY.values()] == sorted(k.order for k in REGISTRY.values())


def _kind(name: str, *reads: Reads, order: int = 1000) -> CheckKind:
    return CheckKind(name=name, doc="", selectors=(), fields=(), measure=lambda sel, obs: {}, reads=reads, order=order)


def test_a_kind_defined_in_two_modules_is_refused(monkeypatch):
    twin = _kind("param")
    real_import = kinds.importlib.import_module
    monkeypatch.setattr(
        kinds.importlib,
        "import_module",
        lambda name: type("M", (), {"KIND": twin}) if name.endswith(".buffer") else real_import(name),
    )
    with pytest.raises(ValueError, match=r"check kind\(s\) \['param'\] defined in two modules"):
        kinds._discovered()


def test_a_new_module_is_found_and_ordered(monkeypatch):
    late = _kind("zz_late", Reads("fsdp_units"), order=0)
    real_import, real_modules = kinds.importlib.import_module, list(pkgutil.iter_modules(kinds.__path__))
    monkeypatch.setattr(kinds.pkgutil, "iter_modules", lambda path: [*real_modules, _Info("zz_late")])
    monkeypatch.setattr(
        kinds.importlib,
        "import_module",
        lambda name: type("M", (), {"KIND": late}) if name.endswith(".zz_late") else real_import(name),
    )
    assert next(iter(kinds._discovered())) == "zz_late"


class _Info:
    def __init__(self, name: str) -> None:
        self.name = name


def test_reading_an_undeclared_field_is_an_error(monkeypatch):
    monkeypatch.setitem(REGISTRY, "zz_wrong", _kind("zz_wrong", Reads("paramz")))
    read_by.cache_clear()
    try:
        with pytest.raises(ValueError, match="'zz_wrong' reads 'paramz', which harness/contract/fields.py does not"):
            read_by("zz_wrong")
    finally:
        read_by.cache_clear()


def test_the_longest_read_names_a_field_and_the_first_kind_shows_it():
    assert read_by("grad_norm")["clip_coef_rel_diff"].path == "grad_norms.clip_coef"
    assert read_by("param")["full_shape"].path == "params.full_shape"
    assert part_kind("params.full_shape") == "param"  # param, params_total and param_state read it
    assert part_kind("collectives.op") == "collectives"  # before reduce_op
    assert part_kind("timings_s.total") == "timings_s"  # no kind reads it


def test_two_kinds_naming_a_lists_records_differently_are_refused(monkeypatch):
    from harness.language.vocabulary import RecordKey

    clash = CheckKind(
        name="zz_clash",
        doc="",
        selectors=(),
        fields=(),
        measure=lambda sel, obs: {},
        record_keys=(RecordKey("params", ("unit",)),),
    )
    monkeypatch.setitem(REGISTRY, "zz_clash", clash)
    kinds._record_keys.cache_clear()
    try:
        with pytest.raises(ValueError, match="'zz_clash' names the records of 'params' otherwise than another kind"):
            kinds.record_key("params")
    finally:
        monkeypatch.delitem(REGISTRY, "zz_clash")
        kinds._record_keys.cache_clear()
    assert kinds.record_key("params") == RecordKey("params", ("fqn",))
