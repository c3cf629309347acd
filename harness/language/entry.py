"""A spec entry ready to check: its kind, selectors and parsed expectations (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from harness.language.expect import Expectation, parse_expectation
from harness.language.kinds import get_kind

__all__ = ["Entry", "make_entry"]


@dataclass(frozen=True)
class Entry:
    """One spec entry, ready to check.

    Attributes:
        id: readable id, unique within its table.
        check: the check kind's name (:data:`harness.language.kinds.REGISTRY`).
        selectors: which part of the observation (param, layer, select, ranks, ...).
        expect: field name -> Expectation.
        says: the document's claim for this entry, in the spec's words ('' if none).
        section: the document section (heading) the table encodes.
        table: the table's title.
        spec: spec file path; line: 1-based line of the entry in it.
        field_lines: expected field name -> 1-based line where its value is written (the
            entry's own key, or its table's ``with:``); a field left out: see ``line``.
    """

    id: str
    check: str
    selectors: Mapping[str, Any]
    expect: Mapping[str, Expectation]
    says: str = ""
    section: str = ""
    table: str = ""
    spec: str = ""
    line: int = 0
    field_lines: Mapping[str, int] = field(default_factory=dict)

    def line_of(self, name: str) -> int:
        """The line of expected field ``name`` in the spec (the entry's line if unknown)."""
        return self.field_lines.get(name) or self.line


def make_entry(
    kind: str,
    values: Mapping[str, Any],
    *,
    id: str,
    says: str = "",
    section: str = "",
    table: str = "",
    spec: str = "",
    line: int = 0,
) -> Entry:
    """Split an entry's mapping into selectors and expected fields (parsed once, here).

    Raises:
        ValueError: unknown kind, a key that is neither a selector nor a field of the kind,
            no expected field, or an unreadable figure (ExpectationError, a ValueError).
    """
    definition = get_kind(kind)
    selectors, expect = {}, {}
    for key, value in values.items():
        if key in definition.selector_index:
            selectors[key] = value
        else:
            problem = definition.unknown_key(key)
            if problem:
                raise ValueError(problem)
            expect[key] = parse_expectation(value)
    if not expect:
        raise ValueError(f"no expected field; fields of {kind!r}: {sorted(definition.field_index)}")
    return Entry(
        id=id,
        check=kind,
        selectors=selectors,
        expect=expect,
        says=says,
        section=section,
        table=table,
        spec=spec,
        line=line,
    )
