"""FSDP over TP on a (dp, tp) mesh, rank by rank: the replica's cut of each weight (TP's chunk, then
FSDP's rows of it) is exactly the local tensor torch leaves, and the gradient placements it expects
are torch's. Ranks are the fake process group's (no collective runs at ``parallelize_module`` with
``src_data_rank=None`` or at ``fully_shard``), so the local values are real."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.testing._internal.distributed.fake_pg import FakeStore

import model as qwen3
from harness.load.setup import RunSetup
from harness.run.rank.parallelize import build_mesh
from harness.run.rank.recorders.numerics import _mean_rows, _placement_problem
from harness.run.rank.tensor_parallel import apply_tensor_parallel, fsdp_mesh, tp_shards

TINY = {"num_hidden_layers": 1, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16}  # fmt: skip


def _setup(**tp) -> RunSetup:
    return RunSetup.from_mapping(
        {
            "model": {"config": "walkthrough", "overrides": TINY, "body": "decoder_layers", "dtype": "float32"},
            "mesh": {"shape": [2, 2], "dim_names": ["dp", "tp"]},
            "tensor_parallel": tp,
        }
    )


def test_the_mesh_roles_and_the_data_ranks():
    setup = _setup()
    assert (setup.tp_size, setup.shard_count, setup.shard_mesh_dim, setup.data_parallel_size) == (2, 2, -2, 2)
    assert [setup.data_rank(r) for r in range(4)] == [0, 0, 1, 1]  # a TP group shares its samples


def test_tp_shards_name_the_split_dim_of_each_planned_weight():
    setup = _setup()
    root = qwen3.Qwen3DecoderStack(qwen3.get_config("walkthrough", **TINY), device="cpu")
    shards = tp_shards(setup, root, tp_index=1)
    assert shards["layers.0.self_attn.q_proj.weight"] == (0, 2, 1)
    assert shards["layers.0.mlp.down_proj.weight"] == (1, 2, 1)
    assert "layers.0.self_attn.q_norm.weight" not in shards  # head_norm: replicated on tp
    assert "layers.0.input_layernorm.weight" not in shards


@pytest.mark.parametrize("rank", range(4))
def test_the_replicas_cut_is_torchs_local_tensor_on_every_rank(rank):
    setup = _setup()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=4)
    try:
        mesh = build_mesh(setup, "cpu")
        root = qwen3.Qwen3DecoderStack(qwen3.get_config("walkthrough", **TINY), device="cpu")
        qwen3.init_weights(root, generator=torch.Generator().manual_seed(0))
        full = {fqn: p.detach().clone() for fqn, p in root.named_parameters()}
        coords = mesh.get_coordinate()
        shards = tp_shards(setup, root, coords[-1])
        apply_tensor_parallel(root, mesh, setup)
        for layer in root.layers:
            fully_shard(layer, mesh=fsdp_mesh(setup, mesh))
        fully_shard(root, mesh=fsdp_mesh(setup, mesh))
        for fqn, p in root.named_parameters():
            cut = _mean_rows(fqn, full[fqn], 2, coords[0], 1, None, None, shards)
            assert torch.equal(p.to_local(), cut), fqn
            assert _placement_problem(p, 0, shards.get(fqn)) is None, (fqn, p.placements)
    finally:
        dist.destroy_process_group()


def test_a_gradient_placed_otherwise_is_named():
    from torch.distributed.tensor import Replicate, Shard

    class Placed:  # what _placement_problem reads of a DTensor
        def __init__(self, *placements):
            self.placements = placements

    assert _placement_problem(Placed(Shard(0), Shard(1)), 0, (1, 2, 0)) is None
    assert "then the TP or EP Shard(dim=0)" in _placement_problem(Placed(Shard(0), Shard(1)), 0, (0, 2, 0))
    assert _placement_problem(Placed(Shard(0), Replicate()), 0, None) is None  # a TP-replicated norm
    assert "expected Shard(dim=0)" in _placement_problem(Placed(Replicate(), Replicate()), 0, None)
