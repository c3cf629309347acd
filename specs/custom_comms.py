"""Hooks of specs/custom_comms.yaml: an all-gather and a reduce-scatter of the spec's own for one unit.

Each is what torch 2.13's FSDPParamGroup calls in place of its DefaultAllGather /
DefaultReduceScatter (set_custom_all_gather, set_custom_reduce_scatter): allocate() for the
staging buffer, then the collective itself, here c10d's all_gather_single and reduce_scatter_single
(all_gather_into_tensor and reduce_scatter_tensor before torch 2.13). Each records what it was given;
each rank imports this file afresh.
"""

import torch
import torch.distributed as dist

SEEN = []


class RecordingAllGather:
    def allocate(self, size, *, dtype, device):
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, async_op=False):
        SEEN.append(("all_gather", input_tensor.numel(), output_tensor.numel()))
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return gather(output_tensor, input_tensor, group=group, async_op=async_op)


class RecordingReduceScatter:
    def allocate(self, size, *, dtype, device):
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        SEEN.append(("reduce_scatter", input_tensor.numel(), output_tensor.numel()))
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return scatter(output_tensor, input_tensor, op=op, group=group, async_op=async_op)


def all_gather(unit, rank, world_size):
    return RecordingAllGather()


def reduce_scatter(unit, rank, world_size):
    return RecordingReduceScatter()


def seen(model, step_index, rank, world_size):
    return {
        "all_gathers": [[numel_in, numel_out] for op, numel_in, numel_out in SEEN if op == "all_gather"],
        "reduce_scatters": [[numel_in, numel_out] for op, numel_in, numel_out in SEEN if op == "reduce_scatter"],
    }
