"""Tensor parallelism inside each decoder layer, before FSDP (``setup.tensor_parallel``).

:func:`apply_tensor_parallel` runs ``parallelize_module`` on every decoder layer over the mesh's TP
dim, then FSDP shards the TP-local tensors over the dp dim (:func:`fsdp_mesh`): torchtitan's order
for Qwen3 (``torchtitan/models/qwen3/infra/parallelize.py``). :func:`tp_shards` says which slice of
each full weight a rank's TP shard is, so the numerics replica can cut the same slice.
"""

from __future__ import annotations

from typing import Any, Callable

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

from harness.calculator import TP_STYLE_DIM

__all__ = ["apply_tensor_parallel", "fsdp_mesh", "sequence_cut", "sequence_parallel_loss", "tp_shards"]

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
    for i, layer in enumerate(root.get_submodule(setup.layer_prefix)):
        plan = {path: _STYLES[style]() for path, style in tp.plan}
        if tp.sequence_parallel:
            plan.update(_sequence_parallel(tp.plan))
            if i == 0:  # the stack's input is every sequence position: layer 0 keeps its rank's 1/tp
                cut = PrepareModuleInput(
                    input_layouts=(Replicate(), None), desired_input_layouts=(Shard(1), None), use_local_output=True
                )
                parallelize_module(layer, tp_mesh, cut)
        parallelize_module(layer, tp_mesh, plan, src_data_rank=None)


def _sequence_parallel(plan: Any) -> dict[str, Any]:
    """torchtitan's sequence-parallel additions to a layer plan: the norms on the sequence shard,
    self_attn and mlp all-gathering it, the rowwise projections reduce-scattering back to it."""
    styles: dict[str, Any] = {
        "input_layernorm": SequenceParallel(use_local_output=True),
        "post_attention_layernorm": SequenceParallel(use_local_output=True),
        "self_attn": PrepareModuleInput(input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)),
        "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
    }
    styles.update({path: RowwiseParallel(output_layouts=Shard(1)) for path, style in plan if style == "rowwise"})
    return styles


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


def sequence_cut(setup: Any, tp_index: int) -> tuple[int, int, int] | None:
    """(dim 1, TP size, this rank's TP index): the chunk of the sequence a rank's output holds
    under ``sequence_parallel``; None otherwise."""
    tp = setup.tensor_parallel
    return (1, setup.tp_size, tp_index) if tp is not None and tp.sequence_parallel else None


def sequence_parallel_loss(loss_fn: Callable[..., Any], setup: Any) -> Callable[..., Any]:
    """Under ``sequence_parallel`` a rank's loss of its 1/tp of the sequence, divided by tp: the
    TP group's losses sum to the whole sequence's (a mean), so DTensor's backward sums to its
    gradient; ``loss_fn`` unchanged otherwise."""
    if sequence_cut(setup, 0) is None:
        return loss_fn
    size = setup.tp_size
    return lambda output, inputs: loss_fn(output, inputs) / size
