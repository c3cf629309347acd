"""Hooks of specs/all_gather_extension.yaml: projection weights wrapped in a tensor subclass whose
FSDP all-gather extension all-gathers the shard in bfloat16 and upcasts what was gathered (the
float8 pattern, with bf16 standing in for float8: torch 2.13's test_fully_shard_extensions.py
does the same)."""

from __future__ import annotations

import torch
import torch.utils._pytree as pytree
from torch import nn
from torch.autograd.grad_mode import _unsafe_preserve_version_counter

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class BFloat16AllGather(torch.Tensor):
    """A float32 weight that FSDP all-gathers as bfloat16 (half the bytes) and upcasts after."""

    @staticmethod
    def __new__(cls, data: torch.Tensor) -> "BFloat16AllGather":
        return torch.Tensor._make_wrapper_subclass(
            cls, data.shape, data.stride(), data.storage_offset(), dtype=data.dtype, device=data.device
        )

    def __init__(self, data: torch.Tensor) -> None:
        self._data = data

    def fsdp_pre_all_gather(self, mesh, outer_size, outer_stride, module, mp_policy):
        return (self._data.to(torch.bfloat16),), None

    @torch.no_grad()
    def fsdp_post_all_gather(self, all_gather_outputs, metadata, param_dtype, *, out=None):
        (gathered,) = all_gather_outputs
        if out is not None:  # the unsharded buffer of an earlier all-gather: refill it
            with _unsafe_preserve_version_counter(out):
                out.copy_(gathered)
            return None
        upcast = gathered.to(param_dtype or torch.float32)
        return upcast, (gathered, upcast)

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs=None):
        unwrap = lambda t: t._data  # noqa: E731
        out = func(*pytree.tree_map_only(cls, unwrap, args), **pytree.tree_map_only(cls, unwrap, kwargs or {}))
        return pytree.tree_map_only(torch.Tensor, cls, out)

    def __tensor_flatten__(self):
        return ["_data"], None

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        return BFloat16AllGather(inner["_data"])

    def __repr__(self) -> str:
        return f"BFloat16AllGather({self._data!r})"


def wrap_projections(model, rank, world_size):
    """after_build: every decoder layer's projection weights become BFloat16AllGather parameters."""
    for name, module in model.named_modules():
        if name.rsplit(".", 1)[-1] in PROJECTIONS:
            module.weight = nn.Parameter(BFloat16AllGather(module.weight.detach()))
