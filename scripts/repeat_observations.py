"""How reproducible the observations are: N cold runs per spec, every differing value counted.

    python scripts/repeat_observations.py --runs 10 --out /tmp/repeat specs/qwen3_walkthrough.yaml ...
    python scripts/repeat_observations.py --analyze /tmp/repeat        # count again from the files

Each run is a fresh ``python -m harness run SPEC --json FILE`` (its own ranks, nothing cached
between runs), one after the other, with ``--tree`` as PYTHONPATH (so a copy of an older
commit can be measured the same way). Then every observed field of every run is compared
(``harness.report.compare``'s flattening: timings and environment timings left out), and
per spec the script prints

- memory values: how many (rank, module, state, step, microbatch, occurrence, category)
  values are not the same in all runs, of how many, and per run how many differ from the
  most common value;
- other fields: how many other observed values differ at all (collectives, events, ...);
- with ``--torch-reference FILE`` (``scripts/torch_memory_reference.py --out FILE``, the
  walkthrough in plain torch): per run of ``qwen3_walkthrough``, how many memory values differ
  from torch's first run at the same (rank, module, state, occurrence, category).

Runs are sequential: on a loaded machine, parallel runs change what the scheduler does and
so what a racy instrument records, which is what is measured here.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import argparse
import collections
import json
import os
import subprocess
import time

from harness.contract.names import MEMORY_CATEGORIES
from harness.report.compare import flatten_observation


def _run(tree: Path, spec: str, out: Path, timeout: float) -> int:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "harness", "run", str(Path(spec).resolve()), "--json", str(out), "--no-preflight"]
    proc = subprocess.run(
        cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout
    )
    if proc.returncode not in (0, 1):
        print(f"  {out.name}: exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}", flush=True)
    return proc.returncode


def _observations(path: Path) -> dict[str, dict]:
    return json.loads(path.read_text(encoding="utf-8")).get("observations", {})


def _torch_values(path: Path) -> dict[tuple, int]:
    """The reference's first run: (rank, module, state, occurrence, schema category) -> bytes."""
    run = json.loads(path.read_text(encoding="utf-8"))["runs"][0]
    return {
        (r["rank"], m["module"], m["state"], m["occurrence"], MEMORY_CATEGORIES.get(c, c.lower().replace(" ", "_"))): v
        for r in run["ranks"]
        for m in r["memory"]
        for c, v in m["bytes"].items()
    }


def against_torch(folder: Path, reference: Path) -> list[int]:
    """Per run of the walkthrough, memory values that differ from the torch reference's."""
    torch_values = _torch_values(reference)
    counts = []
    for path in sorted((folder / "qwen3_walkthrough").glob("run_*.json"), key=lambda p: int(p.stem.split("_")[1])):
        flat = flatten_observation(next(iter(_observations(path).values())))
        ours = {
            (k.rank, k.selector[0], k.selector[1], k.selector[4], k.field): v
            for k, v in flat.items()
            if k.part == "memory"
        }
        counts.append(sum(ours.get(k) != v for k, v in torch_values.items()))
    return counts


def analyze(folder: Path) -> dict[str, dict]:
    """Per spec folder: counts of memory values and other values that differ between runs."""
    out = {}
    for spec_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        runs = sorted(spec_dir.glob("run_*.json"), key=lambda p: int(p.stem.split("_")[1]))
        flats = []
        for path in runs:
            try:
                docs = _observations(path)
            except (OSError, ValueError):
                continue
            if len(docs) == 1:
                flats.append(flatten_observation(next(iter(docs.values()))))
        if not flats:
            continue
        keys = set().union(*flats)
        memory_keys = [k for k in keys if k[0] == "memory"]
        other_keys = [k for k in keys if k[0] != "memory"]
        varying_memory = [k for k in memory_keys if len({json.dumps(f.get(k)) for f in flats}) > 1]
        varying_other = [k for k in other_keys if len({json.dumps(f.get(k)) for f in flats}) > 1]
        per_run = [0] * len(flats)
        for k in varying_memory:
            values = [json.dumps(f.get(k)) for f in flats]
            common = collections.Counter(values).most_common(1)[0][0]
            for i, v in enumerate(values):
                per_run[i] += v != common
        out[spec_dir.name] = {
            "runs": len(flats),
            "memory_values": len(memory_keys),
            "memory_varying": len(varying_memory),
            "memory_differing_per_run": per_run,
            "other_values": len(other_keys),
            "other_varying": len(varying_other),
            "examples": [" ".join(map(str, k)) for k in sorted(varying_memory + varying_other, key=str)[:5]],
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="*")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, help="folder for the --json files (one subfolder per spec)")
    parser.add_argument(
        "--tree",
        type=Path,
        default=Path(__file__).resolve().parents[1],
        help="the checkout whose harness runs (PYTHONPATH); default: this one",
    )
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--analyze", type=Path, help="only count, from a folder an earlier run wrote")
    parser.add_argument("--torch-reference", type=Path, help="torch_memory_reference.py's output, for the walkthrough")
    args = parser.parse_args()
    folder = args.analyze or args.out
    if folder is None:
        parser.error("--out or --analyze is required")
    if args.analyze is None:
        for spec in args.specs:
            spec_dir = folder / Path(spec).stem
            spec_dir.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            for i in range(args.runs):
                _run(args.tree.resolve(), spec, spec_dir / f"run_{i}.json", args.timeout)
            print(f"{Path(spec).stem}: {args.runs} runs in {time.perf_counter() - t0:.0f} s", flush=True)
    for spec, c in analyze(folder).items():
        print(
            f"{spec}: {c['memory_varying']} of {c['memory_values']} memory values vary over {c['runs']} runs "
            f"(per run, differing from the most common: {c['memory_differing_per_run']}); "
            f"{c['other_varying']} of {c['other_values']} other values vary"
        )
        for example in c["examples"]:
            print(f"    {example}")
    if args.torch_reference and (folder / "qwen3_walkthrough").is_dir():
        counts = against_torch(folder, args.torch_reference)
        print(
            f"qwen3_walkthrough against plain torch: memory values differing per run {counts} "
            f"(of {len(_torch_values(args.torch_reference))})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
