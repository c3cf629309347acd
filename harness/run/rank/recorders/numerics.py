"""The FSDP step against a plain replica: same full weights, same inputs, no FSDP.

The replica is the rank's full model before ``fully_shard`` (cast only for a
``MixedPrecisionPolicy``): one extra forward and backward on this rank's chunk, its gradients
averaged by a plain float32 all-reduce that shares nothing with FSDP's reduce-scatter path, cut to
the rank's ``Shard(0)`` rows. What differs on purpose: FSDP sums in the reduce dtype; the forward
runs the same kernels, so outputs agree bit for bit on CPU.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from .collectives import dtype_name
from .tensor_diff import max_abs_diff

__all__ = ["Reference", "compute_reference", "compute_references_on_one_rank", "compare"]

_BUCKET_NUMEL = 64 * 2**20  # float32 elements per all-reduce of the reference (256 MiB)


@dataclass
class Reference:
    """What the replica computed that this rank's FSDP step is compared with."""

    replica_dtype: torch.dtype
    output: torch.Tensor
    loss: torch.Tensor
    grad_rows: dict[str, torch.Tensor]
    shard_count: int
    shard_index: int
    shard_dims: dict[str, int] | None = None
    inner_shards: dict[str, tuple[int, int, int]] | None = None
    fsdp_groups: dict[str, tuple[int, int]] | None = None


def _rows(t: torch.Tensor, count: int, index: int, dim: int = 0) -> torch.Tensor:
    """Shard ``index`` of ``count`` along ``dim`` (0: rows), ``torch.chunk`` semantics (FSDP2's)."""
    chunks = torch.chunk(t, count, dim=dim)
    return chunks[index] if index < len(chunks) else t.narrow(dim, 0, 0)


def _replica(model: nn.Module, replica_dtype: torch.dtype) -> nn.Module:
    """``model`` itself if it is in ``replica_dtype``, else a cast copy."""
    return model if replica_dtype == next(model.parameters()).dtype else copy.deepcopy(model).to(replica_dtype)


def _mean_rows(
    fqn: str,
    full: torch.Tensor,
    shard_count: int,
    shard_index: int,
    world_size: int,
    divisors: dict[str, float] | None,
    shard_dims: dict[str, int] | None,
    inner_shards: dict[str, tuple[int, int, int]] | None = None,
    fsdp_groups: dict[str, tuple[int, int]] | None = None,
) -> torch.Tensor:
    """This rank's shard of a summed gradient, divided by its divisor (a copy): its TP or EP chunk
    (``inner_shards``: (dim, count, index)) if any, then FSDP's rows of that (shard ``shard_index``
    of ``shard_count``, or the parameter's own ``fsdp_groups`` (count, index), along its shard dim),
    as FSDP shards the TP- or EP-local tensor."""
    inner = (inner_shards or {}).get(fqn)
    if inner is not None:
        full = _rows(full, inner[1], inner[2], inner[0])
    count, index = (fsdp_groups or {}).get(fqn, (shard_count, shard_index))
    dim = (shard_dims or {}).get(fqn, 0)
    return _rows(full, count, index, dim).div((divisors or {}).get(fqn, world_size))


