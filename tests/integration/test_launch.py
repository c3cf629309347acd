"""The instrument on real ranks: the walkthrough on 4 gloo ranks, and how runs fail.

Each test launches 4 rank processes from the harness's forkserver (about a second each once
the forkserver is up, a few seconds for the first). A failed run must name the failing rank,
end quickly (or at the caller's timeout for a hang), and leave no rank process behind.
"""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from harness.load.setup import RunSetup
from harness.run.launch.errors import RunError, RunTimeout
from harness.run.launch.local import run_local
from harness.run.runner import run_setup
from tests.support.faults import Fault, injected
from tests.support.observations import without_value_fields
from tests.support.ranks import hang_timeout_s

pytestmark = pytest.mark.slow

# The document's shard table ("每个 rank 上的参数分片"): full shape -> shard on each of 4 ranks.
DOC_SHARDS = {
    "input_layernorm.weight": ([512], [128]),
    "self_attn.q_proj.weight": ([512, 512], [128, 512]),
    "self_attn.k_proj.weight": ([256, 512], [64, 512]),
    "self_attn.v_proj.weight": ([256, 512], [64, 512]),
    "self_attn.q_norm.weight": ([64], [16]),
    "self_attn.k_norm.weight": ([64], [16]),
    "self_attn.o_proj.weight": ([512, 512], [128, 512]),
    "post_attention_layernorm.weight": ([512], [128]),
    "mlp.gate_proj.weight": ([1024, 512], [256, 512]),
    "mlp.up_proj.weight": ([1024, 512], [256, 512]),
    "mlp.down_proj.weight": ([512, 1024], [128, 1024]),
}
LAYER_NUMEL = 2_360_448  # the document's layer total, ≈ 2.36M
SHARD_NUMEL = 590_112  # the document's per-GPU total, ≈ 590K


@pytest.fixture(scope="module")
def walkthrough():
    return run_setup(RunSetup(), backend="gloo", timeout_s=120)


def test_walkthrough_shards_are_the_documents_table(walkthrough):
    assert walkthrough["environment"]["observed_ranks"] == [0, 1, 2, 3]
    for rank in walkthrough["ranks"]:
        assert rank["input"]["samples"] == [2 * rank["rank"], 2 * rank["rank"] + 1]
        assert rank["input"]["shape"] == [2, 8, 512]
        for p in rank["params"]:
            layer, name = p["fqn"].split(".", 2)[1:]
            assert (p["full_shape"], p["local_shape"]) == DOC_SHARDS[name], p["fqn"]
            assert (p["dtype"], p["is_dtensor"], p["placements"], p["mesh_dim_names"]) == (
                "float16",
                True,
                ["Shard(dim=0)"],
                ["dp"],
            )
        assert sum(p["local_numel"] for p in rank["params"]) == 2 * SHARD_NUMEL


def test_walkthrough_collectives_per_layer_and_phase(walkthrough):
    for rank in walkthrough["ranks"]:
        by_phase = {}
        for c in rank["collectives"]:
            by_phase.setdefault(c["phase"], []).append(
                (c["op"], c["unit"], c["dtype"], c["numel_in"], c["numel_out"], c["group_size"], c["mesh_dim"])
            )
        ag = lambda unit: ("all_gather", unit, "float16", SHARD_NUMEL, LAYER_NUMEL, 4, "dp")  # noqa: E731
        rs = lambda unit: ("reduce_scatter", unit, "float16", LAYER_NUMEL, SHARD_NUMEL, 4, "dp")  # noqa: E731
        assert by_phase.pop("forward") == [ag("layers.0"), ag("layers.1")]
        backward = by_phase.pop("backward")
        for unit in ("layers.0", "layers.1"):
            assert backward.count(ag(unit)) == 1 and backward.count(rs(unit)) == 1
        assert by_phase == {}, "no collective in setup or in the optimizer step"
        assert {c["buffer_bytes"] for c in rank["collectives"]} == {4_720_896}
        # backward prefetch: layer 0's all-gather is issued from layer 1's pre-backward hook
        prefetch = [c for c in rank["collectives"] if c["hook"] == "backward_prefetch"]
        assert [(c["unit"], c["fsdp_labels"][0]) for c in prefetch] == [("layers.0", "FSDP::pre_backward (layers.1)")]


