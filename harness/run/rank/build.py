"""What a rank builds before FSDP: the model, its inputs, the loss, the optimizer, the replica.

No ``fully_shard`` here and no recording. Rank r's inputs are samples ``r*B .. r*B+B-1`` of the
seeded global batch, as the document's section "每个 rank 上的激活值（输入）".
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import model as qwen3
from harness.load.setup import RunSetup
from harness.load.units import match_params
from harness.run.rank.recorders.collectives import dtype_name
from harness.run.rank.recorders.numerics import Reference, compute_reference

__all__ = [
    "RankInputs",
    "attention_kernel",
    "build_model",
    "model_classes",
    "make_inputs",
    "make_loss",
    "make_optimizer",
    "replica_reference",
    "torch_dtype",
]

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def attention_kernel(name: str | None) -> contextlib.AbstractContextManager:
    """``setup.model.attention_kernel`` as a context: ``sdpa_kernel(SDPBackend.<NAME>)``, or nothing for None."""
    if name is None:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(getattr(SDPBackend, name.upper()))  # a pybind enum: not subscriptable


def torch_dtype(name: str | None) -> torch.dtype | None:
    """``"float16"`` -> ``torch.float16``; None -> None."""
    return getattr(torch, name) if name else None


def build_model(setup: RunSetup, config: Any, dtype: torch.dtype, device: torch.device, *, init: bool) -> nn.Module:
    """The setup's model, not sharded: ``setup.model.body`` "decoder_layers" (input [B, L, d]) or
    "causal_lm" (token ids [B, L]) of the config's class (:func:`model_classes`), in ``dtype`` on
    ``device``; ``init``: ``model.init_weights`` seeded ``setup.seed``. ValueError for another body."""
    cls = model_classes(config).get(setup.model.body)
    if cls is None:
        raise ValueError(f"setup.model.body {setup.model.body!r}: expected 'decoder_layers' or 'causal_lm'")
    module = cls(config, device=device, dtype=dtype)
    if init:
        qwen3.init_weights(module, generator=torch.Generator().manual_seed(setup.seed))
    _cast_params(module, setup.model.param_dtypes)
    return module


def _cast_params(module: nn.Module, rules: Sequence[tuple[str, str]]) -> None:
    """``setup.model.param_dtypes``: each parameter the first matching pattern names, cast in place (its
    initial values rounded to that dtype from ``model.dtype``)."""
    for fqn, p in module.named_parameters():
        dtype = next((d for pattern, d in rules if match_params(pattern, [fqn])), None)
        if dtype is not None:
            p.data = p.data.to(torch_dtype(dtype))


def model_classes(config: Any) -> dict[str, type[nn.Module]]:
    """The module class of each body: the MoE ones for a ``model.Qwen3MoeConfig``, checked first as it
    subclasses ``Qwen3Config``."""
    if isinstance(config, qwen3.Qwen3MoeConfig):
        return {"decoder_layers": qwen3.Qwen3MoeDecoderStack, "causal_lm": qwen3.Qwen3MoeForCausalLM}
    return {"decoder_layers": qwen3.Qwen3DecoderStack, "causal_lm": qwen3.Qwen3ForCausalLM}


@dataclass(frozen=True)
class RankInputs:
    """This rank's inputs: ``tensor`` hidden states [B, L, d] (N(0, 1) in float32, cast to the parameter
    dtype) or token ids [B, L] (int64 in [0, V)); ``name`` "hidden_states" or "input_ids";
    ``samples``: each local row's index in the global batch (-1: none)."""

    tensor: torch.Tensor
    name: str
    samples: list[int]

    def describe(self) -> dict[str, Any]:
        """The observation schema's ``input`` entry."""
        return {
            "name": self.name,
            "shape": list(self.tensor.shape),
            "dtype": dtype_name(self.tensor.dtype),
            "samples": self.samples,
        }


def make_inputs(
    setup: RunSetup,
    config: Any,
    rank: int,
    world_size: int,
    dtype: torch.dtype,
    device: torch.device,
    *,
    local_only: bool,
) -> RankInputs:
    """Samples ``r*B .. r*B+B-1`` of the seeded global batch of ``D * B``, on ``device``, where r is
    ``rank``'s data-parallel rank and D the data-parallel size (``world_size`` over the TP size: a
    tensor-parallel group shares its samples); ``samples`` is observed, not assumed. ``local_only``
    (simulated runs): the local shape only."""
    B, L = setup.batch_per_rank, setup.seq_len
    rank, world_size = setup.data_rank(rank), setup.data_parallel_size
    n = B if local_only else world_size * B
    generator = torch.Generator().manual_seed(setup.seed + 1)
    if setup.model.body == "decoder_layers":
        batch = torch.randn(n, L, config.hidden_size, generator=generator).to(dtype)  # (W*B, L, d)
        name = "hidden_states"
    else:
        batch = torch.randint(0, config.vocab_size, (n, L), generator=generator)  # (W*B, L)
        name = "input_ids"
    if local_only:
        return RankInputs(batch.to(device), name, list(range(rank * B, rank * B + B)))
    local = batch[rank * B : (rank + 1) * B].clone()
    return RankInputs(local.to(device), name, _rows_of(local, batch))


