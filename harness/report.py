"""Terminal and JSON reports of checked entries, one table per document section."""

from __future__ import annotations

from typing import Any, Iterable

from rich.console import Console
from rich.table import Table
from rich.text import Text

from harness.checks import CheckResult
from harness.evaluate import counts

MARKS = {"pass": ("✓", "green"), "fail": ("✗", "bold red"), "error": ("!", "bold red"),
         "skip": ("-", "yellow"), "xfail": ("x", "yellow"), "xpass": ("X", "bold red")}


def print_report(results: Iterable[CheckResult], console: Console, *, title: str = "", only_failures: bool = False) -> None:
    """Print one table per document section: entry, expected, observed, mark.

    Args:
        results: results in spec order.
        console: where to print.
        title: heading printed above the tables.
        only_failures: print only entries whose status is fail, error or xpass.
    """
    if title:
        console.rule(title)
    section, table = None, None
    for r in results:
        if only_failures and r.ok:
            continue
        key = (r.entry.section, r.entry.table)
        if key != section:
            if table is not None:
                console.print(table)
            section = key
            table = Table(title=f"{r.entry.section} — {r.entry.table}", title_justify="left", show_lines=False, expand=True)
            table.add_column("", width=1)
            table.add_column("entry", overflow="fold", ratio=2)
            table.add_column("field", overflow="fold", ratio=1)
            table.add_column("expected", overflow="fold", ratio=2)
            table.add_column("observed", overflow="fold", ratio=3)
        mark, style = MARKS[r.status]
        if not r.fields:
            table.add_row(Text(mark, style=style), r.entry.id, "", "", Text(r.message, style=style))
            continue
        for i, f in enumerate(r.fields):
            field_mark = MARKS["pass" if f.ok else r.status if r.status in ("fail", "xfail") else "fail"]
            table.add_row(Text(field_mark[0] if len(r.fields) > 1 else mark, style=field_mark[1] if len(r.fields) > 1 else style),
                          r.entry.id if i == 0 else "", f.field, f.expected, f.observed_text())
        if r.message and r.status != "pass":
            table.add_row("", "", "", "", Text(r.message, style=style))
    if table is not None:
        console.print(table)


def summary_line(results: list[CheckResult]) -> str:
    """'N passed, N failed' (plus skipped, errors, known deviations when present)."""
    c = counts(results)
    parts = [f"{c['pass']} passed", f"{c['fail'] + c['xpass']} failed"]
    if c["skip"]:
        parts.append(f"{c['skip']} skipped")
    if c["error"]:
        parts.append(f"{c['error']} errors")
    if c["xfail"]:
        parts.append(f"{c['xfail']} known deviations")
    return ", ".join(parts)


def result_to_json(r: CheckResult) -> dict[str, Any]:
    """A JSON-ready record of one result (with where it comes from in the spec and document)."""
    e = r.entry
    return {
        "spec": e.spec, "line": e.line, "section": e.section, "table": e.table, "id": e.id, "says": e.says,
        "kind": e.kind, "status": r.status, "message": r.message,
        "fields": [{"field": f.field, "expected": f.expected, "observed": f.observed, "failed_ranks": f.failed_ranks}
                   for f in r.fields],
    }
