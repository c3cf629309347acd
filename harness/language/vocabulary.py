"""The vocabulary of check kinds: one declarative definition per kind.

A :class:`CheckKind` says everything about one kind of spec entry: its selectors (which part of
the observation), its fields (what is measured there) and the values each accepts, its extra
rules, its measure function and one line of docs per key. The loader, the checks, the schema's
entry definitions and docs/check-kinds.md's table all come from these definitions
(:mod:`harness.language.kinds` registers them). Imports no torch: loading a spec stays fast.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from harness.language.expect import BYTE_UNITS, COUNT_UNITS, Expectation
from harness.language.suggest import did_you_mean

DTYPE_NAMES: tuple[str, ...] = (
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "float8_e4m3fn",
    "float8_e5m2",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
)
"""torch dtype names an observation can hold (``str(dtype)`` without ``torch.``)."""


@dataclass(frozen=True)
class Context:
    """What the loader knows about the run a spec describes, from its setup alone (no torch).

    Attributes:
        world_size: ranks in the mesh.
        mesh_dim_names: the DeviceMesh's dimension names.
        num_layers: decoder layers the model has.
        unit_names: FQNs of the FSDP units the setup creates ("" is the root).
        param_fqns: FQNs of the model's parameters (tied weights once), or None if unknown.
        microbatches: microbatches of each step the schedule runs, by ``step_index`` (the
            default schedule: ``(1,)``), or None if unknown.
        setup: the resolved setup, keyed as a spec writes it (``RunSetup.to_dict()``), or None
            if unknown; a kind reads the part it needs with :meth:`known_setup`.
        refused: top-level setup keys the schema refused (their values are defaults, not the spec's).
    """

    world_size: int | None = None
    mesh_dim_names: tuple[str, ...] = ()
    num_layers: int | None = None
    unit_names: tuple[str, ...] | None = None
    param_fqns: tuple[str, ...] | None = None
    microbatches: tuple[int, ...] | None = None
    setup: Mapping[str, Any] | None = None
    refused: frozenset[str] = frozenset()

    def known_setup(self, key: str) -> Mapping[str, Any] | None:
        """The resolved setup when its top-level ``key`` is the spec's own, else None (unknown)."""
        return None if self.setup is None or key in self.refused else self.setup


Check = Callable[[Any, Context], "str | None"]
"""A rule on a written value: None when it holds, else what was expected (one line)."""


@dataclass(frozen=True)
class ValueType:
    """The values an expected field accepts, checked at load on the parsed :class:`Expectation`.

    Attributes:
        name: short name shown in docs/check-kinds.md ("bytes", "shape", ...).
        doc: what a value looks like, for errors and docs.
        check: None when an expectation is possible for this type, else what was expected.
    """

    name: str
    doc: str
    check: Callable[[Expectation], bool]

    def problem(self, expectation: Expectation) -> str | None:
        return None if self.check(expectation) else f"expected {self.doc}, got {expectation.raw!r}"


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _figure(units: frozenset[str], exact: Callable[[Any], bool]) -> Callable[[Expectation], bool]:
    def ok(e: Expectation) -> bool:
        if e.form == "exact":
            return exact(e.value)
        if e.form == "rounded":
            return e.unit in units
        return True  # a bound on a number

    return ok


def _exact(rule: Callable[[Any], bool]) -> Callable[[Expectation], bool]:
    return lambda e: e.form == "exact" and rule(e.value)


COUNT = ValueType(
    "count",
    "a count: an integer >= 0, a rounded figure like '≈590K' or a bound like '>= 1'",
    _figure(frozenset(COUNT_UNITS), lambda v: _is_int(v) and v >= 0),
)
BYTES = ValueType(
    "bytes",
    "a size in bytes: an integer >= 0, a rounded figure like '4.72 MB' (MB = 10^6 B) or a bound like '<= 1e6'",
    _figure(frozenset(BYTE_UNITS), lambda v: _is_int(v) and v >= 0),
)
NUMBER = ValueType(
    "number",
    "a number, a rounded figure or a bound like '<= 1e-3'",
    _figure(frozenset(COUNT_UNITS) | frozenset(BYTE_UNITS), _is_number),
)
SHAPE = ValueType(
    "shape",
    "a shape: a list of integers >= 0, e.g. [128, 512]",
    _exact(lambda v: isinstance(v, list) and all(_is_int(d) and d >= 0 for d in v)),
)
DTYPE = ValueType("dtype", f"a dtype name, one of {list(DTYPE_NAMES)}", _exact(lambda v: v in DTYPE_NAMES))
OPTIONAL_DTYPE = ValueType(
    "dtype", f"a dtype name, one of {list(DTYPE_NAMES)}, or null", _exact(lambda v: v is None or v in DTYPE_NAMES)
)
OPTIONAL_SHAPE = ValueType(
    "shape",
    "a shape (a list of integers >= 0) or null",
    _exact(lambda v: v is None or (isinstance(v, list) and all(_is_int(d) and d >= 0 for d in v))),
)
BOOL = ValueType("bool", "true or false", _exact(lambda v: isinstance(v, bool)))
OPTIONAL_BOOL = ValueType("bool", "true, false or null", _exact(lambda v: v is None or isinstance(v, bool)))
TEXT = ValueType("text", "a string", _exact(lambda v: isinstance(v, str)))
OPTIONAL_TEXT = ValueType("text", "a string or null", _exact(lambda v: v is None or isinstance(v, str)))
MESSAGE = ValueType(
    "message",
    "a string (exact), {matches: REGEX} (found by re.search) or null",
    lambda e: e.form == "pattern" or (e.form == "exact" and (e.value is None or isinstance(e.value, str))),
)
TEXTS = ValueType(
    "texts", "a list of strings", _exact(lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v))
)
JSON = ValueType(
    "json", "any JSON value (compared exactly), a rounded figure or a bound like '<= 1e-3' on a number", lambda e: True
)
OPTIONAL_INT = ValueType("int", "an integer or null", _exact(lambda v: v is None or _is_int(v)))
SIGNAL = ValueType(
    "signal",
    "a signal's name like SIGSEGV, or null",
    _exact(lambda v: v is None or (isinstance(v, str) and v in signal.Signals.__members__)),
)
INTS = ValueType("ints", "a list of integers", _exact(lambda v: isinstance(v, list) and all(_is_int(i) for i in v)))