def _rows_of(local: torch.Tensor, batch: torch.Tensor) -> list[int]:
    """For each row of ``local``, the index of the equal row of ``batch`` (-1 if none)."""
    flat = batch.reshape(batch.shape[0], -1)
    found = []
    for row in local.reshape(local.shape[0], -1):
        hits = torch.nonzero((flat == row).all(dim=1)).flatten().tolist()
        found.append(hits[0] if hits else -1)
    return found


def make_loss(body: str) -> LossFn:
    """``loss(output, inputs)`` -> float32 scalar: the mean square (``decoder_layers``), or cross-entropy of
    logits 0..L-2 against tokens 1..L-1 (``causal_lm``)."""
    if body == "decoder_layers":
        return lambda out, inputs: out.float().pow(2).mean()

    def causal_lm_loss(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
        vocab = logits.shape[-1]
        return F.cross_entropy(logits[:, :-1].float().reshape(-1, vocab), input_ids[:, 1:].reshape(-1))

    return causal_lm_loss


def make_optimizer(setup: RunSetup, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
    """``torch.optim.SGD`` or ``AdamW`` with ``setup.optimizer.lr``; ValueError for another name."""
    name = setup.optimizer.name.lower()
    if name == "sgd":
        return torch.optim.SGD(params, lr=setup.optimizer.lr)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=setup.optimizer.lr)
    raise ValueError(f"setup.optimizer.name {setup.optimizer.name!r}: expected 'sgd' or 'adamw'")


def replica_reference(
    setup: RunSetup,
    root: nn.Module,
    inputs: torch.Tensor,
    loss_fn: LossFn,
    dtype: torch.dtype,
    world_size: int,
    coords: Sequence[int],
    divisors: dict[str, float] | None = None,
    shard_dims: dict[str, int] | None = None,
    inner_shards: dict[str, tuple[int, int, int]] | None = None,
    fsdp_groups: dict[str, tuple[int, int]] | None = None,
    output_cut: tuple[int, int, int] | None = None,
) -> Reference:
    """The plain replica's step on this rank's inputs, before ``fully_shard`` (collective): in the
    policy's ``param_dtype`` if any, else ``dtype``; gradients summed by a plain all-reduce and divided
    by ``divisors`` (FQN -> a unit's divide factor; default the world size); this rank's shard rows
    kept (along ``shard_dims``, default 0; of its TP or EP chunk, ``inner_shards``; over its own FSDP
    group, ``fsdp_groups``, where not the setup's shard dim)."""
    mp = setup.fsdp.mixed_precision
    replica_dtype = torch_dtype(mp.param_dtype) if mp is not None and mp.param_dtype else dtype
    return compute_reference(
        root,
        inputs,
        world_size=world_size,
        shard_count=setup.shard_count,
        shard_index=setup.shard_index(coords),
        loss_fn=loss_fn,
        replica_dtype=replica_dtype,
        all_reduce_sum=lambda t: dist.all_reduce(t, op=dist.ReduceOp.SUM),
        divisors=divisors,
        shard_dims=shard_dims,
        inner_shards=inner_shards,
        fsdp_groups=fsdp_groups,
        output_cut=output_cut,
    )


def reference_from_rank_0(
    setup: RunSetup,
    config: Any,
    dtype: torch.dtype,
    device: torch.device,
    loss_fn: LossFn,
    world_size: int,
    build_replica: Callable[[], nn.Module],
    folder: str,
    divisors: dict[str, float] | None = None,
    shard_dims: dict[str, int] | None = None,
) -> Reference:
    """This rank's :class:`Reference` for ``setup.numerics_reference: rank_0`` (collective): rank 0 alone
    builds the replica, runs every rank's inputs and writes each rank's reference into ``folder`` (shared
    by every rank), which each rank then loads."""
    from harness.run.rank.recorders.numerics import compute_references_on_one_rank

    mp = setup.fsdp.mixed_precision
    replica_dtype = torch_dtype(mp.param_dtype) if mp is not None and mp.param_dtype else dtype
    path = os.path.join(folder, "reference_rank{}.pt")
    if dist.get_rank() == 0:
        # the other ranks wait at the barrier below: rank 0 may use every core meanwhile
        threads = torch.get_num_threads()
        torch.set_num_threads(max(threads, len(os.sched_getaffinity(0))))
        replica = build_replica()
        references = compute_references_on_one_rank(
            replica,
            lambda r: make_inputs(setup, config, r, world_size, dtype, device, local_only=False).tensor,
            world_size=world_size,
            shard_count=setup.shard_count,
            loss_fn=loss_fn,
            replica_dtype=replica_dtype,
            divisors=divisors,
            shard_dims=shard_dims,
        )
        del replica
        for r, ref in references:
            torch.save(
                {
                    "output": ref.output.cpu(),
                    "loss": ref.loss.cpu(),
                    "grad_rows": {k: v.cpu() for k, v in ref.grad_rows.items()},
                },
                path.format(r),
            )
        del references
        torch.set_num_threads(threads)
    dist.barrier()
    saved = torch.load(path.format(dist.get_rank()), map_location=device, weights_only=True)
    return Reference(
        replica_dtype=replica_dtype,
        output=saved["output"],
        loss=saved["loss"],
        grad_rows=saved["grad_rows"],
        shard_count=setup.shard_count,
        shard_index=dist.get_rank() % setup.shard_count,
        shard_dims=dict(shard_dims or {}),
    )