def compute_reference(
    model: nn.Module,
    inputs: torch.Tensor,
    *,
    world_size: int,
    shard_count: int,
    shard_index: int,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    replica_dtype: torch.dtype,
    all_reduce_sum: Callable[[torch.Tensor], None],
    divisors: dict[str, float] | None = None,
    shard_dims: dict[str, int] | None = None,
    inner_shards: dict[str, tuple[int, int, int]] | None = None,
    fsdp_groups: dict[str, tuple[int, int]] | None = None,
    output_cut: tuple[int, int, int] | None = None,
) -> Reference:
    """Run the replica on this rank's inputs and average the gradients over ranks.

    ``model``: the full, unsharded model, left with ``grad=None``; ``loss_fn(output, inputs)`` ->
    scalar; ``all_reduce_sum``: in-place float32 sum over ranks (same call sequence on each);
    ``divisors``: FQN -> what the sum is divided by (default ``world_size``: with TP every rank of
    a TP group ran the same samples, so the world's sum over ``world_size`` is the dp mean);
    ``inner_shards``: FQN -> this rank's TP or EP chunk, ``fsdp_groups``: FQN -> its FSDP group's
    (size, this rank's index) where not ``shard_count``'s (:func:`_mean_rows`). Frozen parameters get no rows.
    ``output_cut`` (dim, count, index), sequence parallelism: the rank outputs that chunk of the
    replica's output and ``loss_fn`` of it is its share of the loss, so the replica's backward runs
    ``count * loss_fn(output)`` (the whole loss) and its output and loss are compared as that chunk's.
    """
    replica = _replica(model, replica_dtype)
    if replica is not model and inputs.is_floating_point():
        inputs = inputs.to(replica_dtype)
    for p in replica.parameters():
        p.grad = None
    out = replica(inputs)
    loss = loss_fn(out, inputs)
    if output_cut is not None:
        dim, count, index = output_cut
        (loss * count).backward()
        out = _rows(out, count, index, dim)
        loss = loss_fn(out, inputs)
    else:
        loss.backward()
    grad_rows: dict[str, torch.Tensor] = {}
    named = [(fqn, p) for fqn, p in replica.named_parameters() if p.grad is not None]
    # Sum over ranks in float32, in buckets of about _BUCKET_NUMEL elements (one all-reduce
    # per bucket: few round trips, bounded memory).
    start = 0
    while start < len(named):
        stop, numel = start, 0
        while stop < len(named) and (stop == start or numel + named[stop][1].numel() <= _BUCKET_NUMEL):
            numel += named[stop][1].numel()
            stop += 1
        bucket = torch.cat([p.grad.reshape(-1).float() for _, p in named[start:stop]])
        all_reduce_sum(bucket)
        offset = 0
        for fqn, p in named[start:stop]:
            full = bucket[offset : offset + p.numel()].view(p.shape)
            grad_rows[fqn] = _mean_rows(
                fqn, full, shard_count, shard_index, world_size, divisors, shard_dims, inner_shards, fsdp_groups
            )
            offset += p.numel()
            p.grad = None
        del bucket
        start = stop
    del replica
    return Reference(
        replica_dtype=replica_dtype,
        output=out.detach(),
        loss=loss.detach(),
        grad_rows=grad_rows,
        shard_count=shard_count,
        shard_index=shard_index,
        shard_dims=dict(shard_dims or {}),
        inner_shards=dict(inner_shards or {}),
        fsdp_groups=dict(fsdp_groups or {}),
    )


def nonfinite(t: torch.Tensor) -> int:
    """Elements of ``t`` that are NaN or infinite: a ``numerics`` comparison's ``nonfinite``."""
    return int((~torch.isfinite(t.detach())).sum()) if t.is_floating_point() else 0


def compute_references_on_one_rank(
    model: nn.Module,
    inputs_of: Callable[[int], torch.Tensor],
    *,
    world_size: int,
    shard_count: int,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    replica_dtype: torch.dtype,
    divisors: dict[str, float] | None = None,
    shard_dims: dict[str, int] | None = None,
) -> Iterator[tuple[int, Reference]]:
    """Every rank's :class:`Reference`, computed in this process (``numerics_reference: rank_0``).

    As :func:`compute_reference`, with ``inputs_of``: rank -> its chunk; rank r's shard coordinate
    is ``r % shard_count`` (``init_device_mesh``'s row-major layout). Yields ``(rank, reference)``
    in rank order, once every chunk ran.
    """
    replica = _replica(model, replica_dtype)
    for p in replica.parameters():
        p.grad = None
    sums: dict[str, torch.Tensor] = {}
    outputs: list[tuple[torch.Tensor, torch.Tensor]] = []
    for r in range(world_size):
        inputs = inputs_of(r)
        if replica is not model and inputs.is_floating_point():
            inputs = inputs.to(replica_dtype)
        out = replica(inputs)
        loss = loss_fn(out, inputs)
        loss.backward()
        outputs.append((out.detach(), loss.detach()))
        for fqn, p in replica.named_parameters():
            # float32 gradients: autograd adds each chunk's into .grad, which is the sum
            if p.grad is not None and p.grad.dtype != torch.float32:
                grad = p.grad.float()  # a copy
                sums[fqn] = sums[fqn] + grad if fqn in sums else grad
                p.grad = None
    for fqn, p in replica.named_parameters():
        if p.grad is not None:
            sums[fqn] = p.grad
            p.grad = None  # the model is left with grad=None (it may be the one FSDP shards next)
    del replica
    for r in range(world_size):
        grad_rows = {
            fqn: _mean_rows(fqn, full, shard_count, r % shard_count, world_size, divisors, shard_dims)
            for fqn, full in sums.items()
        }
        yield (
            r,
            Reference(
                replica_dtype=replica_dtype,
                output=outputs[r][0],
                loss=outputs[r][1],
                grad_rows=grad_rows,
                shard_count=shard_count,
                shard_index=r % shard_count,
                shard_dims=dict(shard_dims or {}),
            ),
        )


