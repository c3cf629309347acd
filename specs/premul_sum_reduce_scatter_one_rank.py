"""Hooks of specs/premul_sum_reduce_scatter_one_rank.yaml: PREMUL_SUM on a world of one NCCL rank.

Called by the harness (harness/run/rank/hooks.py) with keyword arguments after each step, on the
rank's device. Each collective runs on a fresh tensor of 2.0s with ``_make_nccl_premul_sum(0.5)``
(multiply by 0.5, then sum over the one rank): 1.0 is what PREMUL_SUM asks.
"""

import torch
import torch.distributed as dist

FACTOR = 0.5
VALUE = 2.0
NUMEL = 8


def premul_sum_one_rank(model, step_index, rank, world_size):
    """The first element after an all-reduce and after a reduce-scatter, each with PREMUL_SUM(0.5) on 2.0s."""
    device = next(model.parameters()).device
    reduced = torch.full((NUMEL,), VALUE, device=device)
    dist.all_reduce(reduced, op=dist._make_nccl_premul_sum(FACTOR))
    scattered = torch.empty(NUMEL // world_size, device=device)
    source = torch.full((NUMEL,), VALUE, device=device)
    dist.reduce_scatter_tensor(scattered, source, op=dist._make_nccl_premul_sum(FACTOR))
    return {"world_size": world_size, "all_reduce": reduced[0].item(), "reduce_scatter": scattered[0].item()}
