"""``compare``'s output: a summary per spec, then each behaviour difference, then what was set apart;
lines at most :data:`WIDTH` characters. Also the same as JSON (``compare --json``)."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from typing import Any, Iterable

from harness.language.kinds import part_kind
from harness.report.compare import APART, Difference, selector_text

__all__ = ["WIDTH", "format_report", "summary_line", "report_json", "spec_name"]

WIDTH = 100
"""The longest line ``compare`` prints (a longer value is cut around where the two sides differ)."""
_VALUE = 44  # characters of one side's value shown on a shared line


def spec_name(spec: str) -> str:
    return spec.rsplit("/", 1)[-1]


def _json(value: Any, present: bool = True) -> str:
    return json.dumps(value, ensure_ascii=False, default=str) if present else "absent"


def _window(text: str, start: int, width: int) -> str:
    """``width`` characters of ``text`` from about ``start``, with ``…`` where cut."""
    if len(text) <= width:
        return text
    begin = max(0, min(start - 10, len(text) - width + 1))
    out = text[begin : begin + width - 1 - (begin > 0)]
    return ("…" if begin else "") + out + ("…" if begin + len(out) < len(text) else "")


def _shown(d: Difference, width: int) -> tuple[str, str]:
    """Both values as JSON, each at most ``width`` characters, cut around their first difference."""
    ta, tb = _json(d.a, d.present[0]), _json(d.b, d.present[1])
    first = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
    return _window(ta, first, width), _window(tb, first, width)


def _value_lines(d: Difference, names: tuple[str, str]) -> list[str]:
    va, vb = _shown(d, _VALUE)
    line = f"    {d.key.field}: {va} ({names[0]}) ≠ {vb} ({names[1]})"
    if len(line) <= WIDTH:
        return [line]
    va, vb = _shown(d, WIDTH - 12)
    return [_window(f"    {d.key.field}:", 0, WIDTH), f"      {names[0]}: {va}", f"      {names[1]}: {vb}"]


def _error_lines(error: str) -> list[str]:
    """A failed run's error: its first lines and the exception a traceback ended in, wrapped; frames counted."""
    lines = [line for line in error.strip().splitlines() if line.strip()] or [""]
    shown, frames = [lines[0]], lines[1:]
    if frames and frames[0].startswith("Traceback"):
        last = next((i for i in range(len(frames) - 1, -1, -1) if not frames[i].startswith(" ")), None)
        if last is not None and last > 0:
            shown += [] if frames[last] in lines[0] else [frames[last]]
            frames = frames[:last] + frames[last + 1 :]
    else:
        shown, frames = shown + frames[:3], frames[3:]
    out = [f"    {part}" for line in shown for part in textwrap.wrap(line, WIDTH - 4)[:4]]
    return out + ([f"    ({len(frames)} more lines)"] if frames else [])


def _run_lines(d: Difference, names: tuple[str, str]) -> list[str]:
    lines = []
    for name, value in zip(names, (d.a, d.b)):
        if value is None:
            lines.append(f"  not run in {name}")
        elif str(value).startswith("failed: "):
            lines += [f"  the run failed in {name}:", *_error_lines(str(value)[len("failed: ") :])]
        else:
            lines.append(_window(f"  {name}: {value}", 0, WIDTH))
    return lines


def _raised(differences: list[Difference]) -> dict[tuple[int | None, int], str]:
    """(rank, side 0/1) -> what that rank raised where the other side's same rank did not."""
    out = {}
    for d in differences:
        if d.key.path == "error.type" and d.present != (True, True):
            side = 0 if d.present[0] else 1
            out[(d.key.rank, side)] = str(d.a if side == 0 else d.b)
    return out


def _listed(differences: Iterable[Difference], names: tuple[str, str]) -> list[str]:
    lines: list[str] = []
    by_spec: dict[str, list[Difference]] = {}
    for d in differences:
        by_spec.setdefault(d.spec, []).append(d)
    for spec, mine in by_spec.items():
        lines.append(spec_name(spec))
        raised, group = _raised(mine), None
        hidden: dict[tuple[int | None, int], int] = {}
        for d in mine:
            if d.key.part == "spec":
                lines += _run_lines(d, names)
                continue
            lost = [s for s in (0, 1) if not d.present[s] and (d.key.rank, s) in raised]
            if lost and not d.key.path.startswith("error"):  # recorded after the error, on the other side only
                hidden[(d.key.rank, lost[0])] = hidden.get((d.key.rank, lost[0]), 0) + 1
                continue
            kind = part_kind(d.key.path)
            here = (kind, selector_text(d.key))
            if here != group:
                group = here
                lines.append(_window(f"  {kind}  {here[1]}" if here[1] else f"  {kind}", 0, WIDTH))
            lines += _value_lines(d, names)
        for (rank, side), count in hidden.items():
            other = names[1 - side]
            lines.append(
                f"  rank {rank} raised {raised[(rank, side)]} in {names[side]}, not in {other}: "
                f"{count} values recorded only in {other} not listed"
            )
    return lines