def _placement_problem(grad: DTensor, shard_dim: int, tp: tuple[int, int, int] | None) -> str | None:
    """Why a gradient's placements are not the shard the replica's rows were cut for, or None:
    one ``Shard(shard_dim)``, ``Replicate()`` on any other dim (HSDP's replicas, a TP-replicated
    norm); a TP shard: FSDP's on the dp dim (``_StridedShard`` where it shares TP's dim), then TP's
    ``Shard(dim)``."""
    placements = [repr(pl) for pl in grad.placements]
    want = f"Shard(dim={shard_dim})"
    if tp is None:
        if placements.count(want) != 1 or any(pl not in (want, "Replicate()") for pl in placements):
            return f"gradient placements {placements}, expected {want} on the shard dim"
        return None
    fsdp_ok = placements[0] == want or placements[0].startswith(f"_StridedShard(dim={shard_dim},")
    if len(placements) != 2 or not fsdp_ok or placements[1] != f"Shard(dim={tp[0]})":
        return f"gradient placements {placements}, expected FSDP's {want}, then the TP or EP Shard(dim={tp[0]})"
    return None


def compare(
    reference: Reference,
    model: nn.Module,
    output: torch.Tensor,
    loss: torch.Tensor,
    params: list[tuple[str, torch.Tensor]] | None = None,
) -> dict[str, Any]:
    """The schema's ``numerics`` object for this rank, after backward, before the optimizer;
    ValueError where a gradient is not a ``Shard(0)`` DTensor on the shard dim or not the replica's
    rows' shape."""
    # a full-SPMD run's (fsdp.dp_mesh_dims) output and loss are Replicate() DTensors: this rank's own values
    output, loss = (t.to_local() if isinstance(t, DTensor) else t for t in (output, loss))
    grads = []
    # ``params``: the sharded parameters as fully_shard left them (with reshard_after_backward
    # off the module holds unsharded tensors after backward; the gradients are on the shards).
    for fqn, p in params if params is not None else model.named_parameters():
        if fqn not in reference.grad_rows and p.grad is None:
            continue  # frozen in the replica and in the FSDP step alike
        if fqn not in reference.grad_rows:
            raise ValueError(f"{fqn}: a gradient after backward, but none in the replica")
        expected = reference.grad_rows[fqn]
        grad = p.grad
        if grad is None:
            raise ValueError(f"{fqn}: no gradient after backward")
        if isinstance(grad, DTensor):
            problem = _placement_problem(
                grad, (reference.shard_dims or {}).get(fqn, 0), (reference.inner_shards or {}).get(fqn)
            )
            if problem:
                raise ValueError(f"{fqn}: {problem}")
            grad = grad.to_local()
        try:
            diff = max_abs_diff(grad, expected, "the replica's")
        except ValueError as exc:
            raise ValueError(f"{fqn}: {exc}") from None
        grads.append({"fqn": fqn, **diff, "nonfinite": nonfinite(grad)})
    return {
        "replica_dtype": dtype_name(reference.replica_dtype),
        "forward_output": {**max_abs_diff(output, reference.output, "the replica's"), "nonfinite": nonfinite(output)},
        "loss": {
            **max_abs_diff(loss.reshape(1), reference.loss.reshape(1), "the replica's"),
            "nonfinite": nonfinite(loss),
        },
        "grads": grads,
    }