def one_of(name: str, values: Sequence[str]) -> ValueType:
    """A text field whose value is one of ``values``."""
    allowed = tuple(values)
    return ValueType(name, f"one of {list(allowed)}", _exact(lambda v: v in allowed))


@dataclass(frozen=True)
class Field:
    """A measured quantity an entry may expect.

    Attributes:
        name: the key in a spec entry.
        type: the values it accepts.
        doc: one line: what is measured, with its unit.
        check: an extra rule needing the run's context (e.g. a mesh dim the mesh has), or None.
    """

    name: str
    type: ValueType
    doc: str
    check: Check | None = None


@dataclass(frozen=True)
class Selector:
    """A key that chooses what part of the observation an entry measures.

    Attributes:
        name: the key in a spec entry.
        doc: one line: what it selects and the values it takes.
        check: None when a value can select something in a run of this setup, else why not.
    """

    name: str
    doc: str
    check: Check | None = None


@dataclass(frozen=True)
class Reads:
    """Observed fields a check kind computes from, named by their declared path
    (:mod:`harness.contract.fields`): ``path`` and every field below it.

    Attributes:
        path: a declared path (``params``, ``grad_norms.value``); the longest of a kind's
            ``Reads`` covering a field decides its names.
        names: the kind's fields computed from it; () : each field gives the kind's field of its own name.
    """

    path: str
    names: tuple[str, ...] = ()


