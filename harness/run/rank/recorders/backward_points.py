"""Where a recorder can look right after FSDP2's own backward hooks, with torch's public hooks only.

FSDP2's pre-backward is a gradient hook on a unit's outputs, its post-backward the
``RegisterPostBackwardFunction`` node around its inputs (torch 2.13 ``_fsdp_state.py``): a hook
added there after FSDP's runs right after.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

__all__ = ["after_pre_backward", "after_post_backward"]


def after_pre_backward(output: Any, fn: Callable[[], None], *, every_output: bool = True) -> None:
    """Call ``fn()`` right after FSDP's pre-backward of the unit that returned ``output``."""
    outputs = output if isinstance(output, (tuple, list)) else (output,)
    for t in outputs:
        if isinstance(t, torch.Tensor) and t.requires_grad:
            t.register_hook(lambda grad: fn())
            if not every_output:
                break


def after_post_backward(args: tuple, kwargs: dict, fn: Callable[[], None]) -> bool:
    """Call ``fn()`` right after FSDP's post-backward of the unit called with ``args``/``kwargs``;
    False without the node."""
    for value in list(args) + list(kwargs.values()):
        node = getattr(value, "grad_fn", None) if isinstance(value, torch.Tensor) else None
        if node is not None and "RegisterPostBackward" in node.name():
            node.register_hook(lambda grad_inputs, grad_outputs: fn())
            return True
    return False
