"""The cluster report as Markdown (``run SPEC... --report cluster.md``): per spec, the hosts and
their ranks, the per-rank environment with values that differ from most ranks' marked, the
nccl-tests bandwidth table and the results; a failed run with its error. Pure."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from harness.judge.checks import CheckResult
from harness.judge.evaluate import FAILING, counts
from harness.language.algbw_busbw import bandwidth_rows
from harness.language.observed import ranks_text
from harness.report.bandwidth_table import markdown_table

__all__ = ["SpecRun", "cluster_report", "DIFFERS"]

DIFFERS = "⚠"
"""Marks an environment value that differs from the one most ranks have."""

_ENV_COLUMNS = (
    ("host", "host"),
    ("node", "node_rank"),
    ("local rank", "local_rank"),
    ("device", "device_name"),
    ("device id", None),
    ("torch", "torch_version"),
    ("backend", "backend"),
    ("CUDA", "cuda_version"),
    ("NCCL", "nccl_version"),
    ("variables", None),
)
# Columns compared across ranks (a rank's own host, node, local rank and device id differ by design).
_AGREEING = {"device", "torch", "backend", "CUDA", "NCCL", "variables"}


@dataclass
class SpecRun:
    """One spec's run for the report: its observation and results, or the error that ended it."""

    path: str
    name: str
    title: str
    observation: Mapping[str, Any] | None = None
    results: Sequence[CheckResult] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0


def _cell(env: Mapping[str, Any], column: str, key: str | None) -> str:
    if column == "device id":
        value = env.get("device_uuid") or env.get("device_pci_bus_id")
        return str(value) if value else (f"cuda:{env['device_index']}" if env.get("device_index") is not None else "-")
    if column == "variables":
        return ", ".join(f"{k}={v}" for k, v in sorted(env.get("variables", {}).items())) or "-"
    value = env.get(key)
    return "-" if value is None else str(value)


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _hosts_section(envs: Mapping[int, Mapping[str, Any]]) -> list[str]:
    by_host: dict[str, list[int]] = {}
    for rank, env in sorted(envs.items()):
        by_host.setdefault(env["host"], []).append(rank)
    out = ["### Hosts and ranks", "", "| host | nodes | ranks | local ranks | devices |", "|---|---|---|---|---|"]
    for host, ranks in by_host.items():
        nodes = sorted({envs[r]["node_rank"] for r in ranks})
        local = [envs[r]["local_rank"] for r in ranks]
        devices = Counter(envs[r]["device_name"] for r in ranks)
        out.append(
            f"| {host} | {', '.join(map(str, nodes))} | {ranks_text(ranks)} | {', '.join(map(str, local))} | "
            + "; ".join(f"{n} × {d}" for d, n in devices.items())
            + " |"
        )
    return out + [""]


def _environment_section(envs: Mapping[int, Mapping[str, Any]]) -> list[str]:
    cells = {r: {c: _cell(e, c, k) for c, k in _ENV_COLUMNS} for r, e in envs.items()}
    majority = {}
    for column in _AGREEING:
        tally = Counter(cells[r][column] for r in sorted(cells))
        majority[column] = tally.most_common(1)[0][0]
    differing = sorted({c for r in cells for c in _AGREEING if cells[r][c] != majority[c]})
    out = ["### Environment", ""]
    out.append(
        f"{DIFFERS} marks a value that differs from the one most ranks have"
        + (f"; ranks differ in: {', '.join(differing)}." if differing else "; every rank agrees.")
    )
    out += ["", "| rank | " + " | ".join(c for c, _ in _ENV_COLUMNS) + " |", "|---:|" + "---|" * len(_ENV_COLUMNS)]
    for rank in sorted(cells):
        row = []
        for column, _ in _ENV_COLUMNS:
            text = _escape(cells[rank][column])
            row.append(
                f"**{text}** {DIFFERS}" if column in _AGREEING and cells[rank][column] != majority[column] else text
            )
        out.append(f"| {rank} | " + " | ".join(row) + " |")
    return out + [""]


def _results_section(results: Sequence[CheckResult]) -> list[str]:
    tally = counts(list(results))
    out = [
        "### Spec results",
        "",
        ", ".join(f"{n} {status}" for status, n in tally.items() if n or status in ("pass", "fail")) + "",
        "",
        "| | table | entry | status |",
        "|---|---|---|---|",
    ]
    for r in results:
        mark = "✗" if r.status in FAILING else ("✓" if r.status in ("pass", "xfail") else "–")
        out.append(f"| {mark} | {_escape(r.entry.table or r.entry.section)} | {_escape(r.entry.id)} | {r.status} |")
    failing = [r for r in results if r.status in FAILING]
    if failing:
        out += ["", "Failing entries:", "", "```"]
        for r in failing:
            out += [r.explain(), ""]
        out.append("```")
    return out + [""]


def _spec_section(run: SpecRun) -> list[str]:
    out = [
        f"## {run.name} — {run.title}",
        "",
        f"Spec: `{run.path}`" + (f", {run.seconds:.1f} s" if run.seconds else ""),
        "",
    ]
    if run.error:
        return out + ["The run failed:", "", "```", run.error, "```", ""]
    obs = run.observation or {}
    env = obs.get("environment", {})
    out += [
        f"torch {env.get('torch_version')}, backend {env.get('backend')}, {env.get('world_size')} ranks, "
        f"mesh {env.get('mesh_shape')} {env.get('mesh_dim_names')}, launcher {env.get('launcher')}",
        "",
    ]
    envs = {r["rank"]: r["environment"] for r in obs.get("ranks", []) if r.get("environment")}
    if envs:
        out += _hosts_section(envs) + _environment_section(envs)
    rows = bandwidth_rows(obs) if obs else []
    if rows:
        first = rows[0]
        out += [
            "### Bandwidth",
            "",
            f"nccl-tests' columns, out of place; time is the mean over ranks of {first.iterations} timed operations "
            f"after {first.warmup} warm-up ({first.timer}); algbw = S / time, busbw = algbw × (n−1)/n for "
            "all-gather and reduce-scatter, × 2(n−1)/n for all-reduce; GB/s = 10^9 B/s.",
            "",
        ]
        out += markdown_table(rows) + [""]
    return out + _results_section(run.results)


def cluster_report(runs: Sequence[SpecRun], *, title: str = "Cluster validation") -> str:
    """The Markdown text of the report for ``runs``, one section per spec."""
    lines = [f"# {title}", ""]
    for run in runs:
        lines += _spec_section(run)
    return "\n".join(lines).rstrip() + "\n"
