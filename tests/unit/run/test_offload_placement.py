"""Where an offloading run puts things on GPU ranks: parameters materialized on the CPU with
their buffers on the compute device, and a ``cuda:nccl,cpu:gloo`` process group.

No GPU here: the meta device stands in for the GPU as the compute device (FSDP2 on a 1-rank
gloo world shards a model built on meta; what lands on "meta" would land on "cuda")."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import model as qwen3
from harness.load.setup import RunSetup
from harness.run.rank.parallelize import (
    apply_fsdp,
    build_mesh,
    init_local_shards,
    init_shards_like_full,
    materialization_devices,
    units_from_setup,
)
from harness.run.rank.process_group import device_backend, group_backend
from tests.support.specs import TINY_DIMS

TINY = dict(TINY_DIMS, vocab_size=100)
STAND_IN = torch.device("meta")  # the GPU's place


def _setup(fsdp: dict) -> RunSetup:
    return RunSetup.from_mapping(
        {
            "model": {"body": "causal_lm", "overrides": dict(TINY, tie_word_embeddings=True), "dtype": "float32"},
            "mesh": {"shape": [1], "dim_names": ["dp"]},
            "init": "meta",
            "fsdp": fsdp,
        }
    )


OFFLOAD = {"offload_policy": {"pin_memory": False}}
LAYER_0_ONLY = {"units": [{"modules": "model.layers.0", **OFFLOAD}, "model.layers.1"]}


def test_an_offloading_nccl_run_gets_a_cpu_backend_too():
    assert group_backend("nccl", offloads=True) == "cuda:nccl,cpu:gloo"
    assert group_backend("nccl", offloads=False) == "nccl"
    assert group_backend("gloo", offloads=True) == "gloo"  # CPU ranks: gloo serves everything already
    assert device_backend("cuda:nccl,cpu:gloo", "cuda") == "nccl"  # what the observation records
    assert device_backend("cuda:nccl,cpu:gloo", "cpu") == "gloo"
    assert device_backend("gloo", "cpu") == "gloo"
    with pytest.raises(ValueError, match="serves no 'cuda' device"):
        device_backend("cpu:gloo", "cuda")


def test_which_setups_offload():
    assert _setup(OFFLOAD).fsdp.offloads
    assert _setup(LAYER_0_ONLY).fsdp.offloads
    assert not _setup({}).fsdp.offloads
    assert not _setup(
        {"units": ["model.layers.0", {"modules": "model.layers.1", "offload_policy": None}]}
    ).fsdp.offloads


def _sharded_on_meta(fsdp: dict, materialize=None) -> torch.nn.Module:
    setup = _setup(fsdp)
    root = qwen3.Qwen3ForCausalLM(qwen3.get_config("walkthrough", **TINY, tie_word_embeddings=True), device="meta")
    apply_fsdp(root, build_mesh(setup, "cpu"), units_from_setup(setup, root), materialize=materialize)
    return root


def test_offloaded_units_are_materialized_on_the_cpu(one_rank):
    root = _sharded_on_meta(LAYER_0_ONLY)
    devices = materialization_devices(root, STAND_IN)
    assert devices["model.layers.0.self_attn.q_proj"].type == "cpu"
    assert devices["model.layers.0.input_layernorm"].type == "cpu"
    assert devices["model.layers.1.self_attn.q_proj"] == STAND_IN
    assert devices["model.embed_tokens"] == devices["lm_head"] == STAND_IN  # the root's unit does not offload
    assert devices["model.rotary_emb"] == STAND_IN  # a buffer only: where compute runs


@pytest.mark.parametrize(
    "materializer",
    [
        lambda root: init_local_shards(root, STAND_IN, std=0.02, seed=0, rank=0),  # numerics: false, reference
        lambda root: init_shards_like_full(root, STAND_IN, seed=0),  # init: meta
    ],
    ids=["init_local_shards", "init_shards_like_full"],
)
def test_materializers_put_offloaded_shards_on_the_cpu_and_buffers_on_the_gpu(one_rank, materializer):
    root = _sharded_on_meta(OFFLOAD, materialize=materializer)
    assert {p.to_local().device.type for p in root.parameters()} == {"cpu"}  # FSDP2's lazy init demands it
    assert {b.device for b in root.buffers()} == {STAND_IN}  # RoPE's inv_freq, used by the forward
    assert root.lm_head.weight is root.model.embed_tokens.weight  # still tied


def test_without_offload_everything_goes_to_the_compute_device(one_rank):
    root = _sharded_on_meta({}, materialize=lambda root: init_local_shards(root, STAND_IN, std=0.02, seed=0, rank=0))
    assert {p.to_local().device for p in root.parameters()} | {b.device for b in root.buffers()} == {STAND_IN}


def test_a_local_nccl_rank_of_an_offloading_setup_gets_a_cpu_backend_too(monkeypatch):
    """The local launcher's rank joins with the same string (no GPU here: torch.cuda as a node of
    8 GPUs shows it, init_process_group recorded, not called)."""
    from harness.run.launch import rank_process

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
    groups: list[tuple] = []
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: groups.append(a))
    for fsdp in (OFFLOAD, {}):
        launch = rank_process.RankLaunch(_setup(fsdp), "nccl", "/nonexistent/store", 10.0, None, None)
        assert rank_process._join_world(0, launch, lambda phase: None) == "cuda"
    assert groups == [("cuda:nccl,cpu:gloo",), ("nccl",)]
