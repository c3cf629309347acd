"""Checks: pure functions of (spec entry, observation document) -> result, worded by
:mod:`harness.judge.explain`. Every selected rank must meet every expected field of the entry's
check kind (:mod:`harness.language.kinds`); no ranks, no torch, so a hand-written observation
tests them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from harness.judge import explain
from harness.language.entry import Entry
from harness.language.kinds import REGISTRY
from harness.language.observed import CheckError, NotMeasured, rank_hosts

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
        """Each distinct value with the ranks that observed it (:func:`harness.judge.explain.observed_text`)."""
        return explain.observed_text(self)


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
        """Multi-line text for a failure (:func:`harness.judge.explain.explain`)."""
        return explain.explain(self)


def check(entry: Entry, observation: Mapping[str, Any]) -> CheckResult:
    """Measure ``entry`` on ``observation`` and compare every expected field on every selected rank:
    status 'pass', 'fail', or 'error' (the entry could not be measured). Never raises CheckError."""
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
