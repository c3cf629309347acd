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


def test_memory_accounting_holds_the_unrounded_bytes_to_the_storages():
    gc = load_script()
    params = [{"local_numel": 16, "element_size": 4}, {"local_numel": 4096, "element_size": 4}]  # 64 B, 16,384 B

    def snapshot(tracked, unrounded):
        memory = [{"bytes": {"sharded_param": tracked}, "unrounded_bytes": {"sharded_param": unrounded}}]
        return payload(rank(params=params, memory=memory))

    check = gc.check_memory_accounting(snapshot(16_896, 16_448), "cuda")
    assert check.status == "PASS" and check.detail["unrounded"] == 16_448
    assert gc.check_memory_accounting(snapshot(16_896, 16_896), "cuda").status == "FAIL"  # rounded: not the storages
    assert gc.check_memory_accounting(snapshot(16_448, 16_448), "cpu").status == "PASS"


def test_trace_device_needs_kernels_in_the_trace(tmp_path):
    gc = load_script()
    folder = tmp_path / "trace" / "gpu_one_rank"
    folder.mkdir(parents=True)
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm"}]
    (folder / "rank0.json").write_text(json.dumps({"traceEvents": events}))
    assert gc.check_trace_device(0, tmp_path / "trace", "").status == "FAIL"  # CPU events only
    events += [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce"}, {"ph": "X", "cat": "gpu_memcpy"}]
    (folder / "rank0.json").write_text(json.dumps({"traceEvents": events}))
    check = gc.check_trace_device(0, tmp_path / "trace", "")
    assert check.status == "PASS" and check.detail["counts"] == {"kernel": 1, "gpu_memcpy": 1}
    assert gc.check_trace_device(2, tmp_path / "trace", "").status == "FAIL"
    forward = {"event": "pre_forward", "unit": "layers.0", "phase": "forward"}
    once, twice = payload(rank(events=[forward])), payload(rank(events=[forward, forward]))
    assert gc.check_trace_device(0, tmp_path / "trace", "", once, once).status == "PASS"
    assert gc.check_trace_device(0, tmp_path / "trace", "", twice, once).status == "FAIL"  # GPU copies read as events


def test_compile_note_is_said_exactly_when_the_units_ran_eager():
    gc = load_script()
    note = "note: setup.fsdp.units[].compile: ... so the compiled units ran eagerly; ..."
    eager = payload(rank(compile={"unique_graphs": 0, "graph_breaks": 0, "ran_eager": True}))
    compiled = payload(rank(compile={"unique_graphs": 3, "graph_breaks": 0, "ran_eager": False}))
    assert gc.check_compile_note(0, eager, note).status == "PASS"
    assert gc.check_compile_note(0, eager, "").status == "FAIL"  # eager, silently
    assert gc.check_compile_note(0, compiled, "").status == "PASS"
    assert gc.check_compile_note(0, compiled, note).status == "FAIL"
    assert gc.check_compile_note(0, payload(rank(compile={"unique_graphs": 0})), note).status == "FAIL"


def test_joined_hang_needs_the_diagnosis_and_the_dumps_before_the_groups_timeout():
    gc = load_script()
    output = (
        "rank 0: the run did not finish within its timeout of 60 s (joined world)\n"
        "Diagnosis: rank 1 never entered all_gather #0 (layers.0, forward); ranks 0, 2, 3 wait in it.\n"
        "NCCL flight recorder dumps (read with torchfrtrace): /tmp/fsdp2-flight-recorder-x/nccl_trace_rank_0\n"
    )
    assert gc.judge_joined_hang(1, output, 70).status == "PASS"
    assert gc.judge_joined_hang(1, output, 125).status == "FAIL"  # at the process group's timeout: the watchdog's
    assert gc.judge_joined_hang(0, output, 70).status == "FAIL"
    assert gc.judge_joined_hang(1, output.replace("NCCL flight recorder dumps", "no dumps"), 70).status == "FAIL"
    assert gc.judge_joined_hang(1, "Watchdog caught collective operation timeout", 70).status == "FAIL"


def _reduce_facts(torch_version="2.11.0+cu130", **wrong):
    seen = {"op": "reduce_scatter", "reduce_op": "PREMUL_SUM", "got": 2.0, "want": 1.0, "sum": 2.0, **wrong}
    return {"wrong": [seen], "nccl": "2.28.9", "torch": torch_version, "trace_entries": 9, "trace_all_reduces": 6}


def test_a_torch_deviation_a_spec_pins_is_known_not_a_failure():
    """What an H200 gave (torch 2.11, one rank): the PREMUL_SUM reduce-scatter returned the plain
    sum. specs/premul_sum_reduce_scatter_one_rank.yaml pins it: KNOWN, the spec named."""
    gc = load_script()
    check = gc.judge_reduce_ops("reduce_ops", 1, _reduce_facts())
    assert check.status == "KNOWN", check.figure
    assert "pinned by specs/premul_sum_reduce_scatter_one_rank.yaml" in check.figure
    assert gc.judge_reduce_ops("reduce_ops", 1, {**_reduce_facts(), "wrong": []}).status == "PASS"


def test_a_wrong_reduction_no_spec_pins_fails():
    gc = load_script()
    assert gc.judge_reduce_ops("reduce_ops", 1, _reduce_facts(got=0.0)).status == "FAIL"  # not the plain sum
    assert gc.judge_reduce_ops("reduce_ops", 1, _reduce_facts(op="all_reduce")).status == "FAIL"
    assert gc.judge_reduce_ops("reduce_ops", 4, _reduce_facts()).status == "FAIL"  # the pin is one rank's
    assert gc.judge_reduce_ops("reduce_ops", 1, _reduce_facts("2.10.0+cu128")).status == "FAIL"  # outside its range


def test_every_spec_the_gpu_check_writes_loads(tmp_path):
    """The GPU machine is lent for minutes: a spec of the script that does not load would waste them."""
    from harness.load.spec import load_spec

    for key, text in load_script().SPECS.items():
        path = tmp_path / f"{key}.yaml"
        path.write_text(text, encoding="utf-8")
        assert load_spec(path).items, key
