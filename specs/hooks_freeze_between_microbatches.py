"""Hooks of specs/hooks_freeze_between_microbatches.yaml: layers.0 frozen after microbatch 0's backward.

A schedule step's freeze/unfreeze act at the start of a step; nothing declarative acts between two
microbatches of one step, so this hook does. Called by the harness (harness/run/rank/hooks.py) with
keyword arguments; the schedule's single-process reference gets the same calls.
"""


def freeze_layer0_after_first_microbatch(model, step_index, microbatch, rank, world_size):
    if step_index == 0 and microbatch == 0:
        for name, p in model.named_parameters():
            if name.startswith("layers.0."):
                p.requires_grad_(False)
