"""Multi-node under torchrun, on one host: two torchrun agents (2 nodes x 2 processes, c10d
rendezvous on 127.0.0.1, gloo) run a spec and print the report once; launches that cannot work
end with one clear message within the rendezvous timeout.

Each test starts real torchrun agents (a world of 2 to 4 processes), about a minute under load.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import REPO
from tests.support.specs import write_spec

pytestmark = pytest.mark.slow

# Written to a temporary file by each test: a spec under tests/ would be collected as spec items
# and run on the local launcher, where it is one node, not two.
SPEC_TEXT = """\
# A 4-rank world of two torchrun agents on one host (2 nodes x 2 processes): the walkthrough
# layer's shards and collectives, and the layout each rank recorded.
spec: two_nodes
title: The walkthrough layer on a world of two torchrun nodes
document: "FSDP2 Qwen3 Decoder Layer Walkthrough, run as a 2-node world"
timeout_s: 240
setup:
  model: {config: walkthrough, overrides: {num_hidden_layers: 1}, dtype: float16}
  mesh: {shape: [4], dim_names: [dp]}
  numerics: false
tables:
  - section: "每个 rank 上的参数分片"
    title: shards
    check: param
    with: {layer: 0}
    columns: [param, full_shape, local_shape]
    rows:
      - [self_attn.q_proj.weight, [512, 512], [128, 512]]
  - section: "Step 0：Pre-Forward Hook → All-Gather 层参数"
    title: gather
    check: collectives
    entries:
      - {id: forward_all_gather, select: {phase: forward, op: all_gather}, count: 1, buffer_bytes: "4.72 MB"}
  - section: "the ranks' environment"
    title: layout
    check: environment
    entries:
      - {id: two_nodes_of_two, nodes: 2, ranks_per_node: 2, hosts: 1, ranks_per_host: 4, same_torch_version: true}
"""


# One node of 2 processes whose rank 1 hangs before its forward: the run never reaches its entry.
HANG_SPEC_TEXT = """\
spec: one_node_hang
title: The walkthrough layer on one torchrun node of 2 processes
document: "FSDP2 Qwen3 Decoder Layer Walkthrough, run under torchrun"
timeout_s: 240
setup:
  model: {config: walkthrough, overrides: {num_hidden_layers: 1}, dtype: float16}
  mesh: {shape: [2], dim_names: [dp]}
  numerics: false
  track_memory: false
tables:
  - section: "每个 rank 上的参数分片"
    title: shards
    check: param
    with: {layer: 0}
    columns: [param, full_shape, local_shape]
    rows:
      - [self_attn.q_proj.weight, [512, 512], [256, 512]]
"""


@pytest.fixture
def spec(tmp_path) -> Path:
    return write_spec(tmp_path, SPEC_TEXT, "two_nodes.yaml")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def agents(
    spec: Path,
    nodes: int,
    per_node: int,
    *,
    started: int | None = None,
    join_timeout: int = 60,
    timeout: float = 400,
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> list[subprocess.CompletedProcess]:
    """Start ``started`` (default ``nodes``) torchrun agents of a ``nodes``-node world; wait for all.

    TMPDIR is the spec's folder (the test's own): torchrun's log folders (``torchelastic_*``,
    which it leaves behind) go there, not into the machine's /tmp."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(nodes),
        "--nproc-per-node",
        str(per_node),
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        f"test-{port}",
        "--rdzv-conf",
        f"join_timeout={join_timeout}",
        "--max-restarts",
        "0",
        "-m",
        "harness",
        "run",
        str(spec),
        "--backend",
        "gloo",
        *extra,
    ]
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "COLUMNS": "200",
        "TMPDIR": str(spec.parent),
        **(env or {}),
    }
    procs = [
        subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(started or nodes)
    ]
    out = []
    try:
        for p in procs:
            stdout, _ = p.communicate(timeout=timeout)
            out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, ""))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


def test_two_nodes_run_the_spec_and_rank_0_reports_once(spec, tmp_path):
    report = tmp_path / "cluster.md"
    runs = agents(spec, 2, 2, extra=("--report", str(report)))
    text = "".join(r.stdout for r in runs)
    assert [r.returncode for r in runs] == [0, 0], text
    assert text.count("two_nodes — The walkthrough layer on a world of two torchrun nodes") == 1, text
    summary = [line for line in text.splitlines() if line.startswith("two_nodes: ")]
    assert len(summary) == 1 and "3 passed, 0 failed" in summary[0] and "4 ranks" in summary[0], text
    assert "Traceback" not in text
    assert text.count(f"wrote {report}") == 1
    markdown = report.read_text(encoding="utf-8")
    host = socket.gethostname()
    assert f"| {host} | 0, 1 | 0-3 | 0, 1, 0, 1 |" in markdown, markdown  # one host, two nodes, local ranks 0-1 each
    assert "launcher joined" in markdown and "every rank agrees" in markdown and "3 pass" in markdown


def test_a_world_the_spec_does_not_fit_ends_with_one_message(spec):
    start = time.monotonic()
    runs = agents(spec, 2, 1)  # 2 ranks for a 4-rank spec (each rank a fresh Python: the fewest that are 2 nodes)
    text = "".join(r.stdout for r in runs)
    assert all(r.returncode != 0 for r in runs), text
    assert text.count("joined a world of 2 ranks (2 nodes x 1 process), but setup.mesh.shape [4] needs 4") == 1, text
    assert time.monotonic() - start < 300


def test_a_node_that_never_joins_ends_at_the_rendezvous_timeout(spec):
    start = time.monotonic()
    (run,) = agents(spec, 2, 2, started=1, join_timeout=3, timeout=120)  # no peer comes: waits 3 s
    assert run.returncode != 0
    assert "RendezvousTimeoutError" in run.stdout, run.stdout
    assert time.monotonic() - start < 90


def test_a_hang_is_diagnosed_at_the_runs_timeout_before_the_process_groups(tmp_path):
    """Rank 1 of one node's 2 hangs before its forward; at the run's timeout (10 s from the join,
    the process group's is 70 s) each rank prints the verdict from the store and the run ends:
    under NCCL the watchdog would otherwise abort the ranks at the group's timeout with no
    diagnosis. The 10 s count from the join, after torch's import: what they must cover is one
    tiny layer's setup (a second, loaded). Two ranks, the fewest with one to wait for another."""
    from tests.support.hang_rank import sitecustomize as hang_rank

    site = str(REPO / "tests" / "support" / "hang_rank")
    env = {
        hang_rank.RANK: "1:forward",
        "PYTHONPATH": os.pathsep.join([site, str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    spec = write_spec(tmp_path, HANG_SPEC_TEXT, "one_node_hang.yaml")
    started = time.monotonic()
    (run,) = agents(spec, 1, 2, env=env, extra=("--timeout", "10"), timeout=300)
    elapsed = time.monotonic() - started
    assert run.returncode != 0, run.stdout
    assert "rank 0: the run did not finish within its timeout of 10 s (joined world)" in run.stdout, run.stdout
    verdict = "Diagnosis: rank 1 never entered all_gather #0 (layers.0, forward); rank 0 waits in it."
    assert verdict in run.stdout, run.stdout
    assert elapsed < 10 + 60, f"ended after {elapsed:.0f} s: at the process group's timeout, not the run's"
