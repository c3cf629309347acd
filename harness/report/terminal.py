"""Terminal and JSON reports of checked entries, one table per document section, then each failing
entry explained (``CheckResult.explain``). Cells are plain ``rich.text.Text``, never markup:
``[all_gather layers.0]`` prints as written."""

from __future__ import annotations

import textwrap
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


# A table's frame: 5 columns' borders (6) and their padding (2 each).
_FRAME = 6 + 2 * 5
MIN_VALUE_WIDTH = 16
"""Narrowest expected or observed column a table is drawn with; a narrower fit is printed per entry."""
_INDENT = "    "


def _table(title: str, entry_width: int, field_width: int) -> Table:
    # Ids and field names are never wrapped (a name broken mid-word reads as two); the values wrap
    # at spaces and fold only a word wider than their column.
    table = Table(title=Text(title), title_justify="left", show_lines=False, expand=True)
    table.add_column("", width=1, no_wrap=True)
    table.add_column("entry", no_wrap=True, min_width=entry_width)
    table.add_column("field", no_wrap=True, min_width=field_width)
    table.add_column("expected", overflow="fold", ratio=2, min_width=MIN_VALUE_WIDTH)
    table.add_column("observed", overflow="fold", ratio=3, min_width=MIN_VALUE_WIDTH)
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


def _wrapped(text: str, width: int, indent: str, style: str = "") -> list[Text]:
    """``text`` wrapped at spaces to ``width`` after ``indent``, continuation lines two further in;
    a word wider than a line keeps its line."""
    lines = textwrap.wrap(
        text,
        width=max(width, len(indent) + 20),
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_long_words=False,
        break_on_hyphens=False,
    )
    return [Text(line, style=style) for line in lines or [indent]]


def _entry_lines(r: CheckResult, width: int) -> list[Text]:
    """One entry as lines: its mark and id, then each field's expected and observed value."""
    mark, style = MARKS[r.status]
    out = [Text.assemble((mark, style), " ", r.entry.id)]
    for f in r.fields:
        f_mark, f_style = (mark, style) if len(r.fields) == 1 else MARKS["pass" if f.ok else "fail"]
        text = f"{f.field}: expected {f.expected}; observed {f.observed_text()}"
        lines = _wrapped(text, width, _INDENT)
        lines[0] = Text.assemble("  ", (f_mark, f_style), " ", lines[0].plain.removeprefix(_INDENT))
        out += lines
    if r.message and (r.status != "pass" or not r.fields):
        out += _wrapped(r.message, width, _INDENT, style)
    return out


def _fits_a_table(results: list[CheckResult], width: int) -> tuple[bool, int, int]:
    """(whether the table fits ``width`` with ids and names unbroken, the widest id, the widest name)."""
    entry_width = max(len(r.entry.id) for r in results)
    field_width = max([len(f.field) for r in results for f in r.fields] or [1])
    return 1 + entry_width + field_width + 2 * MIN_VALUE_WIDTH + _FRAME <= width, entry_width, field_width


def _print_group(title: str, results: list[CheckResult], console: Console) -> None:
    """One document table's entries: as a table where it fits the console, else entry by entry."""
    fits, entry_width, field_width = _fits_a_table(results, console.width)
    if fits:
        table = _table(title, entry_width, field_width)
        for r in results:
            for row in _rows(r):
                table.add_row(*row)
        console.print(table)
        return
    console.print(Text(title, style="italic"))
    for r in results:
        for line in _entry_lines(r, console.width):
            console.print(line, soft_wrap=True)


def print_report(
    results: Iterable[CheckResult], console: Console, *, title: str = "", only_failures: bool = False
) -> None:
    """Print ``results`` (spec order) under ``title``, one table per document section (entry, field,
    expected, observed, mark), then an explanation of each failing entry. A table wider than
    ``console.width`` with ids and names whole is printed entry by entry. ``only_failures``:
    tabulate only fail, error and xpass."""
    results = list(results)
    if title:
        console.rule(Text(title))
    groups: dict[tuple[str, str], list[CheckResult]] = {}
    for r in results:
        if only_failures and r.status not in FAILING:
            continue
        groups.setdefault((r.entry.section, r.entry.table), []).append(r)
    for (section, table), rs in groups.items():
        _print_group(f"{section} — {table}", rs, console)
    failing = [r for r in results if r.status in FAILING]
    if failing:
        console.rule(Text(f"{len(failing)} failing entr{'y' if len(failing) == 1 else 'ies'}"))
        for r in failing:
            for line in r.explain().splitlines():
                indent = line[: len(line) - len(line.lstrip())]
                for part in _wrapped(line.lstrip(), console.width, indent):
                    console.print(part, soft_wrap=True)
            console.print()


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
    """A JSON-ready record of one result, with the spec and document lines of the entry and each field."""
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
            {
                "field": f.field,
                "line": e.line_of(f.field),
                "expected": f.expected,
                "observed": f.observed,
                "failed_ranks": f.failed_ranks,
            }
            for f in r.fields
        ],
    }