@dataclass(frozen=True)
class RecordKey:
    """How ``compare`` names each record of an observed list, so two runs' records pair up.

    Attributes:
        part: the list's declared path (``params``, ``memory``, ``fsdp_units``).
        fields: the record's fields that name it; a record holding none of them is named by position.
        repeats: records of one name are told apart by their occurrence (a memory state seen twice).
        values: only the values under this key are compared, each by its own key (memory's ``bytes``).
        show: the name in words for reports; default: each value.
    """

    part: str
    fields: tuple[str, ...]
    repeats: bool = False
    values: str | None = None
    show: Callable[[tuple], "list[str]"] | None = None


Measure = Callable[[Mapping[str, Any], Mapping[str, Any]], "dict[int, dict[str, Any]]"]
"""(selectors, observation document) -> {rank: {field: observed value}}; raises CheckError."""

EntryRule = Callable[[Mapping[str, Any], Context], "list[tuple[str | None, str]]"]
"""(an entry's selectors and fields, context) -> [(key to blame or None for the entry, message)]."""


@dataclass(frozen=True)
class CheckKind:
    """One kind of spec entry: selectors, fields, rules, and how it is measured.

    Attributes:
        name: the ``check:`` value of a table.
        doc: one line for docs/check-kinds.md.
        selectors: the keys that choose what to measure.
        fields: the keys that can be expected.
        measure: see :data:`Measure`.
        rules: extra rules over the whole entry (a required selector, a combination).
        open_fields: where a kind's field names are the run's own (the keys a custom
            observation returns): every key that is not a selector is a field of this type;
            None (every other kind): only ``fields``.
        order: where docs/check-kinds.md and the schema list the kind (ascending).
        reads: the observed fields it computes from; whether a simulated run can measure it,
            and which fields depend on thread timing, follow from their declarations.
        replica: it compares the FSDP step with the single-process replica's.
        simulation_differs: field -> why a simulated run may observe it otherwise than a
            real rank; a simulated failure on these fields alone is a skip.
        setup: setup fields an entry of this kind turns on (``record_errors``).
        record_keys: how ``compare`` names the records of the lists it selects from.
    """

    name: str
    doc: str
    selectors: tuple[Selector, ...]
    fields: tuple[Field, ...]
    measure: Measure
    rules: tuple[EntryRule, ...] = ()
    open_fields: ValueType | None = None
    order: int = 1000
    reads: tuple[Reads, ...] = ()
    replica: bool = False
    simulation_differs: Mapping[str, str] = field(default_factory=dict)
    setup: Mapping[str, Any] = field(default_factory=dict)
    record_keys: tuple[RecordKey, ...] = ()
    selector_index: Mapping[str, Selector] = field(init=False, repr=False, compare=False)
    field_index: Mapping[str, Field] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "selector_index", {s.name: s for s in self.selectors})
        object.__setattr__(self, "field_index", {f.name: f for f in self.fields})
        clash = set(self.selector_index) & set(self.field_index)
        if clash:
            raise ValueError(f"check kind {self.name!r}: {sorted(clash)} both selector and field")

    def field_named(self, name: str) -> Field | None:
        """The field ``name`` of this kind (with :attr:`open_fields`, any key not a selector), or None."""
        if name in self.field_index:
            return self.field_index[name]
        if self.open_fields is not None and isinstance(name, str) and name not in self.selector_index:
            return Field(name, self.open_fields, "a key of the run's own observation")
        return None

    def unknown_key(self, key: Any) -> str | None:
        """Why ``key`` is neither a selector nor a field of this kind (None when it is one)."""
        if key in self.selector_index or self.field_named(key) is not None:
            return None
        return (
            f"{key!r} is not a selector or field of check kind {self.name!r}; "
            f"{did_you_mean(key, [*self.selector_index, *self.field_index])}"
            f"selectors: {sorted(self.selector_index)}; fields: {sorted(self.field_index)}"
        )
