"""``run --repeat N``: each spec run N times, every observed field that differed, and ``unstable`` entries.

Pure functions of one spec's N observations and results. :func:`varying_fields`: each value not
the same in all runs, and why where the field declarations (:mod:`harness.contract.fields`) say it
may vary. :func:`repeated_outcomes`: an entry whose values or status differ between runs is
``unstable``, neither passed nor failed. :func:`exit_status`: 1, 3 or 0."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from harness.contract import fields
from harness.language.kinds import part_kind
from harness.report.compare import Key, flatten_observation, mask, record_of, selector_text

__all__ = [
    "UNSTABLE_EXIT",
    "Varying",
    "RepeatedOutcome",
    "varying_fields",
    "repeated_outcomes",
    "exit_status",
    "format_varying",
    "format_unstable",
    "summary_line",
]

UNSTABLE_EXIT = 3
"""``run --repeat``'s exit status when no entry fails in every run but one is unstable."""


@dataclass(frozen=True)
class Varying:
    """One value that differed: its key, each run's value (None: absent), and why it may vary (None: a surprise)."""

    key: Key
    values: tuple
    expected: str | None = None


@dataclass(frozen=True)
class RepeatedOutcome:
    """One entry over the runs: ``status`` if all agree, else ``unstable``; ``runs``: (status, {field: observed})."""

    result: Any  # the first run's CheckResult (entry, fields)
    status: str
    runs: tuple


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _expected(key: Key, worlds: set[str]) -> str | None:
    declared = fields.lookup(key.path)
    if declared.aspect in ("timing", "diagnostic"):
        return declared.varies or declared.aspect
    for world in worlds & set(fields.WORLDS):
        why = fields.varies(key.path, world, record_of(key))
        if why:
            return why
    return None


def varying_fields(documents: Sequence[Mapping[str, Any]]) -> list[Varying]:
    """Every value not the same in all ``documents``, in order; messages compared masked."""
    flats = [flatten_observation(doc, every=True) for doc in documents]
    worlds = {doc["environment"].get("backend") for doc in documents}
    keys = list(dict.fromkeys(k for flat in flats for k in flat))
    out = []
    for key in keys:
        values = tuple(flat.get(key) for flat in flats)
        seen = [mask(v) for v in values] if fields.lookup(key.path).masked else values
        if len({_text(v) for v in seen}) > 1:
            out.append(Varying(key, values, _expected(key, worlds)))
    return out


def _masked(value: Any) -> Any:
    """``value`` with every string in it masked as ``compare`` masks messages (ports, paths, pids)."""
    if isinstance(value, Mapping):
        return {k: _masked(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_masked(v) for v in value]
    return mask(value)


def repeated_outcomes(runs: Sequence[Sequence[Any]]) -> list[RepeatedOutcome]:
    """Per entry (the runs' results in the same entry order), its outcome over all runs."""
    out = []
    for per_run in zip(*runs):
        seen = tuple((r.status, {f.field: f.observed for f in r.fields}) for r in per_run)
        same = len({_text(_masked(s)) for s in seen}) == 1  # a port or path in a message is no difference
        out.append(RepeatedOutcome(per_run[0], per_run[0].status if same else "unstable", seen))
    return out


def exit_status(outcomes: Sequence[RepeatedOutcome], failing: frozenset) -> int:
    """1 when an entry fails alike in every run (``failing``: the failing statuses), else
    :data:`UNSTABLE_EXIT` when one is unstable, else 0."""
    if any(o.status in failing for o in outcomes):
        return 1
    return UNSTABLE_EXIT if any(o.status == "unstable" for o in outcomes) else 0


def _which(values: Sequence[Any]) -> str:
    """``9441792 (runs 1, 3); 4720896 (run 2)``: each distinct value and the runs (1-based) that saw it."""
    groups: dict[str, list[int]] = {}
    for i, v in enumerate(values, start=1):
        groups.setdefault(_text(v), []).append(i)
    return "; ".join(f"{v} (run{'s' if len(r) > 1 else ''} {', '.join(map(str, r))})" for v, r in groups.items())


def format_varying(varying: Sequence[Varying]) -> list[str]:
    """One line per value that varied though declared stable (kind, selector, field, values and runs),
    then one counting those declared to vary."""
    lines = [
        f"  varies: {part_kind(v.key.path)} {selector_text(v.key)}: {v.key.field}: {_which(v.values)}"
        for v in varying
        if v.expected is None
    ]
    expected = sum(v.expected is not None for v in varying)
    if expected:
        lines.append(f"  {expected} value{'s' if expected != 1 else ''} declared to vary run to run also differed")
    return lines


def format_unstable(outcomes: Sequence[RepeatedOutcome]) -> list[str]:
    """For each unstable entry: its mark, id and place, each field's observed values and each run's status."""
    lines = []
    for o in outcomes:
        if o.status != "unstable":
            continue
        e = o.result.entry
        lines.append(
            f"~ unstable {e.spec}:{e.line}: [{e.table or e.section}] {e.id}: status {_which([s for s, _ in o.runs])}"
        )
        for name in o.runs[0][1]:
            values = [observed.get(name) for _, observed in o.runs]
            if len({_text(v) for v in values}) > 1:
                lines.append(f"    {name}: {_which(values)}")
    return lines


def summary_line(outcomes: Sequence[RepeatedOutcome], runs: int, failing: frozenset) -> str:
    """``113 passed, 0 failed, 2 unstable over 3 runs`` (skipped and known deviations when present)."""
    count = {s: sum(o.status == s for o in outcomes) for s in ("pass", "skip", "xfail", "unstable")}
    failed = sum(o.status in failing for o in outcomes)
    parts = [f"{count['pass']} passed", f"{failed} failed", f"{count['unstable']} unstable"]
    if count["skip"]:
        parts.append(f"{count['skip']} skipped")
    if count["xfail"]:
        parts.append(f"{count['xfail']} known deviations")
    return ", ".join(parts) + f" over {runs} runs"
