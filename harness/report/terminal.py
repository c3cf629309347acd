"""Terminal and JSON reports of checked entries, one table per document section.

Every cell is plain text (``rich.text.Text``), never markup: a sequence such as
``[all_gather layers.0]`` must print as written. Failing entries are then explained one by
one (``CheckResult.explain``: spec file and line, document section, what the document says,
expected and observed per rank).
"""

from __future__ import annotations

from typing import Any, Iterable

from rich.console import Console
from rich.table import Table
from rich.text import Text

from harness.judge.checks import CheckResult
from harness.judge.evaluate import FAILING, counts

MARKS = {
    "pass": ("✓", "green"),
    "fail": ("✗", "bold red"),
    "error": ("!", "bold red"),
    "skip": ("-", "yellow"),
    "xfail": ("x", "yellow"),
    "xpass": ("X", "bold red"),
}


def _table(title: str) -> Table:
    table = Table(title=Text(title), title_justify="left", show_lines=False, expand=True)
    table.add_column("", width=1)
    table.add_column("entry", overflow="fold", ratio=2)
    table.add_column("field", overflow="fold", ratio=1)
    table.add_column("expected", overflow="fold", ratio=2)
    table.add_column("observed", overflow="fold", ratio=3)
    return table


def _rows(r: CheckResult) -> Iterable[tuple[Text, ...]]:
    mark, style = MARKS[r.status]
    if not r.fields:
        yield Text(mark, style=style), Text(r.entry.id), Text(""), Text(""), Text(r.message, style=style)
        return
    for i, f in enumerate(r.fields):
        f_mark, f_style = (mark, style) if len(r.fields) == 1 else MARKS["pass" if f.ok else "fail"]
        yield (
            Text(f_mark, style=f_style),
            Text(r.entry.id if i == 0 else ""),
            Text(f.field),
            Text(f.expected),
            Text(f.observed_text()),
        )
    if r.message and r.status != "pass":
        yield Text(""), Text(""), Text(""), Text(""), Text(r.message, style=style)


def print_report(
    results: Iterable[CheckResult], console: Console, *, title: str = "", only_failures: bool = False
) -> None:
    """Print one table per document section (entry, field, expected, observed, mark), then
    an explanation of each failing entry.

    Args:
        results: results in spec order.
        console: where to print.
        title: heading printed above the tables.
        only_failures: tabulate only entries whose status is fail, error or xpass.
    """
    results = list(results)
    if title:
        console.rule(Text(title))
    key, table = None, None
    for r in results:
        if only_failures and r.status not in FAILING:
            continue
        if (r.entry.section, r.entry.table) != key:
            if table is not None:
                console.print(table)
            key = (r.entry.section, r.entry.table)
            table = _table(f"{r.entry.section} — {r.entry.table}")
        for row in _rows(r):
            table.add_row(*row)
    if table is not None:
        console.print(table)
    failing = [r for r in results if r.status in FAILING]
    if failing:
        console.rule(Text(f"{len(failing)} failing entr{'y' if len(failing) == 1 else 'ies'}"))
        for r in failing:
            console.print(Text(r.explain()), "")


def summary_line(results: list[CheckResult], drafted: int = 0) -> str:
    """'N passed, N failed' (plus skipped, errors, known deviations, drafted when present)."""
    c = counts(results)
    parts = [f"{c['pass']} passed", f"{c['fail'] + c['xpass']} failed"]
    if c["skip"]:
        parts.append(f"{c['skip']} skipped")
    if c["error"]:
        parts.append(f"{c['error']} errors")
    if c["xfail"]:
        parts.append(f"{c['xfail']} known deviations")
    if drafted:
        parts.append(f"{drafted} drafted entries not yet reviewed")
    return ", ".join(parts)


def result_to_json(r: CheckResult) -> dict[str, Any]:
    """A JSON-ready record of one result (with where it comes from in the spec and document)."""
    e = r.entry
    return {
        "spec": e.spec,
        "line": e.line,
        "section": e.section,
        "table": e.table,
        "id": e.id,
        "says": e.says,
        "check": e.check,
        "status": r.status,
        "message": r.message,
        "fields": [
            {"field": f.field, "expected": f.expected, "observed": f.observed, "failed_ranks": f.failed_ranks}
            for f in r.fields
        ],
    }
