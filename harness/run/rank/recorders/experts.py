"""What a rank's sparse (MoE) layers did: the experts its shards hold, its tokens per expert, and
the experts whose gradient rows are zero after backward.

Dim 0 of transformers 5's fused ``gate_up_proj [E, 2*d_moe, d]`` and ``down_proj [E, d, d_moe]`` is
the expert. Counts and rows are None in simulated runs; no tensor is kept.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import model as qwen3

__all__ = ["ExpertRecorder", "FUSED_EXPERT_PARAMS"]

FUSED_EXPERT_PARAMS: tuple[str, ...] = ("gate_up_proj", "down_proj")
"""The fused expert parameters of ``model.Qwen3MoeExperts`` (dim 0 = expert)."""


def _held(param: Any, num_experts: int) -> tuple[list[int], int, int]:
    """(experts held, first expert of the local rows, shard dim), by torch's
    ``compute_local_shape_and_global_offset`` of the DTensor at this rank's mesh coordinate (it reads
    an expert-parallel ``Shard(0)`` under FSDP's ``_StridedShard`` in the order torch cut them)."""
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    from torch.utils._python_dispatch import _disable_current_modes

    if not isinstance(param, DTensor):  # not sharded: every expert
        return list(range(num_experts)), 0, -1
    dims = [pl.dim for pl in param.placements if isinstance(pl, Shard) or hasattr(pl, "split_factor")]
    dim = dims[-1] if dims else -1
    with _disable_current_modes():  # under FakeTensorMode (simulated) it would read a fake coordinate
        shape, offset = compute_local_shape_and_global_offset(param.shape, param.device_mesh, param.placements)
    size, start = int(shape[0]), int(offset[0])
    if param.to_local().numel() == 0 or size == 0:
        return [], start, dim
    return list(range(start, start + int(size))), start, dim


class ExpertRecorder:
    """The ``experts`` observation of one rank (``model.Qwen3MoeExperts`` modules found by their
    fused parameters)."""

    def __init__(self, root: nn.Module) -> None:
        self._experts: list[tuple[int, str, nn.Module]] = []  # (layer, module FQN, experts module)
        for name, module in root.named_modules():
            if all(isinstance(getattr(module, p, None), nn.Parameter) for p in FUSED_EXPERT_PARAMS):
                self._experts.append((int(module.layer_idx), name, module))
        self.shards: list[dict[str, Any]] = []
        for layer, module_fqn, module in self._experts:
            for p in FUSED_EXPERT_PARAMS:
                param = getattr(module, p)
                held, _, dim = _held(param, module.num_experts)
                self.shards.append(
                    {
                        "layer": layer,
                        "param": f"mlp.experts.{p}",
                        "fqn": f"{module_fqn}.{p}",
                        "placements": [repr(pl) for pl in getattr(param, "placements", ())],
                        "shard_dim": dim,
                        "num_experts": int(module.num_experts),
                        "experts": held,
                    }
                )
        self.tokens: list[dict[str, Any]] = []
        self.zero_grad_rows: list[dict[str, Any]] = []

    @property
    def active(self) -> bool:
        """The model has sparse layers."""
        return bool(self._experts)

    def on_step(self, layer: int, name: str, t: torch.Tensor, step_index: int | None, microbatch: int | None) -> None:
        """Keep ``step9.tokens_per_expert``'s counts as ints."""
        if name != "step9.tokens_per_expert":
            return
        counts = [int(c) for c in t.detach().tolist()] if not qwen3.has_no_data(t) else None
        self.tokens.append({"layer": int(layer), "step_index": step_index, "microbatch": microbatch, "counts": counts})

    def after_backward(self, step_index: int | None, microbatch: int | None) -> None:
        """Per fused parameter with a sharded gradient, the held experts whose gradient rows are all zero."""
        for layer, _name, module in self._experts:
            for p in FUSED_EXPERT_PARAMS:
                grad = getattr(module, p).grad
                if grad is None:  # no backward yet, or gradient sync off (the unsharded grad is FSDP's)
                    continue
                held, start, dim = _held(getattr(module, p), module.num_experts)
                local = grad.to_local() if hasattr(grad, "to_local") else grad
                zero = None
                if not qwen3.has_no_data(local):
                    # one expert row at a time: no temporary the size of the gradient, which the
                    # memory tracker would count as the run's
                    with torch.no_grad():
                        rows = range(local.shape[0]) if held else range(0)
                        first = start if dim in (0, -1) else 0  # Shard(d > 0): local row e is expert e
                        zero = [first + i for i in rows if not bool(local[i].any())]
                self.zero_grad_rows.append(
                    {
                        "layer": layer,
                        "param": f"mlp.experts.{p}",
                        "step_index": step_index,
                        "microbatch": microbatch,
                        "experts": held,
                        "zero_rows": zero,
                    }
                )

    def piece(self) -> dict[str, Any]:
        """The rank entry's ``experts``."""
        return {"shards": self.shards, "tokens": self.tokens, "zero_grad_rows": self.zero_grad_rows}