def _counts(differences: Iterable[Difference]) -> str:
    counts = Counter(d.apart for d in differences)
    return ", ".join(f"{APART[k]} {n}" for k, n in counts.items())


def _per_spec(differences: list[Difference]) -> list[str]:
    """One line per spec with a behaviour difference (or a run on one side only), then one for the rest."""
    lines, quiet = [], 0
    for spec in dict.fromkeys(d.spec for d in differences):
        mine = [d for d in differences if d.spec == spec]
        behaviour = [d for d in mine if d.apart is None]
        apart = [d for d in mine if d.apart is not None]
        if not behaviour:
            quiet += 1
            continue
        run = next((d for d in behaviour if d.key.part == "spec"), None)
        if run is not None:
            outcomes = [str(v).split(":", 1)[0] if v else "not run" for v in (run.a, run.b)]
            text = f"{outcomes[0]} in A, {outcomes[1]} in B"
        else:
            paths = list(dict.fromkeys(d.key.path for d in behaviour))
            shown = ", ".join(paths[:2]) + (f", +{len(paths) - 2} fields" if len(paths) > 2 else "")
            text = f"{len(behaviour)} behaviour difference{'s' if len(behaviour) != 1 else ''} ({shown})"
        text += f"; set apart: {_counts(apart)}" if apart else ""
        lines.append(_window(f"  {spec_name(spec)}: {text}", 0, WIDTH))
    if quiet:
        other = " other" if lines else ""
        lines.append(f"  {quiet}{other} spec{'s' if quiet != 1 else ''}: no behaviour difference (some set apart)")
    return lines


def format_report(differences: list[Difference], every: bool = False, names: tuple[str, str] = ("A", "B")) -> list[str]:
    """The summary per spec, the behaviour differences (``every``: all) by spec, check kind and
    selector, then what was set apart."""
    if not differences:
        return []
    shown = differences if every else [d for d in differences if d.apart is None]
    apart = [d for d in differences if d.apart is not None]
    lines = ["per spec:", *_per_spec(differences)]
    unlike = [d for d in differences if d.apart == "instruments"]
    if unlike:
        lines += ["", "instruments differ: only the fields both runs recorded are compared"]
        for d in unlike:
            only = [", ".join(sorted(set(x) - set(y))) or "none" for x, y in ((d.a, d.b), (d.b, d.a))]
            text = f"  {spec_name(d.spec)}: only in {names[0]}: {only[0]}; only in {names[1]}: {only[1]}"
            lines.append(_window(text, 0, WIDTH))
    if shown:
        lines += ["", "behaviour differences:" if not every else "differences:", *_listed(shown, names)]
    if apart and not every:
        lines += ["", f"set apart (--all lists them): {_counts(apart)}"]
    return lines


def summary_line(differences: list[Difference], specs: int, every: bool = False) -> str:
    """``compare: 3 behaviour differences in 1 of 48 specs; 120 set apart``, after the set-apart counts."""
    behaviour = [d for d in differences if every or d.apart is None]
    apart = [d for d in differences if d.apart is not None]
    what = "difference" if every else "behaviour difference"
    plural = "s" if specs != 1 else ""
    if behaviour:
        touched = len({d.spec for d in behaviour})
        many = "s" if len(behaviour) != 1 else ""
        head = f"compare: {len(behaviour)} {what}{many} in {touched} of {specs} spec{plural}"
    else:
        head = f"compare: no {what} in {specs} spec{plural}"
    return head + (f"; {len(apart)} set apart" if apart and not every else "")


def report_json(differences: list[Difference], specs: int, sides: dict[str, Any]) -> dict[str, Any]:
    """The comparison as one JSON object: the two sides, counts, and each difference with its path."""

    def one(d: Difference) -> dict[str, Any]:
        return {
            "spec": d.spec,
            "path": d.key.path,
            "kind": d.key.part if d.key.part == "spec" else part_kind(d.key.path),
            "rank": d.key.rank,
            "selector": selector_text(d.key),
            "field": d.key.field,
            "a": d.a,
            "b": d.b,
            "absent_in": [n for n, here in zip("ab", d.present) if not here],
            "set_apart": APART[d.apart] if d.apart else None,
        }

    behaviour = [d for d in differences if d.apart is None]
    return {
        "a": sides.get("a"),
        "b": sides.get("b"),
        "specs": specs,
        "behaviour_differences": len(behaviour),
        "set_apart": {APART[k]: n for k, n in Counter(d.apart for d in differences if d.apart).items()},
        "differences": [one(d) for d in differences],
    }
