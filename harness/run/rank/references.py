"""The numerics references a real rank compares its sharded step with (``RankPlan.numerics``): ``rank_0``,
``each_rank`` or ``schedule``, made in phase ``replica``, after the model is built and before
``fully_shard``.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from harness.run.rank.body import RankBody
from harness.run.rank.build import (
    attention_kernel,
    build_model,
    make_optimizer,
    reference_from_rank_0,
    replica_reference,
    torch_dtype,
)
from harness.run.rank.expert_parallel import ep_shards, expert_fsdp_groups
from harness.run.rank.parallelize import ShardUnit, freeze_params, set_grad_dtypes
from harness.run.rank.recorders.updates import schedule_reference
from harness.run.rank.tensor_parallel import sequence_cut, tp_shards

__all__ = ["numerics_references", "divisors", "shard_dims"]


def numerics_references(body: RankBody, root: torch.nn.Module, shard_units: list[ShardUnit]) -> tuple[Any, Any]:
    """(the one-step reference or None, the schedule's reference or None), as ``body.plan.numerics`` says."""
    numerics = body.plan.numerics
    if numerics == "off":
        return None, None
    with body.phases.phase("replica"), attention_kernel(body.setup.model.attention_kernel):
        if numerics == "rank_0":
            return _reference_from_rank_0(body, root, shard_units), None
        return _replica_references(body, root, shard_units)


def _replica(body: RankBody, root: torch.nn.Module) -> torch.nn.Module:
    """The model itself under a full init, else a full model of its own; frozen and given its
    gradient dtypes (``setup.grad_dtype``) as the setup says."""
    setup = body.setup
    replica = root if not body.plan.meta_init else build_model(setup, body.config, body.dtype, body.device, init=True)
    if replica is not root:  # the spec's after_build hook already ran on root
        body.hooks.call("after_build", model=replica)
    if setup.freeze.params:
        freeze_params(replica, setup.freeze.params)
    if setup.grad_dtype:
        set_grad_dtypes(replica, setup.grad_dtype)
    return replica


def _replica_references(body: RankBody, root: torch.nn.Module, shard_units: list[ShardUnit]) -> tuple[Any, Any]:
    """``each_rank``: (the one-step reference, None); ``schedule``: (None, the schedule's reference)."""
    setup, world_size = body.setup, body.world_size
    replica = _replica(body, root)
    reference = schedule_ref = None
    if body.plan.numerics == "each_rank":
        reference = replica_reference(
            setup,
            replica,
            body.inputs.tensor,
            body.loss_fn,
            body.dtype,
            world_size,
            body.coords,
            divisors=divisors(shard_units, replica, world_size, tp_size=setup.tp_size),
            shard_dims=shard_dims(shard_units, replica),
            inner_shards={**tp_shards(setup, replica, body.coords[-1]), **ep_shards(setup, replica, body.coords[-1])},
            fsdp_groups=expert_fsdp_groups(setup, replica, body.coords),
            output_cut=sequence_cut(setup, body.coords[-1]),
        )
    else:
        mp = setup.fsdp.mixed_precision
        compute = torch_dtype(mp.param_dtype) if mp is not None and mp.param_dtype else body.dtype
        reduce = torch_dtype(mp.reduce_dtype) if mp is not None and mp.reduce_dtype else compute
        schedule_ref = schedule_reference(
            replica,
            body.steps,
            [b.to(body.device) for b in body.batches],
            loss_fn=body.loss_fn,
            make_optimizer=lambda ps: make_optimizer(setup, ps),
            world_size=world_size,
            rank=body.rank,
            shard_count=setup.shard_count,
            shard_index=setup.shard_index(body.coords),
            compute_dtype=compute,
            reduce_dtype=reduce,
            on_step=functools.partial(_step_hooks, body),
        )
    if replica is root and setup.freeze.after_fully_shard:
        for p in root.parameters():  # frozen again after fully_shard, as the setup says
            p.requires_grad_(True)
    return reference, schedule_ref


def _step_hooks(
    body: RankBody, point: str, model: torch.nn.Module, step_index: int, microbatch: int | None = None
) -> None:
    """The spec's step and microbatch hooks (and, before a step, its schedule ``call``) on the reference's model."""
    body.hooks.call(
        point, model=model, step_index=step_index, **({} if microbatch is None else {"microbatch": microbatch})
    )
    call = next(s.step.call for s in body.steps if s.index == step_index)
    if point == "before_step" and call is not None:
        body.hooks.call_named(call, model=model, step_index=step_index)


def _reference_from_rank_0(body: RankBody, root: torch.nn.Module, shard_units: list[ShardUnit]) -> Any:
    """``rank_0``: rank 0 holds the only replica (``build.reference_from_rank_0``)."""
    from harness.run.rank.checkpoint import shared_folder

    setup = body.setup
    with shared_folder(body.checkpoint_dir) as folder:
        reference = reference_from_rank_0(
            setup,
            body.config,
            body.dtype,
            body.device,
            body.loss_fn,
            body.world_size,
            lambda: _replica(body, root),
            folder,
            divisors=divisors(shard_units, root, body.world_size),
            shard_dims=shard_dims(shard_units, root),
        )
    if not body.plan.meta_init and setup.freeze.after_fully_shard:
        for p in root.parameters():  # rank 0 froze its replica, this model: frozen again after fully_shard
            p.requires_grad_(True)
    return reference


def _owners(units: list[ShardUnit], root: torch.nn.Module) -> dict[str, ShardUnit]:
    """Parameter FQN -> the unit whose module path is its longest prefix (the root otherwise)."""
    paths = {p: u for u in units for p in u.module_paths}
    return {
        fqn: paths[max((p for p in paths if p == "" or fqn == p or fqn.startswith(p + ".")), key=len)]
        for fqn, _ in root.named_parameters()
    }


def divisors(units: list[ShardUnit], root: torch.nn.Module, world_size: int, *, tp_size: int = 1) -> dict[str, float]:
    """Parameter FQN -> what the replica divides the world's summed gradient by to get FSDP's: the
    unit's divide factor (``gradient_divide_factor`` or its alias) if set, else the data-parallel size,
    each times ``tp_size`` (a TP group's ranks ran the same samples, so the world's sum counts each
    data-parallel rank's gradient ``tp_size`` times); the default is therefore the world size."""
    out = {}
    for fqn, unit in _owners(units, root).items():
        factor = unit.after.divide_factor if unit.after is not None else None
        out[fqn] = float(factor) * tp_size if factor is not None else float(world_size)
    return out


def shard_dims(units: list[ShardUnit], root: torch.nn.Module) -> dict[str, int]:
    """Parameter FQN -> the dim its unit's ``shard_placement`` rules shard it on (rules in order,
    as the harness's ``shard_placement_fn`` applies them); parameters no rule names are left out (0)."""
    from harness.load.units import match_params

    out = {}
    for fqn, unit in _owners(units, root).items():
        for pattern, dim in unit.shard_placement:
            if match_params(pattern, [fqn]):
                out[fqn] = dim
                break
    return out
