"""What observing costs: the same setup on the same ranks, plain and with instruments, step by step.

``python benchmarks/bench_observe_cost.py [--case walkthrough|qwen3_0_6b|all] [--device cpu|cuda]
[--steps 6] [--rounds 2] [--layers N] [--variants plain,all,...] [--json PATH]``

For each case one launch of real ranks runs, in every rank process, the case's setup once per
variant (``benchmarks/observe_cost_ranks.py``): ``plain`` (``setup.instruments = ()``: no
recorder, no profiler, no replica), ``all`` (every instrument: ``run --all-instruments``),
``spec`` (what the spec's entries read: how ``run`` and the pytest plugin run it),
``collectives+shards`` (what its collectives, param and params_total entries alone read: a spec
that checks only collectives and shards) and each instrument of
``harness.contract.instrument_names.INSTRUMENTS`` alone, in alternating order round by round.
The setup is the spec's with a schedule of ``--steps`` identical steps (``repeat``).

Printed per variant:

- ``step ms``: the steady-state step, step 2 onward: the time from one step's start to the next
  one's (forward, backward, optimizer, zero_grad and every instrument's work at and between them),
  the slowest rank per step, the median over steps and rounds; and its ratio to ``plain``;
- ``min ms``: the fastest such step (on a shared machine the median carries the other processes'
  load; the minimum is the step with the least of it), and its ratio to ``plain``'s;
- ``cpu ms``: the CPU time of that step summed over the ranks (every thread of each rank process),
  median over steps and rounds, and its ratio: the work the step did, which the other processes of
  a shared machine do not lengthen as they lengthen its wall time;
- ``run s``: the rank's whole ``run_step`` (build, replica, ``fully_shard``, steps, the
  observation's assembly), the slowest rank, median over rounds, and its ratio to ``plain``.

The replica (``numerics``) runs before ``fully_shard``: it shows in ``run s``, not in ``step ms``.

Cases: ``walkthrough``: ``specs/qwen3_walkthrough.yaml`` (2 walkthrough layers, fp16, AdamW, 4
ranks); ``qwen3_0_6b``: ``specs/qwen3_0_6b_8_ranks.yaml`` (Qwen3-0.6B as a causal LM, 2 layers,
bf16, 8 ranks). On CPU they run on gloo ranks; a case the pre-flight check refuses on this machine
is reported with its estimate and skipped. ``--device cuda``: the same setups on one NCCL rank
(mesh [1]) each, and ``--layers 28`` for the whole Qwen3-0.6B (for a lent GPU). The load average
is printed before and after.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

CASES = {
    "walkthrough": ROOT / "specs" / "qwen3_walkthrough.yaml",
    "qwen3_0_6b": ROOT / "specs" / "qwen3_0_6b_8_ranks.yaml",
}
HOOKS = Path(__file__).resolve().parent / "observe_cost_ranks.py"


def case_setup(spec_path: Path, steps: int, device: str, layers: int | None) -> Any:
    """The spec's setup with ``steps`` identical steps, the timing hooks, and on cuda one rank."""
    from harness.load.hooks import HooksSetup
    from harness.load.setup import RunSetup
    from harness.load.spec import load_spec

    setup = load_spec(spec_path).setup
    schedule = RunSetup.from_mapping({"schedule": {"steps": [{"repeat": steps}]}}).schedule
    hooks = HooksSetup(
        file=str(HOOKS),
        before_step="step_started",
        observe="started_at",
        digest=hashlib.sha256(HOOKS.read_bytes()).hexdigest(),
    )
    setup = dataclasses.replace(setup, schedule=schedule, hooks=hooks)
    if layers is not None:
        model = dataclasses.replace(setup.model, overrides={**dict(setup.model.overrides), "num_hidden_layers": layers})
        setup = dataclasses.replace(setup, model=model)
    if device == "cuda":
        setup = dataclasses.replace(setup, mesh_shape=(1,), mesh_dim_names=(setup.mesh_dim_names[-1],))
    return setup


SHARDS_AND_COLLECTIVES = ("collectives", "param", "params_total")
"""The check kinds of a spec that checks only collectives and shards (the 1.5x bound of issue 42)."""


def asked(spec_path: Path, kinds: tuple[str, ...] | None = None) -> list[str]:
    """The instruments the spec's entries (of ``kinds`` only, where given) need, as a run of it
    chooses them (``harness.load.instrument_choice``)."""
    from harness.load.instrument_choice import needed_instruments
    from harness.load.spec import load_spec

    items = load_spec(spec_path).items
    return sorted(needed_instruments(i.entry for i in items if kinds is None or i.entry.check in kinds))


