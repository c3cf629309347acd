"""Where a recorder can look right after FSDP2's own backward hooks, with torch's public hooks only.

FSDP2 (torch 2.13 ``torch/distributed/fsdp/_fully_shard/_fsdp_state.py``) has no public backward
hook of its own, but both of its backward hooks sit on autograd objects a recorder can hook too:

- its pre-backward hook is a gradient hook on the unit's forward outputs, registered in its
  post-forward (``_register_pre_backward_hook``): a tensor hook registered on the same output
  after it (in a forward hook appended after FSDP's) runs right after it;
- its post-backward runs in the backward of the ``RegisterPostBackwardFunction`` node it wraps the
  unit's forward inputs in (when one needs a gradient): a hook on that node runs right after it.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

__all__ = ["after_pre_backward", "after_post_backward"]


def after_pre_backward(output: Any, fn: Callable[[], None], *, every_output: bool = True) -> None:
    """Call ``fn()`` right after FSDP's pre-backward hook of the unit that returned ``output``.

    Hooks each tensor of ``output`` (a tensor, or a tuple/list of them) that requires grad, or only
    the first with ``every_output=False``. Call from a forward hook registered after FSDP's."""
    outputs = output if isinstance(output, (tuple, list)) else (output,)
    for t in outputs:
        if isinstance(t, torch.Tensor) and t.requires_grad:
            t.register_hook(lambda grad: fn())
            if not every_output:
                break


def after_post_backward(args: tuple, kwargs: dict, fn: Callable[[], None]) -> bool:
    """Call ``fn()`` right after FSDP's post-backward of the unit called with ``args``/``kwargs``
    (as its pre-forward hook sees them, after FSDP's). The inputs of one call share one node:
    it is hooked once. False when no input carries the node (none needs a gradient: FSDP runs
    that unit's post-backward in the root's post-backward callback)."""
    for value in list(args) + list(kwargs.values()):
        node = getattr(value, "grad_fn", None) if isinstance(value, torch.Tensor) else None
        if node is not None and "RegisterPostBackward" in node.name():
            node.register_hook(lambda grad_inputs, grad_outputs: fn())
            return True
    return False
