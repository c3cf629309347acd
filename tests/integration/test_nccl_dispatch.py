"""NCCL's dispatch-level return values emulated on gloo ranks: the same answers, and a hang still diagnosed.

On NCCL a synchronous c10d op hands back no ``Work`` at dispatch level (issue 39: the hang
recorder called ``None.get_future()`` and every rank died in backward).
``tests/support/nccl_dispatch/sitecustomize.py`` makes gloo do the same in every process a test
starts (the CLI, the forkserver its ranks come from). Specs that issue synchronous collectives
(FSDP's all-gathers and reduce-scatters in every spec, HSDP's all-reduce, ``clip_grad_norm_``'s
norm, the state-dict round trip's broadcasts and gathers) give every entry the status they give
on plain gloo; and an injected hang names the stuck rank and the collective its peers wait in,
the records of collectives with nothing to watch marked ``"sync"``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import REPO
from tests.support.cli import cli, harness_env
from tests.support.nccl_dispatch import sitecustomize as nccl_dispatch

pytestmark = pytest.mark.slow

SITE = str(REPO / "tests" / "support" / "nccl_dispatch")
EMULATED = {nccl_dispatch.FLAG: "1", "PYTHONPATH": f"{SITE}:{REPO}"}

SPECS = [
    "specs/qwen3_walkthrough.yaml",  # the harness's own steps: all-gathers, reduce-scatters, memory
    "specs/hsdp_1x1.yaml",  # HSDP's synchronous all-reduce, the one collective of a (1, 1) mesh
    "specs/hsdp_all_reduce_last.yaml",
    "specs/clip_grad_norm.yaml",  # the norm's functional all-reduce
    "specs/clip_grad_norm_inf.yaml",
    "specs/state_dict_3_ranks.yaml",  # the checkpoint's collectives
]


def _statuses(env: dict[str, str] | None, out) -> dict[tuple[str, str], str]:
    proc = cli("run", *SPECS, "--failures-only", "--json", str(out), timeout=600, env=env)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return {(r["spec"], r["id"]): r["status"] for r in json.loads(out.read_text())["results"]}


def test_every_entry_has_the_status_it_has_on_plain_gloo(tmp_path):
    plain = _statuses(None, tmp_path / "plain.json")
    emulated = _statuses(EMULATED, tmp_path / "emulated.json")
    assert {spec for spec, _ in plain} == set(SPECS)
    assert "pass" in plain.values()
    differing = {key: (plain[key], emulated.get(key)) for key in plain if emulated.get(key) != plain[key]}
    assert emulated == plain, differing


_HANG = """
import json
from harness.load.setup import ModelSetup, RunSetup
from tests.support.faults import Fault, injected
from harness.run.launch.errors import RunTimeout
from harness.run.launch.local import run_local
from tests.support.ranks import hang_timeout_s

setup = RunSetup(model=ModelSetup(overrides={"num_hidden_layers": 2}), mesh_shape=(3,), numerics=False)
timeout_s = hang_timeout_s(setup, run_local)
try:
    with injected(Fault(rank=1, phase="backward", kind="hang")):
        run_local(setup, backend="gloo", timeout_s=timeout_s)
except RunTimeout as exc:
    print(json.dumps({"verdict": exc.verdict, "progress": {str(r): p for r, p in exc.progress.items()}}))
"""


def test_a_hang_is_still_diagnosed_with_its_rank_and_collective():
    """The test_hang.py scenario (3 ranks, rank 1 hangs at the start of backward) under the emulation."""
    env = {**harness_env(), **EMULATED}
    proc = subprocess.run(
        [sys.executable, "-c", _HANG], cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0 and proc.stdout.strip(), proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["verdict"] == "rank 1 never entered all_gather #2 (layers.1, backward); ranks 0, 2 wait in it"
    # FSDP's forward all-gather is synchronous: under the emulation its op hands back no Work, so
    # its record is marked and counted completed at the next phase (on plain gloo it has a future)
    assert result["progress"]["1"]["completed"] == {
        "seq": 1,
        "op": "all_gather",
        "unit": "layers.1",
        "phase": "forward",
        "group": [0, 1, 3],
        "sync": True,
    }