def variants(setup: Any, spec_path: Path) -> list[tuple[str, list[str] | None]]:
    """plain, all, what the spec asks (``spec``: every entry; ``collectives+shards``: its
    collectives, param and params_total entries), then each instrument alone (less those that
    record nothing for this setup)."""
    from harness.contract.instrument_names import INSTRUMENTS
    from model import get_config

    config = get_config(setup.model.config, **dict(setup.model.overrides))
    idle = {"experts"} if not getattr(config, "num_experts", 0) else set()
    if not setup.numerics:
        idle.add("numerics")
    chosen = [("spec", asked(spec_path)), ("collectives+shards", asked(spec_path, SHARDS_AND_COLLECTIVES))]
    return [("plain", []), ("all", None)] + chosen + [(name, [name]) for name in INSTRUMENTS if name not in idle]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarize(ranks: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per variant: steady-state step (s, the slowest rank per step, median over steps from the
    second and rounds) and whole run_step (s, slowest rank, median over rounds)."""
    out = {}
    for name in ranks[0]["runs"]:
        steps, cpus, totals = [], [], []
        for i in range(len(ranks[0]["runs"][name])):
            runs = [r["runs"][name][i] for r in ranks]
            per_rank = [[b - a for a, b in zip(run["starts_s"], run["starts_s"][1:])] for run in runs]
            steps += [max(durations) for durations in list(zip(*per_rank))[1:]]  # step 2 onward
            cpu = [[b - a for a, b in zip(run["cpu_starts_s"], run["cpu_starts_s"][1:])] for run in runs]
            cpus += [sum(durations) for durations in list(zip(*cpu))[1:]]
            totals.append(max(run["timings_s"]["total"] for run in runs))
        out[name] = {
            "step_s": _median(steps),
            "step_min_s": min(steps, default=float("nan")),
            "step_cpu_s": _median(cpus),
            "run_s": _median(totals),
            "peak_rss_bytes": max(run["peak_rss_bytes"] for r in ranks for run in r["runs"][name]),
            "samples": len(steps),
        }
    return out


def run_case(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from harness.run.launch.local import run_local
    from harness.run.preflight import PreflightError, check

    setup = case_setup(CASES[name], args.steps, args.device, args.layers)
    backend = "nccl" if args.device == "cuda" else "gloo"
    try:
        est = check(setup, backend)
    except PreflightError as exc:
        return {"case": name, "refused": str(exc)}
    chosen = [v for v in variants(setup, CASES[name]) if not args.variants or v[0] in args.variants.split(",")]
    started = time.perf_counter()
    ranks = run_local(
        setup,
        backend=backend,
        timeout_s=args.timeout,
        step="observe_cost_ranks:paired_steps",
        step_kwargs={"variants": chosen, "rounds": args.rounds},
    )
    return {
        "case": name,
        "world_size": setup.world_size,
        "backend": backend,
        "layers": get_layers(setup),
        "estimate_per_rank_bytes": est.per_rank if est is not None else None,
        "wall_s": time.perf_counter() - started,
        "variants": summarize(ranks),
    }


def get_layers(setup: Any) -> int:
    from model import get_config

    return get_config(setup.model.config, **dict(setup.model.overrides)).num_hidden_layers


def print_case(result: dict[str, Any]) -> None:
    if "refused" in result:
        print(f"{result['case']}: refused by the pre-flight check: {result['refused']}")
        return
    print(
        f"{result['case']}: {result['world_size']} {result['backend']} rank(s), {result['layers']} layers, "
        f"launch {result['wall_s']:.0f} s"
    )
    plain = result["variants"]["plain"]
    columns = (("step_s", "step ms", 1e3), ("step_min_s", "min ms", 1e3), ("step_cpu_s", "cpu ms", 1e3))
    header = "".join(f" {label:>9} {'x plain':>8}" for _, label, _ in columns)
    print(f"  {'variant':<18}{header} {'run s':>8} {'x plain':>8}")
    for name, v in result["variants"].items():
        cells = "".join(f" {v[key] * scale:9.1f} {v[key] / plain[key]:8.2f}" for key, _, scale in columns)
        print(f"  {name:<18}{cells} {v['run_s']:8.2f} {v['run_s'] / plain['run_s']:8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=[*CASES, "all"], default="all")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--steps", type=int, default=6, help="identical steps per run (default 6; step 2 on timed)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of every variant, in alternating order")
    parser.add_argument("--layers", type=int, default=None, help="num_hidden_layers override (e.g. 28)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds for one case's launch")
    parser.add_argument("--variants", help="only these variants, comma-separated (plain is always kept)")
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()
    if args.variants:
        args.variants = "plain," + args.variants
    if args.steps < 3:
        parser.error("--steps must be at least 3 (step 2 onward is timed, between step starts)")
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    results = []
    for name in CASES if args.case == "all" else [args.case]:
        results.append(run_case(name, args))
        print_case(results[-1])
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
