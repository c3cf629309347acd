"""Checks: pure functions of (spec entry, observation document) -> result.

An entry (:class:`harness.language.entry.Entry`) names a check kind
(:mod:`harness.language.kinds`: param, params_total, input, step, param_state, collectives,
memory, numerics, state_dict, ...), selectors that choose what to measure, and the fields it
expects; every selected rank must meet every expectation. Nothing here launches ranks or touches torch:
checks are testable on a hand-written observation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from harness.language.entry import Entry
from harness.language.kinds import REGISTRY
from harness.language.observed import CheckError, NotMeasured, rank_hosts, ranks_on_hosts, ranks_text

__all__ = ["FieldResult", "CheckResult", "check"]


@dataclass
class FieldResult:
    """One field's outcome: expected, observed per rank, and the ranks that failed."""

    field: str
    expected: str
    observed: dict[int, str]
    failed_ranks: list[int]
    hosts: dict[int, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed_ranks

    def observed_text(self) -> str:
        """Each distinct value with the ranks that observed it: ``[74] (ranks 0-5); [68] (rank 6)``."""
        by_value: dict[str, list[int]] = {}
        for rank, value in self.observed.items():
            by_value.setdefault(value, []).append(rank)
        shown = [f"{v} (rank{'s' if len(rs) > 1 else ''} {ranks_text(rs)})" for v, rs in list(by_value.items())[:8]]
        if len(by_value) > 8:
            shown.append(f"... {len(by_value) - 8} more values")
        return "; ".join(shown)


@dataclass
class CheckResult:
    """An entry's outcome. status: 'pass', 'fail', 'error' (could not measure) or 'skip'."""

    entry: Entry
    status: str
    fields: list[FieldResult] = field(default_factory=list)
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("pass", "skip", "xfail")

    def explain(self) -> str:
        """Multi-line text for a failure: where it comes from, expected vs observed."""
        e = self.entry
        failed = [f.field for f in self.fields if not f.ok]
        line = e.line_of(failed[0]) if failed else e.line  # where to edit: the failing field's line
        lines = [f"{e.spec}:{line}: [{e.table or e.section}] {e.id}"]
        if e.says:  # the spec's statement of the document's claim, with where the document makes it
            lines.append(f"  the document claims: {e.says}" + (f" (section: {e.section})" if e.section else ""))
        elif e.section:
            lines.append(f"  document section: {e.section}")
        if self.message:
            lines.append(f"  {self.status}: {self.message}")
        for f in self.fields:
            mark = "ok  " if f.ok else "FAIL"
            lines.append(f"  {mark} {f.field}: expected {f.expected}; observed {f.observed_text()}")
            if not f.ok:
                lines.append(f"       failing ranks: {ranks_on_hosts(dict.fromkeys(f.failed_ranks), f.hosts)}")
        return "\n".join(lines)


def check(entry: Entry, observation: Mapping[str, Any]) -> CheckResult:
    """Measure ``entry`` on ``observation`` and compare every expected field on every selected rank.

    Returns a CheckResult with status 'pass', 'fail', or 'error' (CheckError: the entry could
    not be measured, e.g. a parameter that does not exist). Never raises CheckError.
    """
    try:
        measured = REGISTRY[entry.check].measure(entry.selectors, observation)
    except CheckError as exc:
        return CheckResult(entry, "error", message=str(exc))
    results, not_measured = [], []
    hosts = rank_hosts(observation)
    for name, expectation in entry.expect.items():
        observed, failed = {}, []
        for rank, values in measured.items():
            if name not in values:
                return CheckResult(
                    entry, "error", message=f"rank {rank}: field {name!r} not observed; fields: {sorted(values)}"
                )
            if isinstance(values[name], NotMeasured):  # this run cannot measure it: not compared
                observed[rank] = f"n/a: {values[name].reason}"
                not_measured.append(values[name].reason)
                continue
            observed[rank] = expectation.show_observed(values[name])
            if not expectation.holds(values[name]):
                failed.append(rank)
        results.append(FieldResult(name, expectation.describe(), observed, failed, hosts))
    if not_measured and all(all(v.startswith("n/a: ") for v in f.observed.values()) for f in results):
        return CheckResult(entry, "skip", results, message="; ".join(dict.fromkeys(not_measured)))
    status = "pass" if all(f.ok for f in results) else "fail"
    return CheckResult(entry, status, results)
