"""Hook of specs/hook_error_type.yaml: a prefetch list naming a module that is not an FSDP unit.

Called by the harness (harness/run/rank/hooks.py) after each fully_shard call.
"""


def prefetch_a_plain_module(model, unit, module, rank, world_size):
    if unit == "layers.0":  # layers.0's MLP is no unit of its own: torch refuses it
        module.set_modules_to_forward_prefetch([module.mlp])
