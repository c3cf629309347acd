"""Hooks of specs/process_group_allocation_on_gloo.yaml: which collective helpers each unit's FSDP
parameter group holds after the step (read only; torch 2.13's FSDPParamGroup attributes)."""

from torch.distributed.fsdp import fully_shard


def comm_helpers(model, step_index, rank, world_size):
    """The class of each layer's all-gather and reduce-scatter helper, and whether gloo offers an allocator."""
    out = {}
    for i, layer in enumerate(model.layers):
        group = fully_shard.state(layer)._fsdp_param_group
        out[f"layer{i}_all_gather"] = type(group._all_gather_comm).__name__
        out[f"layer{i}_reduce_scatter"] = type(group._reduce_scatter_comm).__name__
    process_group = fully_shard.state(model.layers[0])._fsdp_param_group._all_gather_process_group
    out["gloo_supports_tensor_alloc"] = process_group._get_backend(
        next(model.parameters()).device
    ).supports_tensor_alloc(next(model.parameters()).device)
    return out
