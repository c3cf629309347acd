"""The building blocks of the observed-field declarations (:mod:`harness.contract.fields`).

A declaration is a tree that mirrors the observation document: :class:`Record` (a JSON object
with named children), :class:`Records` (a list of records), :class:`Keyed` (an object whose keys
are a known set of names, each the same kind of value) and :class:`Leaf` (a value, with its JSON
schema verbatim). Every node may state :class:`Facts` (unit, recorder, the worlds that cannot
observe it, whether it varies run to run); a node's facts apply to
everything below it unless restated there. :func:`walk` yields each leaf with its path and
resolved facts; :func:`schema_of` gives the JSON schema of a node.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Iterator, Mapping, Union

__all__ = ["WORLDS", "ASPECTS", "Facts", "Leaf", "Record", "Records", "Keyed", "Node", "walk", "schema_of"]

WORLDS: tuple[str, ...] = ("gloo", "nccl", "fake")
"""The worlds a run observes in: real ranks on gloo (CPU) or NCCL (GPUs), simulated ranks (fake)."""

ASPECTS: tuple[str, ...] = ("behaviour", "environment", "timing", "diagnostic")
"""What a field tells: FSDP2's behaviour; where it ran (versions, hosts, devices); how long it
took; how it failed (tracebacks, process ids). ``compare`` reports behaviour and sets the rest apart."""

_UNSET: Any = object()


@dataclass(frozen=True)
class Facts:
    """What a declaration says about its values beyond their JSON type.

    Attributes:
        unit: "bytes", "elements", "s" (seconds), "ranks", ... or None (no unit: names, flags).
        by: the recorder or instrument that produces it (module path or torch API).
        unobserved: world -> why a run in that world cannot observe it as a real rank would.
        varies: why it may differ between two runs of the same spec on the same torch, or None.
        varies_in: the worlds where it may vary (``varies`` given).
        aspect: one of :data:`ASPECTS`.
        masked: compared with paths, line numbers and ports masked (messages, tracebacks).
    """

    unit: str | None = None
    by: str | None = None
    unobserved: Mapping[str, str] = field(default_factory=dict)
    varies: str | None = None
    varies_in: tuple[str, ...] = WORLDS
    aspect: str = "behaviour"
    masked: bool = False

    def under(self, **changes: Any) -> "Facts":
        """These facts with the given ones restated (``_UNSET`` values keep the inherited one)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not _UNSET})


_FACT_NAMES = tuple(f.name for f in fields(Facts))


class _Node:
    facts: dict[str, Any]
    schema: dict[str, Any]

    def _take(self, schema: Mapping[str, Any] | None, facts: Mapping[str, Any]) -> None:
        unknown = set(facts) - set(_FACT_NAMES)
        if unknown:
            raise TypeError(f"unknown facts {sorted(unknown)}; expected some of {list(_FACT_NAMES)}")
        if "aspect" in facts and facts["aspect"] not in ASPECTS:
            raise ValueError(f"aspect {facts['aspect']!r} is not one of {list(ASPECTS)}")
        for world in list(facts.get("unobserved", {})) + list(facts.get("varies_in", ())):
            if world not in WORLDS:
                raise ValueError(f"world {world!r} is not one of {list(WORLDS)}")
        self.facts = dict(facts)
        self.schema = dict(schema or {})


class Leaf(_Node):
    """A value: its JSON schema verbatim (a whole sub-document, e.g. ``setup``, is one leaf)."""

    def __init__(self, schema: Mapping[str, Any], **facts: Any) -> None:
        self._take(schema, facts)


class Record(_Node):
    """A JSON object with the named ``children``; ``required`` of them always present;
    ``nullable``: the value may be null instead; ``closed``: no other key is allowed; ``define``:
    the schema names it in ``$defs`` and refers to it there (a record used in several places)."""

    def __init__(
        self,
        children: Mapping[str, "Node"],
        *,
        required: tuple[str, ...] = (),
        nullable: bool = False,
        closed: bool = True,
        define: str | None = None,
        schema: Mapping[str, Any] | None = None,
        **facts: Any,
    ) -> None:
        missing = set(required) - set(children)
        if missing:
            raise ValueError(f"required {sorted(missing)} not among the children {list(children)}")
        self.children, self.required, self.nullable, self.closed = dict(children), tuple(required), nullable, closed
        self.define = define
        self._take(schema, facts)


class Records(_Node):
    """A JSON array of ``record`` (the path does not name the position)."""

    def __init__(self, record: Record, *, schema: Mapping[str, Any] | None = None, **facts: Any) -> None:
        self.record = record
        self._take(schema, facts)


class Keyed(_Node):
    """A JSON object whose keys are among ``keys`` (a map name -> one line), each value ``value``'s;
    ``by_key``: facts of single keys."""

    def __init__(
        self,
        keys: Mapping[str, str],
        value: Leaf,
        *,
        by_key: Mapping[str, Mapping[str, Any]] | None = None,
        schema: Mapping[str, Any] | None = None,
        **facts: Any,
    ) -> None:
        self.keys, self.value, self.by_key = dict(keys), value, dict(by_key or {})
        unknown = set(self.by_key) - set(self.keys)
        if unknown:
            raise ValueError(f"facts for keys {sorted(unknown)} not among {list(self.keys)}")
        self._take(schema, facts)

    def child(self, key: str) -> Leaf:
        """The declaration of key ``key``: ``value`` described by the key's line, with its own facts."""
        return Leaf(
            {**self.value.schema, "description": self.keys[key]}, **self.value.facts, **self.by_key.get(key, {})
        )


Node = Union[Leaf, Record, Records, Keyed]


def walk(node: Node, path: str = "", facts: Facts = Facts()) -> Iterator[tuple[str, Leaf, Facts]]:
    """(dotted path, leaf, resolved facts) for every leaf below ``node``, in declaration order."""
    here = facts.under(**node.facts)
    if isinstance(node, Leaf):
        yield path, node, here
    elif isinstance(node, Record):
        for name, child in node.children.items():
            yield from walk(child, f"{path}.{name}" if path else name, here)
    elif isinstance(node, Records):
        yield from walk(node.record, path, here)
    else:
        for key in node.keys:
            yield from walk(node.child(key), f"{path}.{key}", here)


def schema_of(node: Node, defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON schema (draft 2020-12) of ``node``'s values; a record with ``define`` becomes a
    ``$ref`` and its schema goes into ``defs`` (inline when ``defs`` is None)."""
    if isinstance(node, Leaf):
        return dict(node.schema)
    if isinstance(node, Records):
        return {"type": "array", **node.schema, "items": schema_of(node.record, defs)}
    if isinstance(node, Keyed):
        return {"type": "object", **node.schema, "additionalProperties": schema_of(node.value, defs)}
    if node.define and defs is not None:
        if node.define not in defs:
            defs[node.define] = {}  # claimed first: the order of $defs is the order of first use
            defs[node.define] = _record_schema(node, defs)
        return {"$ref": f"#/$defs/{node.define}"}
    return _record_schema(node, defs)


def _record_schema(node: Record, defs: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": ["object", "null"] if node.nullable else "object", **node.schema}
    if node.closed:
        out["additionalProperties"] = False
    if node.required:
        out["required"] = list(node.required)
    out["properties"] = {name: schema_of(child, defs) for name, child in node.children.items()}
    return out
