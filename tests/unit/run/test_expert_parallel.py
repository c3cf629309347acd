"""Experts on their own mesh beside FSDP, rank by rank: the replica's cut of every parameter (EP's
experts, then FSDP's rows of them over efsdp; the rest FSDP's rows over the world) is exactly the
local tensor torch leaves, with the placements the numerics comparison expects. Ranks are the
fake process group's (no collective runs while sharding), so local values are real."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.testing._internal.distributed.fake_pg import FakeStore

import model as qwen3
from harness.load.setup import RunSetup
from harness.run.rank.expert_parallel import (
    apply_expert_parallel,
    ep_shards,
    expert_fsdp_groups,
    unit_meshes,
    world_mesh,
)
from harness.run.rank.parallelize import build_mesh, units_from_setup
from harness.run.rank.recorders.numerics import _mean_rows, _placement_problem

SETUP = RunSetup.from_mapping(
    {
        "model": {"config": "moe-tiny", "body": "decoder_layers", "dtype": "float32"},
        "mesh": {"shape": [2, 2], "dim_names": ["efsdp", "ep"]},
        "expert_parallel": {},
        "fsdp": {"units": ["layers.*.mlp.experts", "layers.*"]},
    }
)


def test_the_non_expert_units_shard_over_the_world():
    assert (SETUP.shard_count, SETUP.shard_index([1, 0]), SETUP.data_rank(3)) == (4, 2, 3)
    assert SETUP.observed_mesh_dims == ("efsdp", "ep", "dp")


@pytest.mark.parametrize("rank", range(4))
def test_the_replicas_cut_is_torchs_local_tensor_on_every_rank(rank):
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=4)
    try:
        mesh, world = build_mesh(SETUP, "cpu"), world_mesh(SETUP, "cpu")
        root = qwen3.Qwen3MoeDecoderStack(qwen3.get_config("moe-tiny"), device="cpu")
        qwen3.init_weights(root, generator=torch.Generator().manual_seed(0))
        full = {fqn: p.detach().clone() for fqn, p in root.named_parameters()}
        coords = mesh.get_coordinate()
        inner, groups = ep_shards(SETUP, root, coords[-1]), expert_fsdp_groups(SETUP, root, coords)
        assert sorted(inner) == sorted(
            f"layers.{i}.mlp.experts.{p}" for i in (0, 1) for p in ("gate_up_proj", "down_proj")
        )
        apply_expert_parallel(root, mesh, SETUP)
        mesh_of = unit_meshes(SETUP, mesh, world)
        for unit in units_from_setup(SETUP, root):
            fully_shard([root.get_submodule(p) for p in unit.module_paths], mesh=mesh_of(unit))
        for fqn, p in root.named_parameters():
            cut = _mean_rows(fqn, full[fqn], 4, rank, 1, None, None, inner, groups)
            assert torch.equal(p.to_local(), cut), fqn
            assert _placement_problem(p, 0, inner.get(fqn)) is None, (fqn, p.placements)
    finally:
        dist.destroy_process_group()
