"""Evaluate spec items against an observation: the checks plus the spec's gating. Beyond pass, fail
and error: skip (the torch range excludes the running torch), xfail (a declared deviation is still
observed), xpass (it is not: the spec needs updating, a failure)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from harness.contract import fields
from harness.contract.names import torch_build_of
from harness.judge.checks import CheckResult, check
from harness.language.kinds import get_kind, read_by

if TYPE_CHECKING:  # types only: judging imports nothing from the loader
    from harness.load.spec import Spec, SpecItem

FAILING = frozenset({"fail", "error", "xpass"})


def evaluate_item(item: "SpecItem", observation: Mapping[str, Any]) -> CheckResult:
    """Check one item, honouring its torch range and build and its declared deviation."""
    env = observation["environment"]
    # the observed build: torch.version.cuda is None on a CPU-only one (unknown in an older document)
    build = torch_build_of(env["torch_cuda_version"]) if "torch_cuda_version" in env else None
    reason = item.skip_reason(env["torch_version"], build)
    if reason:
        return CheckResult(item.entry, "skip", message=reason)
    if env["simulated"] and (unobserved := simulation_unobserved(item.entry)):
        return CheckResult(item.entry, "skip", message=f"a simulated run (fake backend) {unobserved}")
    wanted = _explicit_ranks(item.entry.selectors)
    if env["simulated"] and wanted and not set(wanted) & set(env["observed_ranks"]):
        return CheckResult(
            item.entry,
            "skip",
            message=f"rank(s) {wanted} not simulated; setup.observe_ranks chose {env['observed_ranks']}",
        )
    result = check(item.entry, observation)
    differs = get_kind(item.entry.check).simulation_differs
    if env["simulated"] and differs and result.status == "fail":
        failed = [f for f in result.fields if not f.ok]
        if {f.field for f in failed} <= set(differs):
            observed = "; ".join(sorted({v for f in failed for v in f.observed.values()}))
            why = "; ".join(dict.fromkeys(differs[f.field] for f in failed))
            return CheckResult(item.entry, "skip", message=f"a simulated run (fake backend) {why}: {observed}")
    if item.deviation:
        link = f" ({item.deviation['link']})" if item.deviation.get("link") else ""
        if result.status == "fail":
            result.status, result.message = "xfail", f"known deviation: {item.deviation['reason']}{link}"
        elif result.status == "pass":
            result.status = "xpass"
            result.message = f"declared deviation no longer observed, update the spec: {item.deviation['reason']}{link}"
    return result


def simulation_unobserved(entry: Any) -> str | None:
    """Why a simulated run cannot answer ``entry`` (a phrase after "a simulated run"), or None: the
    kind's source, an expected field or a selected record is unobserved in the fake world
    (:func:`harness.language.kinds.read_by`)."""
    for condition in fields.RECORD_CONDITIONS:
        if _selects_only(entry.selectors, condition.key, condition.values) and "fake" in condition.unobserved:
            if any(f.path.split(".", 1)[0] == condition.part for f in read_by(entry.check).values()):
                return condition.unobserved["fake"]
    sources = read_by(entry.check)
    reasons = {name: f.unobserved.get("fake") for name, f in sources.items()}
    if sources and all(reasons.values()):
        return next(iter(reasons.values()))
    named = sorted(name for name in entry.expect if reasons.get(name))
    return f"{reasons[named[0]]}: {', '.join(named)} not observed" if named else None


def _selects_only(selectors: Mapping[str, Any], key: str, values: frozenset[str]) -> bool:
    """Whether an entry's ``key`` selector (its own, or inside a collectives ``select``) names only
    records of ``values``."""
    chosen = selectors.get(key, (selectors.get("select") or {}).get(key))
    chosen = chosen if isinstance(chosen, list) else [chosen]
    return bool(chosen) and all(isinstance(v, str) and v in values for v in chosen)


def _explicit_ranks(selectors) -> list[int]:
    ranks = selectors.get("rank", selectors.get("ranks"))
    if isinstance(ranks, int):
        return [ranks]
    return list(ranks) if isinstance(ranks, list) else []


def evaluate_spec(spec: "Spec", observation: Mapping[str, Any]) -> list[CheckResult]:
    """Every item of ``spec`` in file order."""
    return [evaluate_item(item, observation) for item in spec.items]


def skipped_spec(spec: "Spec", reason: str) -> list[CheckResult]:
    """Every item of ``spec`` skipped for ``reason`` (a spec gated out whole), with no run."""
    return [CheckResult(item.entry, "skip", message=reason) for item in spec.items]


def counts(results: list[CheckResult]) -> dict[str, int]:
    """Status -> number of results (every status present, zero or not)."""
    out = dict.fromkeys(("pass", "fail", "error", "skip", "xfail", "xpass"), 0)
    for r in results:
        out[r.status] += 1
    return out
