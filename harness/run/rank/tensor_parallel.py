"""Tensor parallelism inside each decoder layer, before FSDP (``setup.tensor_parallel``).

:func:`apply_tensor_parallel` runs ``parallelize_module`` on every decoder layer over the mesh's TP
dim, then FSDP shards the TP-local tensors over the dp dim (:func:`fsdp_mesh`): torchtitan's order
for Qwen3 (``torchtitan/models/qwen3/infra/parallelize.py``). :func:`tp_shards` says which slice of
each full weight a rank's TP shard is, so the numerics replica can cut the same slice.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel, parallelize_module

from harness.calculator import TP_STYLE_DIM

__all__ = ["apply_tensor_parallel", "fsdp_mesh", "tp_shards"]

_STYLES = {
    "colwise": ColwiseParallel,
    "rowwise": RowwiseParallel,
    # q_norm's input is q viewed as [B, L, local heads, head_dim]: sharded on dim 2; the layer goes on
    # with a plain tensor, as after the colwise projections
    "head_norm": lambda: SequenceParallel(sequence_dim=2, use_local_output=True),
}


def fsdp_mesh(setup: Any, mesh: DeviceMesh) -> DeviceMesh:
    """The mesh ``fully_shard`` gets: the dp dim alone under ``tensor_parallel``, else the whole mesh."""
    if setup.tensor_parallel is None:
        return mesh
    return mesh[setup.mesh_dim_names[setup.shard_mesh_dim]]


def apply_tensor_parallel(root: nn.Module, mesh: DeviceMesh, setup: Any) -> None:
    """``parallelize_module(layer, mesh[tp], plan)`` on every decoder layer of ``root`` (a no-op
    without ``setup.tensor_parallel``). ``src_data_rank=None``: every rank built the same full
    weights from the seed (or none, on meta), so each keeps its own slice and TP scatters nothing."""
    tp = setup.tensor_parallel
    if tp is None:
        return
    tp_mesh = mesh[tp.mesh_dim]
    for layer in root.get_submodule(setup.layer_prefix):
        plan = {path: _STYLES[style]() for path, style in tp.plan}
        parallelize_module(layer, tp_mesh, plan, src_data_rank=None)


def tp_shards(setup: Any, root: nn.Module, tp_index: int) -> dict[str, tuple[int, int, int]]:
    """Parameter FQN -> (dim, TP size, this rank's TP index): the ``torch.chunk`` of the full
    parameter this rank's TP shard holds, before FSDP shards it; parameters TP leaves whole
    (norms) are left out. ``root``: the model before ``parallelize_module``."""
    tp = setup.tensor_parallel
    if tp is None:
        return {}
    out: dict[str, tuple[int, int, int]] = {}
    for i in range(len(root.get_submodule(setup.layer_prefix))):
        for path, style in tp.plan:
            if style not in TP_STYLE_DIM:  # head_norm: a replicated weight
                continue
            # Qwen3's projections have no bias (model.config refuses attention_bias)
            out[f"{setup.layer_prefix}.{i}.{path}.weight"] = (TP_STYLE_DIM[style], setup.tp_size, tp_index)
    return out
