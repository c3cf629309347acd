"""Hooks of specs/all_reduce_hook.yaml: what FSDP hands set_all_reduce_hook's callable, per rank.

Called by the harness (harness/run/rank/hooks.py) with keyword arguments; each rank imports this
file in its own process, so SEEN is that rank's.
"""

SEEN = []


def record_reduce_output(reduce_output, rank, world_size):
    SEEN.append((reduce_output.numel(), str(reduce_output.dtype).removeprefix("torch."), list(reduce_output.shape)))


def seen(model, step_index, rank, world_size):
    return {
        "hook_calls": len(SEEN),
        "numels": [numel for numel, _, _ in SEEN],
        "dtypes": sorted({dtype for _, dtype, _ in SEEN}),
        "shapes": [shape for _, _, shape in SEEN],
    }
