"""scripts/gpu_check on a machine without a GPU, and its checks as functions of a run's records."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys

from tests.support import REPO

SCRIPT = REPO / "scripts" / "gpu_check"


def load_script():
    loader = importlib.machinery.SourceFileLoader("gpu_check", str(SCRIPT))
    spec = importlib.util.spec_from_loader("gpu_check", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_without_a_gpu_it_says_so_and_skips_every_check(tmp_path):
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "PATH": str(tmp_path), "PYTHONPATH": str(REPO)}  # no nvidia-smi; no NVML on this host
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "gpu_check: no GPU visible (NVML and nvidia-smi find none): every check SKIP"
    record = json.loads(out.read_text())
    gc = load_script()
    assert [c["check"] for c in record["checks"]] == gc.ONE_RANK + gc.FOUR_RANKS
    assert {c["status"] for c in record["checks"]} == {"SKIP"} and record["gpus"] == []
    assert "torch" not in proc.stderr  # no traceback


def rank(**fields):
    return {
        "environment": {"device_type": "cuda"},
        "events": [],
        "collectives": [],
        "memory": [],
        "params": [],
        **fields,
    }


def payload(*ranks):
    return {"results": [], "observations": {"s": {"ranks": list(ranks)}}}


def test_autograd_thread_fails_on_a_backward_event_outside_backward():
    gc = load_script()
    events = [{"event": "pre_backward", "phase": "backward"}, {"event": "post_backward_reduce", "phase": "backward"}]
    collectives = [{"op": "all_reduce", "phase": "backward"}]
    assert gc.check_autograd_thread(payload(rank(events=events, collectives=collectives))).status == "PASS"
    events[1]["phase"] = "forward"  # recorded from a thread the phase recorder does not follow
    check = gc.check_autograd_thread(payload(rank(events=events, collectives=collectives)))
    assert check.status == "FAIL" and check.detail["misplaced"] == [("post_backward_reduce", "forward")]
    assert gc.check_autograd_thread(payload(rank())).status == "FAIL"  # nothing recorded is no evidence


def test_memory_accounting_allows_the_512_byte_rounding_on_cuda_only():
    gc = load_script()
    params = [{"local_numel": 16, "element_size": 4}, {"local_numel": 4096, "element_size": 4}]  # 64 B, 16,384 B

    def with_tracked(n):
        return payload(rank(params=params, memory=[{"bytes": {"sharded_param": n}}]))

    assert gc.check_memory_accounting(with_tracked(16_448), "cpu").status == "PASS"
    assert gc.check_memory_accounting(with_tracked(16_896), "cuda").status == "PASS"  # 64 B rounded to 512
    assert gc.check_memory_accounting(with_tracked(16_896), "cpu").status == "FAIL"
    assert gc.check_memory_accounting(with_tracked(16_897), "cuda").status == "FAIL"
    assert gc.check_memory_accounting(with_tracked(16_447), "cuda").status == "FAIL"


def test_contexts_fail_when_the_launcher_or_two_ranks_share_a_gpu():
    gc = load_script()
    sampler = gc.ContextSampler()
    facts = {"launcher_pid": 10, "tree": [10, 11, 12]}
    sampler.seen = {11: {"GPU-a"}, 12: {"GPU-b"}, 99: {"GPU-a"}}  # 99: not the run's
    assert gc.check_contexts("c", sampler, facts, 2).status == "PASS"
    sampler.seen[10] = {"GPU-a", "GPU-b"}
    check = gc.check_contexts("c", sampler, facts, 2)
    assert check.status == "FAIL" and "the launcher (pid 10) holds a context on 2 GPU(s)" in check.figure
    sampler.seen = {11: {"GPU-a"}, 12: {"GPU-a"}}
    assert "2 contexts on GPU-a" in gc.check_contexts("c", sampler, facts, 2).figure
    sampler.seen = {4242: {"GPU-a"}}  # a container: nvidia-smi lists the host's PIDs
    assert gc.check_contexts("c", sampler, facts, 2).status == "SKIP"
