"""A check's outcome in words: each field's observed values by rank, and a failure's full text
(where to edit, the document's claim, expected against observed, the failing ranks by host)."""

from __future__ import annotations

from typing import Any

from harness.language.observed import ranks_on_hosts, ranks_text

__all__ = ["observed_text", "explain"]

_SHOWN_VALUES = 8  # distinct observed values listed before "... N more values"


def observed_text(result: Any) -> str:
    """Each distinct value of a field result with the ranks that observed it: ``[74] (ranks 0-5); [68] (rank 6)``."""
    by_value: dict[str, list[int]] = {}
    for rank, value in result.observed.items():
        by_value.setdefault(value, []).append(rank)
    shown = [
        f"{v} (rank{'s' if len(rs) > 1 else ''} {ranks_text(rs)})" for v, rs in list(by_value.items())[:_SHOWN_VALUES]
    ]
    if len(by_value) > _SHOWN_VALUES:
        shown.append(f"... {len(by_value) - _SHOWN_VALUES} more values")
    return "; ".join(shown)


def explain(result: Any) -> str:
    """Multi-line text for a check result: where it comes from, expected vs observed per field."""
    e = result.entry
    failed = [f.field for f in result.fields if not f.ok]
    line = e.line_of(failed[0]) if failed else e.line  # where to edit: the failing field's line
    lines = [f"{e.spec}:{line}: [{e.table or e.section}] {e.id}"]
    if e.says:  # the spec's statement of the document's claim, with where the document makes it
        lines.append(f"  the document claims: {e.says}" + (f" (section: {e.section})" if e.section else ""))
    elif e.section:
        lines.append(f"  document section: {e.section}")
    if result.message:
        lines.append(f"  {result.status}: {result.message}")
    for f in result.fields:
        mark = "ok  " if f.ok else "FAIL"
        lines.append(f"  {mark} {f.field}: expected {f.expected}; observed {observed_text(f)}")
        if not f.ok:
            lines.append(f"       failing ranks: {ranks_on_hosts(dict.fromkeys(f.failed_ranks), f.hosts)}")
    return "\n".join(lines)
