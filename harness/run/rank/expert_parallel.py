"""Expert parallelism beside FSDP (``setup.expert_parallel``): each sparse layer's experts on a mesh
dim of their own, tokens routed to them by all-to-all, as torchtitan composes EP with FSDP.

:func:`apply_expert_parallel` cuts every ``mlp.experts`` module's fused parameters ``Shard(0)``
over the ``ep`` dim (each rank owns E / ep experts) and gives it :func:`_ep_forward`: the token
slots sorted by expert go to the experts' owners (``all_to_all_single``), come back computed, and
are weighted and summed as the one-process forward does. The experts' own FSDP unit shards over
the mesh's other dim (``efsdp``), every other unit over the whole world (:func:`unit_meshes`).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
import torch.distributed._functional_collectives as funcol
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

import model as qwen3
from model.names import EXPERTS_MODULE

__all__ = ["apply_expert_parallel", "ep_shards", "expert_fsdp_groups", "unit_meshes", "world_mesh"]


def world_mesh(setup: Any, device_type: str) -> DeviceMesh | None:
    """Under ``expert_parallel`` the 1-D mesh ``dp`` of the whole world the non-expert units shard
    over (its own process group, as torchtitan's flattened dp), else None."""
    if setup.expert_parallel is None:
        return None
    return init_device_mesh(device_type, (setup.world_size,), mesh_dim_names=("dp",))


def unit_meshes(setup: Any, mesh: DeviceMesh, world: DeviceMesh | None) -> Callable[[Any], DeviceMesh] | None:
    """Unit -> the mesh its ``fully_shard`` gets: a unit of experts modules the ``efsdp`` dim (the
    one before ``ep``), any other the world's ``dp`` mesh; None without EP (one mesh for all)."""
    if setup.expert_parallel is None or world is None:
        return None
    efsdp = mesh[setup.mesh_dim_names[0]]
    return lambda unit: efsdp if all(p.endswith(EXPERTS_MODULE) for p in unit.module_paths) else world


def apply_expert_parallel(root: nn.Module, mesh: DeviceMesh, setup: Any) -> None:
    """Each ``Qwen3MoeExperts`` of ``root``: its fused parameters ``Shard(0)`` over ``mesh[ep]``
    (``src_data_rank=None``: every rank built the same weights, so each keeps its own experts)
    and :func:`_ep_forward` as its forward. A no-op without ``setup.expert_parallel``."""
    ep = setup.expert_parallel
    if ep is None:
        return
    ep_mesh = mesh[ep.mesh_dim]
    for module in root.modules():
        if isinstance(module, qwen3.Qwen3MoeExperts):
            for name, param in list(module.named_parameters(recurse=False)):
                sharded = distribute_tensor(param.data, ep_mesh, [Shard(0)], src_data_rank=None)
                module.register_parameter(name, nn.Parameter(sharded, requires_grad=param.requires_grad))
            module.forward = functools.partial(_ep_forward, module, ep_mesh)


def _ep_forward(
    module: nn.Module,
    ep_mesh: DeviceMesh,
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    weights: torch.Tensor,
) -> torch.Tensor:
    """``Qwen3MoeExperts.forward`` with the experts spread over ``ep_mesh``: x (T, d), top-k
    expert ids (T, k), their weights (T, k) -> (T, d). Two all-to-alls carry the token slots
    there and back (and one the per-expert counts first): what torchtitan's ExpertParallel does.
    A simulated rank (fake tensors: no routing to read) splits its slots evenly and runs every
    local expert on every row: the same collectives, of sizes no real rank's."""
    T, d = hidden_states.shape
    k, E, ep = top_k_index.shape[-1], module.num_experts, ep_mesh.size()
    local = E // ep
    group = ep_mesh.get_group()
    flat = top_k_index.reshape(-1)  # (T*k,) expert of each slot
    order = torch.argsort(flat, stable=True)  # slots grouped by expert, so by owner rank
    counts = nn.functional.one_hot(flat, E).sum(dim=0)  # (E,) slots per expert
    # how many slots each rank sends this one, per local expert: [ep, local]
    received = _waited(funcol.all_to_all_single(counts, None, None, group)).view(ep, local)
    simulated = qwen3.has_no_data(hidden_states)
    if simulated:
        send = recv = [len(chunk) for chunk in torch.arange(T * k).chunk(ep)]
    else:
        send, recv = counts.view(ep, local).sum(dim=1).tolist(), received.sum(dim=1).tolist()
    tokens = funcol.all_to_all_single_autograd(hidden_states[order // k], recv, send, group)  # (sum recv, d)
    tokens = _waited(tokens)
    gate_up, down = (
        module.gate_up_proj.to_local(),
        module.down_proj.to_local(),
    )  # (local, 2*d_moe, d), (local, d, d_moe)

    def expert(e: int, x: torch.Tensor) -> torch.Tensor:
        return qwen3.swiglu_expert(x, gate_up[e], down[e], module.act_fn)

    if simulated:
        computed = sum(expert(e, tokens) for e in range(local))
    else:
        # the received rows: per source rank, per local expert, in that order
        expert_of_row = torch.arange(local, device=received.device).repeat(ep).repeat_interleave(received.reshape(-1))
        computed = tokens.new_zeros(tokens.shape)
        for e in range(local):
            rows = (expert_of_row == e).nonzero().flatten()
            computed = computed.index_copy(0, rows, expert(e, tokens[rows]))
    back = funcol.all_to_all_single_autograd(computed, send, recv, group)  # (T*k, d), in `order`
    back = _waited(back)
    slots = back.new_zeros(back.shape).index_copy(0, order, back).view(T, k, d)  # slot (t, j): expert idx[t, j]
    if module._step_observer is not None:
        module._step_observer(module.layer_idx, "step9.expert_outputs", slots)
    return (slots * weights[..., None]).sum(dim=1).to(hidden_states.dtype)


def _waited(t: torch.Tensor) -> torch.Tensor:
    """A functional collective's result, waited on (under the fake backend it is a plain fake tensor)."""
    return funcol.wait_tensor(t) if isinstance(t, funcol.AsyncCollectiveTensor) else t


def ep_shards(setup: Any, root: nn.Module, ep_index: int) -> dict[str, tuple[int, int, int]]:
    """Parameter FQN -> (0, ep size, this rank's ep index): the experts of each fused expert
    parameter this rank owns, before FSDP shards them over ``efsdp``. ``root``: the model before
    :func:`apply_expert_parallel`."""
    if setup.expert_parallel is None:
        return {}
    size = setup.mesh_shape[-1]
    return {
        f"{fqn}.{name}": (0, size, ep_index)
        for fqn, module in root.named_modules()
        if isinstance(module, qwen3.Qwen3MoeExperts)
        for name, _ in module.named_parameters(recurse=False)
    }


def expert_fsdp_groups(setup: Any, root: nn.Module, coords: list[int]) -> dict[str, tuple[int, int]]:
    """Fused expert parameter FQN -> (efsdp size, this rank's efsdp index): its FSDP group."""
    return {fqn: (setup.mesh_shape[0], coords[0]) for fqn in ep_shards(setup, root, coords[-1])}
