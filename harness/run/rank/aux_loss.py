"""The MoE auxiliary (load-balancing) loss, added to the step's loss as transformers adds it.

transformers' ``Qwen3MoeForCausalLM.forward`` with ``output_router_logits`` (a setup's model override)
adds ``router_aux_loss_coef * aux_loss``; each rank's is over its own tokens, as the replica's.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

import torch

__all__ = ["with_router_aux_loss", "RouterAuxLoss"]

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class RouterAuxLoss:
    """``loss(output, inputs) = base(output, inputs) + coef * aux`` (a float32 scalar).

    A process-wide forward hook keeps the router logits of forwards that build a graph (not a re-run in
    backward: its forward was counted); each call uses and drops them."""

    def __init__(self, base: LossFn, config: Any) -> None:
        from torch.nn.modules.module import register_module_forward_hook

        from model.qwen3_moe import Qwen3MoeTopKRouter

        self.base, self.config = base, config
        self.needs_input_grad = getattr(base, "needs_input_grad", False)  # input_grad_penalty's inputs
        self._logits: list[torch.Tensor] = []
        me = weakref.ref(self)

        def keep(module: torch.nn.Module, args: Any, output: Any) -> None:
            owner = me()
            if (
                owner is not None
                and isinstance(module, Qwen3MoeTopKRouter)
                and torch.is_grad_enabled()
                and torch._C._current_graph_task_id() == -1
            ):
                owner._logits.append(output[0])  # (T, E) router logits, live: the aux loss backpropagates

        self._handle = register_module_forward_hook(keep)
        weakref.finalize(self, self._handle.remove)

    def remove(self) -> None:
        """Remove the forward hook (also done when this object is collected)."""
        self._handle.remove()

    def __call__(self, output: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        from model.qwen3_moe import load_balancing_loss_func

        loss = self.base(output, inputs)
        logits, self._logits = tuple(self._logits), []
        if not logits:  # no graph was built (no_grad forward): nothing to balance
            return loss
        aux = load_balancing_loss_func(logits, self.config.num_experts, self.config.num_experts_per_tok)
        return loss + self.config.router_aux_loss_coef * aux.to(loss.device)


def with_router_aux_loss(loss_fn: LossFn, config: Any) -> LossFn:
    """``loss_fn`` plus the auxiliary loss when ``config`` is a ``Qwen3MoeConfig`` with
    ``output_router_logits`` (transformers' switch); else ``loss_fn`` itself."""
    if not getattr(config, "output_router_logits", False) or getattr(config, "num_experts", None) is None:
        return loss_fn
    return RouterAuxLoss(loss_fn, config)
