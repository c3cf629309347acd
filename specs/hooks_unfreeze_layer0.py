"""Hooks of specs/hooks_unfreeze_layer0.yaml: layers.0 frozen at build, unfrozen by step 1's call.

No setup key says "freeze before fully_shard, unfreeze between steps": setup.freeze is for the
whole run. Called by the harness (harness/run/rank/hooks.py) with keyword arguments.
"""

LAYER = "layers.0."


def freeze_layer0(model, rank, world_size):
    for name, p in model.named_parameters():
        if name.startswith(LAYER):
            p.requires_grad_(False)


def unfreeze_layer0(model, step_index, rank, world_size):
    for name, p in model.named_parameters():
        if name.startswith(LAYER):
            p.requires_grad_(True)


def grads_seen(model, step_index, rank, world_size):
    """How many of layers.0's and layers.1's parameters hold a gradient after the step, and its dtype."""
    params = dict(model.named_parameters())
    layer0 = [p for n, p in params.items() if n.startswith(LAYER)]
    layer1 = [p for n, p in params.items() if n.startswith("layers.1.")]
    return {
        "layer0_trainable": sum(p.requires_grad for p in layer0),
        "layer0_with_grad": sum(p.grad is not None for p in layer0),
        "layer1_with_grad": sum(p.grad is not None for p in layer1),
        "grad_dtype": str(layer1[0].grad.dtype).removeprefix("torch."),
        "layer0_q_proj_grad_local_shape": (
            list(params["layers.0.self_attn.q_proj.weight"].grad.to_local().shape)
            if params["layers.0.self_attn.q_proj.weight"].grad is not None
            else None
        ),
    }
