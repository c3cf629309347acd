"""Not a timing: the shipped specs' memory entries under FSDPMemTracker's CUDA accounting, on CPU ranks.

    python scripts/cuda_memory_accounting.py [SPEC ...]      # default: every spec with a memory table

Runs the specs once (``python -m harness run --json``) with ``tests/support/cuda_accounting``
forcing the tracker's CUDA rounding (every storage up to 512 B) in the CLI and its ranks, then
judges each spec's ``memory`` entries twice: as the harness does (``unrounded_bytes``, the
storages' real sizes) and at the tracker's own rounded ``bytes`` (what the check read before
``unrounded_bytes`` existed, so what a GPU run failed). Prints, per spec, the entries that fail
each way, and the snapshots whose two figures differ.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.judge.evaluate import evaluate_spec  # noqa: E402
from harness.load.spec import load_spec  # noqa: E402
from tests.support.cuda_accounting import sitecustomize as cuda_accounting  # noqa: E402


def memory_failures(path: str, observation: dict) -> list[str]:
    return [
        r.entry.id
        for r in evaluate_spec(load_spec(REPO / path), observation)
        if r.entry.check == "memory" and r.status != "pass"
    ]


def main(argv: list[str]) -> int:
    specs = argv or sorted(
        str(p.relative_to(REPO)) for p in (REPO / "specs").glob("*.yaml") if "check: memory" in p.read_text()
    )
    site = REPO / "tests" / "support" / "cuda_accounting"
    env = {**os.environ, cuda_accounting.FLAG: "1", "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        subprocess.run(
            [sys.executable, "-m", "harness", "run", *specs, "--failures-only", "--json", str(out)],
            cwd=REPO,
            env=env,
            check=False,
            capture_output=True,
        )
        documents = json.loads(out.read_text())["observations"]
    total_now = total_before = 0
    for path, observation in documents.items():
        now = memory_failures(path, observation)
        before_doc = copy.deepcopy(observation)
        differ = 0
        for rank in before_doc["ranks"]:
            for snap in rank["memory"]:
                differ += snap["bytes"] != snap["unrounded_bytes"]
                del snap["unrounded_bytes"]
        before = memory_failures(path, before_doc)
        total_now, total_before = total_now + len(now), total_before + len(before)
        print(
            f"{path}: fail now {now or 'none'}; at the tracker's bytes {before or 'none'}; "
            f"{differ} snapshots with differing figures"
        )
    print(f"{len(documents)} specs: {total_now} memory entries fail now, {total_before} at the tracker's rounded bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