def test_walkthrough_step0_and_step11_states(walkthrough):
    for rank in walkthrough["ranks"]:
        states = {(s["unit"], s["point"]): s for s in rank["param_states"]}
        for unit in ("layers.0", "layers.1"):
            gathered, resharded = states[(unit, "pre_forward")], states[(unit, "post_forward")]
            assert gathered["bytes"] == 4_720_896 and not any(p["is_dtensor"] for p in gathered["params"])
            assert resharded["bytes"] == 1_180_224 and all(p["is_dtensor"] for p in resharded["params"])
        memory = {(m["module"], m["state"]): m["bytes"] for m in rank["memory"]}
        assert memory[("layers.0", "After Pre-Forward")]["unsharded_param"] == 4_720_896
        assert memory[("layers.0", "After Post-Forward")]["unsharded_param"] == 0
        assert memory[("", "After Optimizer Step")]["sharded_param"] == 2 * 1_180_224


def test_walkthrough_numerics_against_the_replica(walkthrough):
    for rank in walkthrough["ranks"]:
        n = rank["numerics"]
        assert n["replica_dtype"] == "float16"
        assert n["forward_output"]["max_abs_diff"] == 0.0  # same kernels, same chunk, on CPU
        assert len(n["grads"]) == 22
        for g in n["grads"]:
            assert g["max_abs_diff"] <= 1e-2 * g["max_abs_ref"] + 1e-6, g


def test_fake_backend_agrees_with_gloo(walkthrough):
    fake = run_setup(RunSetup(), backend="fake")
    real, simulated = walkthrough["ranks"][0], fake["ranks"][0]
    assert fake["fsdp_units"] == walkthrough["fsdp_units"]
    assert without_value_fields(simulated["params"]) == without_value_fields(real["params"])
    for key in ("input", "param_states", "steps", "collectives"):
        assert simulated[key] == real[key], key


# --- failures -------------------------------------------------------------------------------------


def _rank_processes() -> list[int]:
    """PIDs of the forkserver's live children (the harness's rank processes), via /proc."""
    from multiprocessing import forkserver

    server = forkserver._forkserver._forkserver_pid
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, ppid = fields[0], int(fields[1])
        if ppid == server and state != "Z":
            pids.append(int(entry))
    return pids


def _assert_no_rank_left() -> None:
    deadline = time.monotonic() + 5
    while _rank_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _rank_processes() == []
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("fsdp2-rank-")]


def test_a_rank_that_raises_ends_the_run_naming_it():
    start = time.monotonic()
    with pytest.raises(RunError) as info:
        with injected(Fault(rank=2, phase="forward", kind="raise")):
            run_local(RunSetup(numerics=False), backend="gloo", timeout_s=120)
    assert time.monotonic() - start < 30
    assert info.value.rank == 2
    assert str(info.value).splitlines()[0] == (
        "rank 2 failed: RuntimeError: injected fault: rank 2 raises at the start "
        "of forward in phase forward of step 0, microbatch 0"
    )  # one line first
    assert "Traceback" in info.value.traceback
    assert "RuntimeError: injected fault: rank 2 raises at the start of forward" in str(info.value)
    _assert_no_rank_left()


def test_a_rank_that_dies_ends_the_run_naming_it():
    with pytest.raises(RunError, match=r"rank 3 died without a result \(exit code 3\)"):
        with injected(Fault(rank=3, phase="backward", kind="exit")):
            run_local(RunSetup(numerics=False), backend="gloo", timeout_s=120)
    _assert_no_rank_left()


def test_a_hang_ends_at_the_callers_timeout():
    # time enough for rank 1 to reach backward on this machine, loaded or not; not torch's import
    timeout_s = hang_timeout_s(RunSetup(numerics=False), run_local)
    start = time.monotonic()
    with pytest.raises(RunTimeout) as info:
        with injected(Fault(rank=1, phase="backward", kind="hang")):
            run_local(RunSetup(numerics=False), backend="gloo", timeout_s=timeout_s)
    elapsed = time.monotonic() - start
    assert timeout_s <= elapsed < timeout_s + 10
    assert info.value.pending == [0, 1, 2, 3]  # rank 1 is stuck, its peers wait in a collective
    assert info.value.phases[1] == "backward"
    assert f"run timed out after {timeout_s:g} s" in str(info.value) and "rank 1 in backward" in str(info.value)
    _assert_no_rank_left()
